"""Every failure of a job on the shared app-server has a designed outcome, and nothing is sent twice.

A scripted ``websockets`` server on a private Unix socket plays the daemon (tests/codex/fakeserver.py)
and records every request, so each test asserts exactly what rekall sent. The worker is rekall's
own (in this process, with short settings; a real detached worker for the explicit cancel).
Covered elsewhere: the daemon dying after it accepted the compaction (tests/codex/test_platform.py),
bad frames, refused and silent requests (same file), the real daemon (test_app_server_job.py,
test_terminal_ui.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.server import ServerConnection

from rekall.usecases import service
from rekall.kernel.settings import WorkerSettings
from rekall.surfaces.explain import build_explanation, describe_outcome
from rekall.states import JobState
from rekall.states.status import JobStatus
from rekall.store import JobStore
from rekall.worker.reactor import Worker
from tests.codex.fakeserver import env_for, fake_app_server, folder  # noqa: F401 (a fixture)
from tests.codex.test_platform import IDLE_THREAD, T, loaded, ok, then
from tests.mcpkit import HANDOFF, wait_for_worker_exit

pytestmark = pytest.mark.anyio

ACTIVE_THREAD = {**IDLE_THREAD, "status": {"type": "active", "activeFlags": []}}
COMPACT_ONLY = {**HANDOFF, "resume": False}
WAIT_S = 30.0


def compaction_frames(tokens_after: int, tokens_before: int = 35921) -> list[dict[str, Any]]:
    """What the daemon sends for a compaction turn, in its order: the count from before the
    compaction, the compaction request's own, the compacted size, then the item's completion."""
    item = {"type": "contextCompaction", "id": "cmp-1"}

    def usage(tokens: int) -> dict[str, Any]:
        return {"method": "thread/tokenUsage/updated", "params": {"threadId": T, "turnId": "c1", "tokenUsage": {
            "last": {"totalTokens": tokens}, "modelContextWindow": 258400}}}

    return [{"method": "turn/started", "params": {"threadId": T, "turn": {"id": "c1", "status": "inProgress", "items": []}}},
            {"method": "item/started", "params": {"threadId": T, "turnId": "c1", "item": item}},
            usage(tokens_before), usage(tokens_before + 900), usage(tokens_after),
            {"method": "item/completed", "params": {"threadId": T, "turnId": "c1", "item": item}},
            {"method": "turn/completed", "params": {"threadId": T, "turn": {"id": "c1", "status": "completed", "items": []}}}]


class Server:
    """The scripted daemon: answers by method, records each request and each answer rekall sends."""

    def __init__(self, thread: dict[str, Any], **answers: Any) -> None:
        self.answers: dict[str, Any] = {"thread/loaded/list": loaded(T), "thread/read": ok({"thread": thread}),
                                        "thread/turns/list": ok({"data": thread["turns"], "nextCursor": None}),
                                        # excludeTurns: no turns, and no token count replayed
                                        "thread/resume": ok({"thread": {**thread, "turns": []}}),
                                        "thread/goal/get": ok({"goal": None})}
        self.answers.update({name.replace("__", "/"): value for name, value in answers.items()})
        self.sent: list[str] = []
        self.answered: list[dict[str, Any]] = []  # responses rekall sent to OUR requests (must stay empty)
        self.ws: ServerConnection | None = None
        self.resumed = anyio.Event()

    async def __call__(self, ws: ServerConnection, message: dict[str, Any]) -> None:
        if "method" not in message:
            self.answered.append(message)
            return
        self.ws = ws
        self.sent.append(message["method"])
        answer = self.answers.get(message["method"], {"error": {"code": -32600, "message": "unknown method"}})
        if callable(answer):
            await answer(ws, message)
        else:
            await ws.send(json.dumps({"id": message["id"], **answer}))
        if message["method"] == "thread/turns/list" and "thread/resume" in self.sent:
            self.resumed.set()  # attached: resumed, and the baseline listed

    async def push(self, *frames: dict[str, Any]) -> None:
        assert self.ws is not None, "nobody is connected"
        for frame in frames:
            await self.ws.send(json.dumps(frame))


def env_of(sock: Path, tmp_path: Path) -> dict[str, str]:
    return {**env_for(sock), "CODEX_HOME": str(tmp_path), "TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin",
            "REKALL_JOBS_DIR": str(tmp_path / "jobs")}


SETTINGS = WorkerSettings(idle_stable_s=0.05, deadline_s=20, request_timeout_s=2, reconnect_delays_s=(0.02, 0.05),
                          reconnect_window_s=5)


async def scheduled(env: dict[str, str], handoff: dict[str, Any] = COMPACT_ONLY) -> str:
    """What the MCP tool does (the server must be up); the worker is started by the test."""
    return (await service.schedule(T, handoff, env=env, spawn=lambda *a, **k: os.getpid()))["jobId"]


@asynccontextmanager
async def worker_running(env: dict[str, str], job_id: str,
                         settings: WorkerSettings = SETTINGS) -> AsyncIterator[Callable[[], JobStatus]]:
    """Run the job's worker in this process; yields the job's status reader; waits for its end."""
    store = JobStore.open(env)
    async with anyio.create_task_group() as tg:
        tg.start_soon(Worker(store, T, job_id, settings=settings, env=env).run)
        yield lambda: store.read_status(T)


@asynccontextmanager
async def first_server(sock: Path, server: Server) -> AsyncIterator[Callable[[], Any]]:
    """A server that the test stops mid-job (the daemon dying): yields its ``stop``."""
    running = fake_app_server(sock, server)
    await running.__aenter__()
    stopped = False

    async def stop() -> None:
        nonlocal stopped
        if not stopped:
            stopped = True
            await running.__aexit__(None, None, None)
            sock.unlink(missing_ok=True)

    try:
        yield stop
    finally:
        await stop()


async def until_state(read: Callable[[], JobStatus], *states: str) -> JobStatus:
    with anyio.fail_after(WAIT_S):
        while (status := read()).state not in states:
            await anyio.sleep(0.02)
    return status


async def test_an_explicit_cancel_stops_a_real_worker_waiting_for_idle_and_nothing_is_sent(
        folder: Path, tmp_path: Path) -> None:
    server = Server(ACTIVE_THREAD)  # the user's turn runs: the worker waits
    env = {**env_of(folder / "app.sock", tmp_path), "REKALL_IDLE_STABLE_MS": "50"}
    async with fake_app_server(folder / "app.sock", server):
        with anyio.fail_after(60):
            scheduled = await service.schedule(T, COMPACT_ONLY, env=env)  # a real detached worker
            await server.resumed.wait()
            store = JobStore.open_reader(env)
            await until_state(lambda: store.read_status(T), "waiting_for_idle")
            asked = service.cancel(T, scheduled["jobId"], env=env)
            final = await until_state(lambda: store.read_status(T), "cancelled", "failed", "timed_out")
            await wait_for_worker_exit(final.pid)
    assert asked["cancellationRequested"] is True and asked["outcomeMayBeUnknown"] is False
    assert final.state == "cancelled" and final.outcomeMayBeUnknown is False, final
    assert describe_outcome(final.state, final).startswith("Cancelled on request")
    assert "thread/compact/start" not in server.sent and "turn/start" not in server.sent


async def job_waiting_then(folder: Path, tmp_path: Path, *frames: dict[str, Any]) -> tuple[JobStatus, Server]:
    """A job waiting for a busy thread, then ``frames`` from the server: the job's end, and the server."""
    server = Server(ACTIVE_THREAD)
    async with fake_app_server(folder / "app.sock", server):
        env = env_of(folder / "app.sock", tmp_path)
        async with worker_running(env, await scheduled(env)) as read:
            await until_state(read, "waiting_for_idle")
            await server.resumed.wait()
            await server.push(*frames)
            final = await until_state(read, "cancelled", "failed", "timed_out")
    return final, server


async def test_new_user_input_before_the_compaction_cancels_the_job_and_nothing_is_sent(
        folder: Path, tmp_path: Path) -> None:
    new_turn = {"id": "u2", "status": "inProgress", "items": []}
    final, server = await job_waiting_then(
        folder, tmp_path, {"method": "turn/started", "params": {"threadId": T, "turn": new_turn}},
        {"method": "item/started", "params": {"threadId": T, "turnId": "u2", "item": {"type": "userMessage", "id": "m2"}}})
    assert final.state == "cancelled" and final.outcomeMayBeUnknown is False, final
    assert describe_outcome(final.state, final).startswith("Cancelled: new user input arrived")
    assert "thread/compact/start" not in server.sent


def goal(status: str) -> dict[str, Any]:
    """A ``ThreadGoal`` as 0.171.0 sends it (``thread/goal/get``, ``thread/goal/updated``)."""
    return {"threadId": T, "objective": "write the changelog", "status": status, "tokenBudget": None,
            "tokensUsed": 0, "timeUsedSeconds": 0, "createdAt": 1796172073, "updatedAt": 1796172073}


async def test_a_goal_that_becomes_active_while_the_job_waits_ends_it_with_that_reason_and_nothing_is_sent(
        folder: Path, tmp_path: Path) -> None:
    # What 0.171.0 sends when a client sets the goal active: the update (no turn yet), then the
    # goal's own turn, which holds no user message.
    goal_turn = {"id": "g1", "status": "inProgress", "items": []}
    final, server = await job_waiting_then(
        folder, tmp_path, {"method": "thread/goal/updated", "params": {"threadId": T, "turnId": None,
                                                                       "goal": goal("active")}},
        {"method": "turn/started", "params": {"threadId": T, "turn": goal_turn}})
    assert final.state == "cancelled" and final.reason == "goal_active", final
    assert describe_outcome(final.state, final).startswith("Cancelled: the thread's goal became active")
    assert "thread/compact/start" not in server.sent and "turn/start" not in server.sent


@pytest.mark.parametrize("ask", ["probe", "schedule"])
async def test_a_thread_whose_goal_is_active_is_refused_before_a_job_exists(
        folder: Path, tmp_path: Path, ask: str) -> None:
    server = Server(IDLE_THREAD, thread__goal__get=ok({"goal": goal("active")}))
    async with fake_app_server(folder / "app.sock", server):
        env = env_of(folder / "app.sock", tmp_path)
        with anyio.fail_after(WAIT_S), pytest.raises(service.Refused) as caught:
            if ask == "probe":
                await service.probe(T, env=env)
            else:
                await service.schedule(T, COMPACT_ONLY, env=env, spawn=lambda *a, **k: pytest.fail("spawned"))
    assert caught.value.code == "goal_active" and "has an active goal" in caught.value.message
    assert "`/goal pause`" in caught.value.hint and "then schedule" in caught.value.hint
    assert JobStore.open(env).read_status(T).state == "not_scheduled"
    assert not {"thread/resume", "thread/compact/start", "turn/start"} & set(server.sent)


async def test_a_pending_approval_holds_the_job_in_waiting_for_idle_until_the_user_answers_it(
        folder: Path, tmp_path: Path) -> None:
    approval = {"id": 99, "method": "item/commandExecution/requestApproval",
                "params": {"threadId": T, "turnId": "u1", "itemId": "cmd-1"}}
    server = Server(IDLE_THREAD, thread__resume=then(ok({"thread": {**IDLE_THREAD, "turns": []}}), approval),
                    thread__compact__start=lambda ws, m: push_after(ws, m, compaction_frames(6000)))
    async with fake_app_server(folder / "app.sock", server):
        env = env_of(folder / "app.sock", tmp_path)
        async with worker_running(env, await scheduled(env)) as read:
            await server.resumed.wait()
            # Nothing to await for "nothing happens": 20 debounce periods of an idle thread with the request pending.
            await anyio.sleep(20 * SETTINGS.idle_stable_s)
            held = read()
            assert held.state == "waiting_for_idle" and "thread/compact/start" not in server.sent, held
            await server.push({"method": "serverRequest/resolved", "params": {"threadId": T, "requestId": 99}})
            final = await until_state(read, "completed", "failed", "timed_out", "cancelled")
    assert final.state == "completed", final
    assert server.sent.count("thread/compact/start") == 1
    assert server.answered == []  # rekall never answers the user's approval


async def push_after(ws: ServerConnection, message: dict[str, Any], frames: list[dict[str, Any]]) -> None:
    await ws.send(json.dumps({"id": message["id"], "result": {}}))
    for frame in frames:
        await ws.send(json.dumps(frame))


async def test_a_daemon_restarting_while_the_job_waits_is_reconnected_and_the_compaction_is_sent_once(
        folder: Path, tmp_path: Path) -> None:
    sock = folder / "app.sock"
    before = Server(ACTIVE_THREAD)
    after = Server(IDLE_THREAD, thread__compact__start=lambda ws, m: push_after(ws, m, compaction_frames(6000)))
    env = env_of(sock, tmp_path)
    async with first_server(sock, before) as stop:
        async with worker_running(env, await scheduled(env)) as read:
            await before.resumed.wait()
            await until_state(read, "waiting_for_idle")
            await stop()  # the daemon is gone ...
            async with fake_app_server(sock, after):  # ... and back, within the reconnect window
                final = await until_state(read, "completed", "failed", "timed_out", "cancelled")
    assert final.state == "completed" and final.outcomeMayBeUnknown is False, final
    assert "thread/compact/start" not in before.sent
    assert after.sent.count("thread/compact/start") == 1 and "thread/resume" in after.sent


async def test_a_compaction_request_lost_in_a_restart_is_never_sent_again_and_the_outcome_is_unknown(
        folder: Path, tmp_path: Path) -> None:
    sock = folder / "app.sock"

    async def vanish(ws: ServerConnection, message: dict[str, Any]) -> None:
        sock.unlink(missing_ok=True)  # the daemon restarts after reading the request, before answering
        await ws.close()

    before = Server(IDLE_THREAD, thread__compact__start=vanish)
    after = Server(IDLE_THREAD)
    env = env_of(sock, tmp_path)
    settling = SETTINGS._replace(settle_s=0.5)  # the quiet thread settles it (60 s by default)
    async with first_server(sock, before) as stop:
        async with worker_running(env, await scheduled(env), settling) as read:
            await until_state(read, "requesting", "accepted", "failed")
            with anyio.fail_after(WAIT_S):
                while "thread/compact/start" not in before.sent:
                    await anyio.sleep(0.02)
            await stop()
            async with fake_app_server(sock, after):
                final = await until_state(read, "completed", "failed", "timed_out", "cancelled")
    assert (final.state, final.errorCode, final.outcomeMayBeUnknown) == ("failed", "outcome_unknown", True), final
    assert final.error.startswith("the answer to the request sent in requesting was lost; after reconnecting, "
                                     "the owner showed the thread idle")
    assert "may or may not have reached the thread's owner; nothing was retried" in final.error
    assert before.sent.count("thread/compact/start") == 1 and "thread/compact/start" not in after.sent


async def test_the_headroom_guard_refuses_the_continuation_with_a_plain_reason(folder: Path, tmp_path: Path) -> None:
    # Codex keeps recent user messages beside the summary: 250,000 → 200,000 of 258,400 is too full.
    server = Server(IDLE_THREAD,
                    thread__compact__start=lambda ws, m: push_after(ws, m, compaction_frames(200000, 250000)))
    async with fake_app_server(folder / "app.sock", server):
        env = env_of(folder / "app.sock", tmp_path)
        async with worker_running(env, await scheduled(env, HANDOFF)) as read:
            final = await until_state(read, "skipped", "resumed", "failed", "timed_out", "cancelled")
    assert final.state == "skipped" and final.resumeSkipReason == "more_than_60_percent_used", final
    assert "77% of the context window was in use after compaction, above the 60% limit" in \
        describe_outcome(final.state, final)
    assert "turn/start" not in server.sent and server.sent.count("thread/compact/start") == 1


async def test_a_thread_closed_by_its_client_ends_the_job_with_the_reason_and_nothing_is_sent(
        folder: Path, tmp_path: Path) -> None:
    server = Server(ACTIVE_THREAD)
    async with fake_app_server(folder / "app.sock", server):
        env = env_of(folder / "app.sock", tmp_path)
        async with worker_running(env, await scheduled(env)) as read:
            await server.resumed.wait()
            await until_state(read, "waiting_for_idle")
            server.answers["thread/loaded/list"] = loaded()  # the server unloaded it
            await server.push({"method": "thread/closed", "params": {"threadId": T}})
            final = await until_state(read, "failed", "cancelled", "timed_out", "completed")
    assert (final.state, final.errorCode, final.outcomeMayBeUnknown) == ("failed", "connection_lost", False)
    assert final.error.startswith("could not reconnect: ") and f"does not have thread {T} loaded" in final.error
    notes = build_explanation(JobStore.open_reader(env), final.jobId)["notes"]
    assert [n["detail"]["detail"] for n in notes if n["kind"] == "connection_lost"] == [
        f"thread {T} was closed on the shared app-server (thread/closed)"]
    assert "thread/compact/start" not in server.sent


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a socket to another user")
async def test_a_socket_replaced_by_one_owned_by_someone_else_is_refused_and_nothing_is_sent(
        folder: Path, tmp_path: Path) -> None:
    sock = folder / "app.sock"
    before, stranger = Server(ACTIVE_THREAD), Server(IDLE_THREAD)
    env = env_of(sock, tmp_path)
    async with first_server(sock, before) as stop:
        async with worker_running(env, await scheduled(env)) as read:
            await before.resumed.wait()
            await until_state(read, "waiting_for_idle")
            await stop()
            async with fake_app_server(sock, stranger):
                os.chown(sock, 65534, 65534)  # nobody's socket now answers at the same path
                final = await until_state(read, "failed", "completed", "timed_out", "cancelled")
    assert final.state == "failed" and final.outcomeMayBeUnknown is False, final
    assert "owned by uid 65534" in final.error, final
    assert stranger.sent == [] and "thread/compact/start" not in before.sent


async def test_on_the_app_server_the_worker_resumes_the_thread_only_once_it_has_claimed_the_job(
        folder: Path, tmp_path: Path) -> None:
    # Following there is `thread/resume`, which every client hears of: unlike the extension's
    # read-only follow, it waits until the journal says that this worker owns the job.
    server = Server(ACTIVE_THREAD)
    resume, states_at_resume = then(server.answers["thread/resume"]), []
    env = env_of(folder / "app.sock", tmp_path)

    async def recording(ws: ServerConnection, message: dict[str, Any]) -> None:
        states_at_resume.append(JobStore.open_reader(env).read_status(T).state)
        await resume(ws, message)

    server.answers["thread/resume"] = recording
    async with fake_app_server(folder / "app.sock", server):
        job = await scheduled(env)
        async with worker_running(env, job) as read:
            await until_state(read, "waiting_for_idle")
            await server.resumed.wait()
            service.cancel(T, job, env=env)
            await until_state(read, "cancelled")
    assert states_at_resume == ["waiting_for_idle"]  # `worker_started` was journaled first


def user_turn_frames(turn_id: str = "u2") -> list[dict[str, Any]]:
    """The user typing: a new turn whose first item is their message."""
    return [{"method": "turn/started", "params": {"threadId": T, "turn": {"id": turn_id, "status": "inProgress",
                                                                          "items": []}}},
            {"method": "item/started", "params": {"threadId": T, "turnId": turn_id,
                                                  "item": {"type": "userMessage", "id": f"{turn_id}-m"}}}]


async def test_a_daemon_restarted_mid_compaction_that_shows_the_thread_quiet_settles_the_job_as_unknown(
        folder: Path, tmp_path: Path) -> None:
    sock = folder / "app.sock"
    started = compaction_frames(6000)[:2]  # the compaction turn and its item start; then the daemon dies

    async def accept_then_die(ws: ServerConnection, message: dict[str, Any]) -> None:
        await push_after(ws, message, started)

    before = Server(IDLE_THREAD, thread__compact__start=accept_then_die)
    after = Server(IDLE_THREAD)  # restarted: idle, no compaction in progress, no new compaction item
    env = env_of(sock, tmp_path)
    settling = SETTINGS._replace(settle_s=0.5)
    async with first_server(sock, before) as stop:
        async with worker_running(env, await scheduled(env), settling) as read:
            await until_state(read, "accepted")
            await stop()
            async with fake_app_server(sock, after):
                final = await until_state(read, "completed", "failed", "timed_out", "cancelled")
    assert (final.state, final.errorCode, final.outcomeMayBeUnknown) == ("failed", "outcome_unknown", True), final
    assert final.error.startswith("the answer to the request sent in accepted was lost; after reconnecting, "
                                     "the owner showed the thread idle")
    assert before.sent.count("thread/compact/start") == 1 and "thread/compact/start" not in after.sent


async def test_user_input_right_after_the_compaction_completed_records_it_completed_with_no_continuation(
        folder: Path, tmp_path: Path) -> None:
    # The daemon's own order: the compaction turn completes, then the user's turn starts; the token
    # count has not caught up yet (the job would wait briefly for it before a continuation). The
    # handoff is injected only once the user's turn has ended.
    user_turn_ended = {"method": "turn/completed", "params": {"threadId": T, "turn": {"id": "u2", "status": "completed",
                                                                                     "items": []}}}
    frames = [f for f in compaction_frames(6000) if f["method"] != "thread/tokenUsage/updated"] + user_turn_frames() \
        + [user_turn_ended]
    server = Server(IDLE_THREAD, thread__compact__start=lambda ws, m: push_after(ws, m, frames),
                    thread__inject_items=ok({}))
    async with fake_app_server(folder / "app.sock", server):
        env = env_of(folder / "app.sock", tmp_path)
        job = await scheduled(env, HANDOFF)
        async with worker_running(env, job) as read:
            final = await until_state(read, "completed", "skipped", "resumed", "failed", "timed_out", "cancelled")
        explanation = build_explanation(JobStore.open_reader(env), job)
    assert (final.state, final.resumeSkipped, final.outcomeMayBeUnknown) == \
        ("completed", "new_user_input", False), final
    assert final.compactionId == "cmp-1"
    assert "No continuation: the compaction completed, then the user sent new input" in explanation["outcome"]
    assert "turn/start" not in server.sent and server.sent.count("thread/compact/start") == 1
    assert server.sent.count("thread/inject_items") == 1 and final.handoffDelivery == "injected"


async def test_two_compactions_after_the_request_are_claimed_by_nobody_and_nothing_resumes(
        folder: Path, tmp_path: Path) -> None:
    # Another client compacted too (or a job the lock could not see): the answer `{}` names neither.
    theirs = [json.loads(json.dumps(f).replace("cmp-1", "cmp-2").replace('"c1"', '"c2"'))
              for f in compaction_frames(5000)]
    server = Server(IDLE_THREAD, thread__compact__start=lambda ws, m: push_after(
        ws, m, compaction_frames(6000)[:2] + theirs[:2] + compaction_frames(6000)[2:] + theirs[2:]))
    async with fake_app_server(folder / "app.sock", server):
        env = env_of(folder / "app.sock", tmp_path)
        async with worker_running(env, await scheduled(env, HANDOFF)) as read:
            final = await until_state(read, "completed", "skipped", "resumed", "failed", "timed_out", "cancelled")
    assert (final.state, final.errorCode, final.outcomeMayBeUnknown) == \
        ("failed", "compaction_not_attributable", True), final
    assert "2 compactions appeared on the thread after this job's compact request (cmp-1, cmp-2)" in final.error
    assert "turn/start" not in server.sent and server.sent.count("thread/compact/start") == 1
