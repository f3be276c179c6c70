"""The codex-backed simulated owner: a real app-server thread, followed over the real Unix socket."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from rekall.kernel import events as ev
from rekall.adapters.extension import RequestFailed, connect_thread
from rekall.thread.facts import derive_facts
from tests.support.appserver import AppServerError
from rekall.kernel.errors import CodexError
from rekall.sim import SimulatedOwner
from rekall.sim.backend import RouterError
from tests.support.codex_backend import CodexBackend, create_backend, start_codex_sim_in_thread
from tests.support.mock_model import escalated_command


FILLER = "context filler " * 8000


async def next_of(session, kind: type, seen: list) -> object:
    while True:
        event = await session.next_event()
        seen.append(event)
        if isinstance(event, kind):
            return event


def finished(backend: CodexBackend, turn_id: str) -> bool:
    """The turn has been seen and has finished, and the thread is idle again."""
    state = backend.snapshot()
    return derive_facts(state).idle and any(t["turnId"] == turn_id and t["status"] != "inProgress"
                                            for t in state["turns"])


async def user_turn_done(owner: SimulatedOwner, backend: CodexBackend, text: str) -> None:
    turn = await backend.user_turn(text)
    await owner.wait_until(lambda _: finished(backend, turn["id"]), timeout=30)


@pytest.mark.codex
@pytest.mark.anyio
async def test_a_follower_compaction_runs_on_the_real_engine_and_lowers_the_tokens(
        codex_binary: Path, private_dir: Path) -> None:
    backend = CodexBackend(codex_binary, private_dir)
    with anyio.fail_after(90):
        async with SimulatedOwner(backend) as owner:
            backend.mock.queue_text(FILLER)
            await user_turn_done(owner, backend, "please fill the context")
            async with await connect_thread(owner.thread_id, env=owner.env) as session:
                before = session.mirror.tokens
                assert session.mirror.idle and before and session.mirror.window
                assert session.mirror.completed_compaction_ids == frozenset()

                await session.compact()
                seen: list = []
                completed = await next_of(session, ev.CompactionCompleted, seen)
                await next_of(session, ev.ThreadIdle, seen)
                assert session.mirror.completed_compaction_ids == {completed.compaction_id}
                assert session.mirror.tokens < before
                assert any(isinstance(e, ev.Telemetry) and e.tokens == session.mirror.tokens for e in seen)
                assert not any(isinstance(e, ev.UserBoundaryChanged) for e in seen)  # compaction is not input

                job = str(uuid.uuid4())
                started = await session.start_turn(f"Continue. {job}", job)
                assert started.status in ("inProgress", "completed")
                request = await anyio.to_thread.run_sync(
                    lambda: backend.mock.wait_for(lambda r: r.contains(job), timeout=30))
                assert request.kind == "turn" and backend.mock.summary_text in request.text
                await next_of(session, ev.ThreadIdle, seen)
                # The engine reports idle just before turn/completed; wait for the turn itself.
                await owner.wait_until(lambda _: finished(backend, started.turn_id), timeout=30)
                turn = backend.snapshot()["turns"][-1]
                assert turn["turnId"] == started.turn_id and turn["params"]["clientUserMessageId"] == job
                assert turn["status"] == "completed"


class StateTap:
    """Records the state changes a session receives; signals when one touches ``requests``."""

    def __init__(self) -> None:
        self.changes: list[dict] = []
        self.request_added = anyio.Event()

    def __call__(self, direction: str, message: object) -> None:
        params = message.get("params") if isinstance(message, dict) else None
        change = params.get("change") if isinstance(params, dict) else None
        if direction != "recv" or not isinstance(change, dict):
            return
        self.changes.append(change)
        if any(p["path"][:1] == ["requests"] and p["op"] == "add" for p in change.get("patches", [])):
            self.request_added.set()

    def revision_where(self, op: str) -> int:
        return next(c["revision"] for c in self.changes
                    if any(p["path"][:1] == ["requests"] and p["op"] == op for p in c.get("patches", [])))


@pytest.mark.codex
@pytest.mark.anyio
async def test_a_pending_approval_keeps_the_thread_busy_until_it_is_resolved(
        codex_binary: Path, private_dir: Path, tmp_path: Path) -> None:
    backend = CodexBackend(codex_binary, private_dir)
    tap = StateTap()
    with anyio.fail_after(90):
        async with SimulatedOwner(backend) as owner:
            async with await connect_thread(owner.thread_id, env=owner.env, tap=tap) as session:
                assert session.mirror.idle
                backend.mock.queue_tool_call("exec_command", escalated_command(f"touch {tmp_path / 'x'}"))
                await backend.user_turn("touch a file")
                await tap.request_added.wait()
                (request_id,) = backend.pending
                assert backend.snapshot()["threadRuntimeStatus"] == {"type": "active", "activeFlags": ["waitingOnApproval"]}

                await backend.answer_request(request_id, {"decision": "decline"})
                seen: list = []
                became_idle = await next_of(session, ev.ThreadIdle, seen)
                # Idle came only after the engine resolved the request, never while it was pending.
                assert became_idle.revision > tap.revision_where("remove") > tap.revision_where("add")
                assert not any(isinstance(e, ev.ThreadIdle) for e in seen[:-1])
                assert session.mirror.pending_requests == 0 and session.mirror.idle
    assert not (tmp_path / "x").exists()


@pytest.mark.codex
@pytest.mark.anyio
async def test_a_follower_approval_decision_answers_the_engine(codex_binary: Path, private_dir: Path,
                                                               tmp_path: Path) -> None:
    backend = CodexBackend(codex_binary, private_dir)
    with anyio.fail_after(90):
        async with SimulatedOwner(backend) as owner:
            backend.mock.queue_tool_call("exec_command", escalated_command(f"touch {tmp_path / 'y'}"))
            await backend.user_turn("touch")
            await owner.wait_until(lambda _: bool(backend.pending), timeout=30)
            (request_id,) = backend.pending
            result = await backend.handle("thread-follower-command-approval-decision",
                                          {"conversationId": backend.thread_id, "requestId": request_id,
                                           "decision": "decline"})
            assert result == {"ok": True}
            await owner.wait_until(lambda _: derive_facts(backend.snapshot()).idle, timeout=30)
            assert backend.pending == {}


@pytest.mark.codex
@pytest.mark.anyio
async def test_engine_refusals_and_unknown_methods_become_router_errors(codex_binary: Path,
                                                                        private_dir: Path) -> None:
    backend = CodexBackend(codex_binary, private_dir)
    async with SimulatedOwner(backend):
        with pytest.raises(RouterError) as unknown:
            await backend.handle("thread-follower-edit-last-user-turn", {"conversationId": backend.thread_id})
        assert unknown.value.error == "no-handler-for-request"
        with pytest.raises(RouterError) as foreign:
            await backend.handle("thread-follower-compact-thread", {"conversationId": str(uuid.uuid4())})
        assert foreign.value.error == "no-client-found"
        with pytest.raises(RouterError) as rejected:
            await backend.handle("thread-follower-start-turn", {"conversationId": backend.thread_id,
                                                                 "turnStart": {"request": {"input": [{"type": "bogus"}]}}})
        assert rejected.value.error.startswith("codex app-server rejected turn/start")
        assert isinstance(rejected.value.__cause__, AppServerError)
        with pytest.raises(RouterError, match="no-handler-for-request"):
            await backend.answer_request(12345, {"decision": "accept"})


@pytest.mark.codex
@pytest.mark.anyio
async def test_a_stopped_engine_answers_client_disconnected(codex_binary: Path, private_dir: Path) -> None:
    backend = CodexBackend(codex_binary, private_dir)
    async with SimulatedOwner(backend) as owner:
        async with await connect_thread(owner.thread_id, env=owner.env) as session:
            await backend.stop()
            with pytest.raises(RequestFailed) as caught:
                await session.compact()
    assert caught.value.code == "client-disconnected"


@pytest.mark.codex
def test_the_threaded_handle_exposes_the_mock_and_the_thread(codex_binary: Path, private_dir: Path) -> None:
    with start_codex_sim_in_thread(codex_binary, private_dir) as sim:
        assert uuid.UUID(sim.thread_id)
        sim.mock.queue_text("a scripted reply MARK-threaded")
        turn = sim.user_turn("hello from the handle")
        sim.wait_until(lambda owner: finished(owner.backend, turn["id"]), timeout=30)
        state = sim.state()
        assert state["turns"][-1]["turnId"] == turn["id"]
        assert sim.mock.requests_containing("hello from the handle")
        assert sim.env["REKALL_PIPE"] == str(sim.socket_path)


def test_without_a_real_codex_the_backend_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("REKALL_TEST_CODEX", str(tmp_path / "nowhere" / "codex"))
    with pytest.raises(CodexError) as caught:
        create_backend()
    assert "install-codex" in caught.value.message


@pytest.mark.codex
@pytest.mark.anyio
async def test_rekall_sim_backend_codex_serves_a_real_thread(codex_binary: Path, tmp_path: Path) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys

    import tempfile

    leftovers = set(Path(tempfile.gettempdir()).glob("rekall-codex-sim-*"))
    env = {**os.environ, "REKALL_TEST_CODEX": str(codex_binary)}
    process = subprocess.Popen([sys.executable, "-m", "rekall", "sim", "--backend", "codex", "--json"],
                               cwd=Path(__file__).resolve().parents[2], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        with anyio.fail_after(60):
            line = await anyio.to_thread.run_sync(process.stdout.readline)
            info = json.loads(line)
            assert uuid.UUID(info["threadId"])
            async with await connect_thread(info["threadId"], env=info["env"]) as session:
                assert session.mirror.idle and session.mirror.layout_problem is None
                await session.compact()  # an empty thread compacts too: the engine accepted it
                await next_of(session, ev.CompactionCompleted, [])
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert set(Path(tempfile.gettempdir()).glob("rekall-codex-sim-*")) == leftovers  # its CODEX_HOME is gone


@pytest.mark.anyio
async def test_an_engine_that_cannot_start_fails_start_and_releases_the_mock(tmp_path: Path) -> None:
    class NoOwner:
        def publish(self, patches: list) -> None:
            raise AssertionError("nothing may be published")

        def publish_snapshot(self) -> None:
            raise AssertionError("nothing may be published")

    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o700)
    backend = CodexBackend(tmp_path / "no-such-codex", workdir)
    with pytest.raises(CodexError) as caught:
        await backend.start(NoOwner())
    assert caught.value.code == "app_server_spawn_failed"
    assert backend.mock._server is None and backend.server is None and backend.thread_id == ""
