"""The app-server platform against a scripted server: what it sends, and bad input.

The server is a local ``websockets`` server on a private Unix socket (tests/codex/fakeserver.py)
that answers from a table and records every request, so a test can assert exactly what rekall
sent, and that nothing was sent twice. The real daemon: tests/codex/test_app_server_platform.py.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.server import ServerConnection

from rekall.kernel import events as ev
from rekall.adapters.app_server.platform import NotAConversation, SharedAppServerPlatform, ThreadNotServed
from rekall.kernel.errors import IpcError
from tests.codex.fakeserver import FAKE_VERSION, env_for, fake_app_server, folder  # noqa: F401 (a fixture)

pytestmark = pytest.mark.anyio

T = "01a22e14-b94d-7cd2-9107-6bcbab7e9304"
IDLE_THREAD = {"id": T, "status": {"type": "idle"}, "threadSource": None,
               "turns": [{"id": "u1", "status": "completed", "items": [{"type": "userMessage", "id": "m"}]}]}
USAGE = {"method": "thread/tokenUsage/updated",
         "params": {"threadId": T, "turnId": "u1", "tokenUsage": {"last": {"totalTokens": 35921},
                                                                  "modelContextWindow": 258400}}}


class Script:
    """Answers by method; a callable answer may send more frames. Records each request's method."""

    def __init__(self, **answers: Any) -> None:
        self.answers = {name.replace("__", "/"): value for name, value in answers.items()}
        self.sent: list[str] = []
        self.params: dict[str, list[Any]] = {}
        self.ws: ServerConnection | None = None

    async def __call__(self, ws: ServerConnection, message: dict[str, Any]) -> None:
        self.ws = ws
        self.sent.append(message["method"])
        self.params.setdefault(message["method"], []).append(message.get("params"))
        answer = self.answers.get(message["method"], {"error": {"code": -32600, "message": "unknown method"}})
        if callable(answer):
            await answer(ws, message)
            return
        await ws.send(json.dumps({"id": message["id"], **answer}))


def ok(result: Any) -> dict[str, Any]:
    return {"result": result}


def loaded(*ids: str) -> dict[str, Any]:
    return ok({"data": list(ids), "nextCursor": None})


def listed(turns: list[Any]) -> dict[str, Any]:
    """``thread/turns/list`` as rekall asks for it (newest first)."""
    return ok({"data": list(reversed(turns)), "nextCursor": None})


#: ``thread/resume`` with ``excludeTurns``: the thread without its turns, and no token count replayed.
RESUMED = ok({"thread": {**IDLE_THREAD, "turns": []}})


def then(answer: dict[str, Any], *frames: Any) -> Callable[[ServerConnection, dict[str, Any]], Any]:
    async def send(ws: ServerConnection, message: dict[str, Any]) -> None:
        await ws.send(json.dumps({"id": message["id"], **answer}))
        for frame in frames:
            await ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    return send


async def test_observing_reads_and_never_resumes(folder: Path) -> None:
    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": {**IDLE_THREAD, "turns": []}}),
                    thread__turns__list=ok({"data": list(reversed(IDLE_THREAD["turns"])), "nextCursor": None}))
    async with fake_app_server(folder / "app.sock", script):
        with anyio.fail_after(10):
            seen = await SharedAppServerPlatform(env_for(folder / "app.sock")).observe(T, request_timeout_s=5)
    assert script.sent == ["thread/loaded/list", "thread/read", "thread/turns/list", "thread/goal/get"]
    assert seen.facts.idle and seen.facts.tokens is None and seen.owner_id is None
    assert seen.details["serverVersion"] == FAKE_VERSION and "headroomNote" in seen.details


async def test_the_terminal_uis_title_thread_is_never_taken_for_the_conversation(folder: Path) -> None:
    title = {**IDLE_THREAD, "threadSource": "thread_title"}
    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": title}),
                    thread__resume=ok({"thread": title}))
    platform = SharedAppServerPlatform(env_for(folder / "app.sock"))
    async with fake_app_server(folder / "app.sock", script):
        with anyio.fail_after(10):
            with pytest.raises(NotAConversation, match="title request"):
                await platform.observe(T, request_timeout_s=5)
            with pytest.raises(NotAConversation) as caught:
                await platform.follow(T, request_timeout_s=5)
    assert "CODEX_THREAD_ID" in caught.value.hint
    assert "thread/turns/list" not in script.sent and "thread/resume" not in script.sent


async def test_a_thread_the_server_has_not_loaded_is_never_resumed(folder: Path) -> None:
    script = Script(thread__loaded__list=loaded("another"))
    platform = SharedAppServerPlatform(env_for(folder / "app.sock"))
    async with fake_app_server(folder / "app.sock", script):
        with anyio.fail_after(10):
            with pytest.raises(ThreadNotServed, match="does not have thread .* loaded") as caught:
                await platform.follow(T, request_timeout_s=5)
            with pytest.raises(ThreadNotServed):
                await platform.observe(T, request_timeout_s=5)
    assert "codex --remote unix://" in caught.value.hint
    assert script.sent == ["thread/loaded/list", "thread/loaded/list"]  # no thread/resume, no thread/read


async def test_a_thread_without_a_rollout_says_send_a_first_message(folder: Path) -> None:
    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": {**IDLE_THREAD, "turns": []}}),
                    thread__resume={"error": {"code": -32600, "message": f"no rollout found for thread id {T}"}})
    async with fake_app_server(folder / "app.sock", script):
        with anyio.fail_after(10), pytest.raises(ThreadNotServed) as caught:
            await SharedAppServerPlatform(env_for(folder / "app.sock")).follow(T, request_timeout_s=5)
    assert "no rollout yet" in caught.value.message and caught.value.hint == "send a first message, then schedule"


def usage(turn_id: str, tokens: int) -> dict[str, Any]:
    return {"method": "thread/tokenUsage/updated",
            "params": {"threadId": T, "turnId": turn_id, "tokenUsage": {"last": {"totalTokens": tokens},
                                                                        "modelContextWindow": 258400}}}


async def test_following_resumes_without_the_history_takes_the_baseline_from_the_listing_and_acts_once_each(
        folder: Path) -> None:
    earlier = [{"id": "c0", "status": "completed", "items": [{"type": "contextCompaction", "id": "old"}]},
               *IDLE_THREAD["turns"]]
    item = {"type": "contextCompaction", "id": "new"}
    compaction = [{"method": "turn/started", "params": {"threadId": T, "turn": {"id": "c1", "status": "inProgress",
                                                                               "items": []}}},
                  {"method": "item/started", "params": {"threadId": T, "turnId": "c1", "item": item}},
                  usage("c1", 35921), usage("c1", 36800), usage("c1", 4100),
                  {"method": "item/completed", "params": {"threadId": T, "turnId": "c1", "item": item}}]
    turn = {"id": "r1", "status": "inProgress", "items": []}
    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": {**IDLE_THREAD, "turns": []}}),
                    thread__resume=RESUMED, thread__turns__list=listed(earlier),
                    thread__compact__start=then(ok({}), *compaction), turn__start=ok({"turn": turn}))
    async with fake_app_server(folder / "app.sock", script):
        with anyio.fail_after(10):
            thread = await SharedAppServerPlatform(env_for(folder / "app.sock")).follow(T, request_timeout_s=5)
            baseline = thread.snapshot().facts
            events = thread.events()
            compacted = await thread.compact()
            async for event in events:
                if isinstance(event, ev.CompactionCompleted):
                    break
            done = thread.snapshot().facts
            started = await thread.start_turn("continue", "job-1")
            await thread.aclose()
    assert script.params["thread/resume"] == [{"threadId": T, "excludeTurns": True}]
    assert baseline.completed_compaction_ids == {"old"} and baseline.latest_user_turn_id == "u1"
    assert baseline.tokens is None and baseline.tokens_before_compaction is None  # no count replayed
    # The count from before the compaction is the turn's first; the one after it, the last before completion.
    assert (done.tokens_before_compaction, done.tokens) == (35921, 4100)
    assert done.completed_compaction_ids == {"old", "new"}
    assert compacted.ok and started.ok and (started.turn_id, started.turn_status) == ("r1", "inProgress")
    assert script.sent == ["thread/loaded/list", "thread/read", "thread/goal/get", "thread/resume", "thread/turns/list",
                           "thread/compact/start", "turn/start"]
    assert thread.connection_note() == {"platform": "app-server", "ownerId": None, "serverVersion": None, "endpoint": None}


async def test_a_refused_request_is_not_delivered_and_a_silent_one_is_unknown(folder: Path) -> None:
    async def silent(ws: ServerConnection, message: dict[str, Any]) -> None:
        pass

    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": IDLE_THREAD}), thread__resume=RESUMED,
                    thread__turns__list=listed(IDLE_THREAD["turns"]),
                    thread__compact__start={"error": {"code": -32600, "message": "thread not found"}}, turn__start=silent)
    async with fake_app_server(folder / "app.sock", script):
        with anyio.fail_after(10):
            thread = await SharedAppServerPlatform(env_for(folder / "app.sock")).follow(T, request_timeout_s=0.3)
            refused, unanswered = await thread.compact(), await thread.start_turn("continue", "job-1")
            await thread.aclose()
    assert (refused.failure.code, refused.failure.delivery) == ("request_failed", "not_delivered")
    assert "thread not found" in refused.failure.message
    assert (unanswered.failure.code, unanswered.failure.delivery) == ("request_timeout", "unknown")
    assert script.sent.count("thread/compact/start") == 1 and script.sent.count("turn/start") == 1


@pytest.mark.parametrize(("frame", "said"), [("<html>not json</html>", "not JSON"),
                                             (json.dumps([1, 2]), "not an object"),
                                             (json.dumps({"method": "x", "params": {"pad": "x" * 5000}}), "bytes")])
async def test_a_frame_that_is_not_json_rpc_or_too_large_ends_the_follow_with_the_reason(
        folder: Path, frame: str, said: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rekall.adapters.app_server import client as shared

    bounded = functools.partial(shared.open_shared_app_server, max_message_bytes=4096)
    monkeypatch.setattr("rekall.adapters.app_server.platform.open_shared_app_server", bounded)
    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": IDLE_THREAD}), thread__resume=RESUMED,
                    thread__turns__list=then(listed(IDLE_THREAD["turns"]), frame))
    async with fake_app_server(folder / "app.sock", script):
        with anyio.fail_after(10):
            thread = await SharedAppServerPlatform(env_for(folder / "app.sock")).follow(T, request_timeout_s=5)
            lost = await anext(thread.events())
            after = await thread.compact()  # the link is gone: provably not sent
            await thread.aclose()
    assert isinstance(lost, ev.ConnectionLost) and said in lost.detail
    assert (after.failure.code, after.failure.delivery) == ("connection_lost", "not_delivered")
    assert "thread/compact/start" not in script.sent


async def test_a_server_that_dies_while_followed_is_reported_once_and_reconnecting_fails_clearly(folder: Path) -> None:
    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": IDLE_THREAD}), thread__resume=RESUMED,
                    thread__turns__list=listed(IDLE_THREAD["turns"]))
    platform = SharedAppServerPlatform(env_for(folder / "app.sock"))
    with anyio.fail_after(10):
        async with fake_app_server(folder / "app.sock", script):
            thread = await platform.follow(T, request_timeout_s=5)
        lost = await anext(thread.events())  # the server stopped: its socket is gone
        with pytest.raises(IpcError) as caught:
            await thread.reconnect()
        await thread.aclose()
    assert isinstance(lost, ev.ConnectionLost)
    assert "nothing is listening" in caught.value.message and "codex app-server daemon start" in caught.value.hint
    assert script.sent == ["thread/loaded/list", "thread/read", "thread/goal/get", "thread/resume", "thread/turns/list"]


async def test_a_daemon_that_dies_after_accepting_the_compaction_fails_the_job_with_an_unknown_outcome(
        folder: Path, tmp_path: Path) -> None:
    import os

    from rekall.usecases import service
    from rekall.kernel.settings import WorkerSettings
    from rekall.states import JobState
    from rekall.store import JobStore
    from rekall.worker.reactor import Worker
    from tests.mcpkit import HANDOFF

    sock = folder / "app.sock"

    async def accept_then_die(ws: ServerConnection, message: dict[str, Any]) -> None:
        await ws.send(json.dumps({"id": message["id"], "result": {}}))
        await ws.send(json.dumps({"method": "item/started", "params": {
            "threadId": T, "turnId": "c", "item": {"type": "contextCompaction", "id": "x"}}}))
        os.unlink(sock)  # the daemon is gone: nothing listens there any more
        await ws.close()

    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": IDLE_THREAD}),
                    thread__turns__list=ok({"data": IDLE_THREAD["turns"], "nextCursor": None}),
                    thread__resume=RESUMED, thread__compact__start=accept_then_die)
    env = {**env_for(sock), "CODEX_HOME": str(tmp_path), "TMPDIR": str(tmp_path), "PATH": "",
           "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
    settings = WorkerSettings(idle_stable_s=0.05, deadline_s=20, reconnect_delays_s=(0.02, 0.05),
                              reconnect_window_s=0.5)
    async with fake_app_server(sock, script):
        with anyio.fail_after(30):
            scheduled = await service.schedule(T, HANDOFF, env=env, spawn=lambda *a, **k: os.getpid())
            store = JobStore.open(env)
            final = await Worker(store, T, scheduled["jobId"], settings=settings, env=env).run()
    status = store.read_status(T)
    assert scheduled["platform"] == "app-server"
    assert final is JobState.FAILED and status.errorCode == "connection_lost", status
    assert status.outcomeMayBeUnknown is True, status
    assert "app.sock does not exist, so none listens there; rekall looked at the path REKALL_APP_SERVER_SOCKET " \
           "names" in status.error
    assert script.sent.count("thread/compact/start") == 1 and "turn/start" not in script.sent


async def test_a_server_whose_codex_fails_the_schema_checks_is_refused_by_schedule_and_red_in_doctor(
        folder: Path, tmp_path: Path) -> None:
    import shutil

    from rekall.usecases import service
    from rekall.usecases.doctor import diagnose
    from tests.codex.drift import remove_context_compaction
    from tests.usecases.test_doctor import SCHEMA_EXCERPT, serving_schema

    drifted = tmp_path / "schema"
    shutil.copytree(SCHEMA_EXCERPT, drifted)
    remove_context_compaction(drifted)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex").write_text("#!/bin/sh\n" + serving_schema(drifted))
    (bin_dir / "codex").chmod(0o755)
    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": IDLE_THREAD}),
                    thread__turns__list=ok({"data": IDLE_THREAD["turns"], "nextCursor": None}))
    env = {**env_for(folder / "app.sock"), "CODEX_HOME": str(tmp_path), "TMPDIR": str(tmp_path),
           "PATH": f"{bin_dir}:/usr/bin:/bin", "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
    async with fake_app_server(folder / "app.sock", script):
        with anyio.fail_after(60):
            with pytest.raises(service.Refused, match="schema is not compatible"):
                await service.schedule(T, None, env=env, spawn=lambda *a, **k: pytest.fail("no worker may start"))
            rows = {row.name: row for row in (await diagnose(env)).rows}
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").glob("*.journal.jsonl"))
    schema = rows["app_server_schema"]
    assert schema.level == "RED" and "item_started.context_compaction" in schema.detail
    assert f"{bin_dir}/codex (the `codex` on PATH (the server is not daemon-managed" in schema.detail
    assert rows["app_server"].level == "GREEN" and "not managed by `codex app-server daemon`" in rows["app_server"].detail
    assert "thread/compact/start" not in script.sent and "thread/resume" not in script.sent


async def test_schedule_refuses_while_the_listing_shows_a_compaction_running(folder: Path, tmp_path: Path) -> None:
    from rekall.usecases import service

    running = [*IDLE_THREAD["turns"], {"id": "c", "status": "inProgress",
                                       "items": [{"type": "contextCompaction", "id": "x"}]}]
    script = Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": {**IDLE_THREAD, "turns": []}}),
                    thread__turns__list=ok({"data": list(reversed(running)), "nextCursor": None}))
    env = {**env_for(folder / "app.sock"), "CODEX_HOME": str(tmp_path), "TMPDIR": str(tmp_path), "PATH": "",
           "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
    async with fake_app_server(folder / "app.sock", script):
        with anyio.fail_after(20), pytest.raises(service.Refused, match=r"compaction in progress \(x\)"):
            await service.schedule(T, None, env=env, spawn=lambda *a, **k: pytest.fail("no worker may start"))
    assert "thread/compact/start" not in script.sent
