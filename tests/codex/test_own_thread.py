"""An agent acts only on its own thread: two real sessions, one real engine, rekall between them.

On the shared app-server daemon, two ``websockets`` clients play two users' terminals, each with
its own thread; on the extension's path, the codex-backed simulated owner relays one thread of a
real ``codex app-server`` while a second session runs on the same engine. In each, the agent of
one session (the mock model, with Codex as the MCP client) calls ``schedule_compaction`` naming
the other session's thread: Codex's ``_meta`` names the caller, rekall refuses, and the other
thread sees nothing. Then the same agent schedules its own thread's compaction, and it is done.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall.store import JobStore
from tests.codex.daemonkit import Daemon, PeerClient, peer_client
from tests.codex.test_app_server_job import FILLER, JOB_S, run_turn, wait_terminal
from tests.codex.test_end_to_end import agent_engine, run_user_turn
from tests.mcpkit import HANDOFF, job_env, rekall_mcp, wait_for_worker_exit
from tests.support.mock_model import MockModel

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

REFUSED = "[not_callers_thread] schedule_compaction names thread {victim}, but this call comes from thread {caller}"
OWN_HANDOFF = {**HANDOFF, "resume": False}


async def session(user: PeerClient) -> str:
    """A thread of ``user``'s terminal (on-request approvals) whose rekall MCP server has started."""
    start = len(user.messages)
    thread_id = (await user.request("thread/start"))["thread"]["id"]
    await user.wait_for(lambda m: m.get("method") == "mcpServer/startupStatus/updated"
                        and m["params"].get("name") == "rekall" and m["params"].get("status") == "ready",
                        start=start, timeout=JOB_S)
    return thread_id


def about(thread_id: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("params", {}).get("threadId") == thread_id]


async def test_on_the_shared_app_server_an_agent_cannot_compact_another_sessions_thread_and_compacts_its_own(
        app_server_daemon: Daemon, daemon_model: MockModel) -> None:
    daemon = app_server_daemon
    store = JobStore.open_reader({"REKALL_JOBS_DIR": str(daemon.jobs_dir)})
    async with peer_client(daemon.socket_path, "terminal-a") as a, peer_client(daemon.socket_path, "terminal-b") as b:
        caller, victim = await session(a), await session(b)
        daemon_model.queue_text(FILLER)
        await run_turn(b, victim, "Read the parser and tell me everything about it.")
        victim_turns = (await b.request("thread/turns/list", {"threadId": victim}))["data"]
        b_seen = len(b.messages)

        daemon_model.queue_mcp_call("rekall", "schedule_compaction", {"threadId": victim, "handoff": HANDOFF})
        # Codex asks A's user, who allows it (the prompt names the thread; who reads it?): rekall refuses.
        await run_turn(a, caller, "Compact the other session's conversation.", allow_mcp_call=True)
        refusal = REFUSED.format(victim=victim, caller=caller)
        (answer,) = daemon_model.requests_containing(refusal)  # the tool's answer, back to the model
        assert answer.kind == "turn"

        # The other session: no job, no message about its thread, its turns as they were.
        assert store.read_status(victim).state == "not_scheduled"
        assert not (daemon.jobs_dir / victim).exists()
        assert about(victim, b.messages[b_seen:]) == []
        assert (await b.request("thread/turns/list", {"threadId": victim}))["data"] == victim_turns

        # The caller's own thread is served.
        daemon_model.queue_mcp_call("rekall", "schedule_compaction", {"threadId": caller, "handoff": OWN_HANDOFF})
        await run_turn(a, caller, "Compact this conversation now.", allow_mcp_call=True)
        done = await wait_terminal(daemon, caller)
        await wait_for_worker_exit(done["pid"])
        assert about(victim, b.messages[b_seen:]) == []

    assert done["state"] == "completed" and done["platform"] == "app-server", done
    assert store.read_status(victim).state == "not_scheduled"


async def test_on_the_extensions_path_an_agent_cannot_compact_the_owned_thread_from_another_session(
        codex_binary: Path, tmp_path: Path) -> None:
    with agent_engine(codex_binary, tmp_path) as (sim, jobs):
        sim.mock.queue_text(FILLER)
        run_user_turn(sim, "Read the parser and tell me everything about it.")
        owned_before = sim.state()

        # Another session on the same engine, its agent naming the thread the owner relays.
        other = sim.side_thread(timeout=JOB_S)
        sim.mock.queue_mcp_call("rekall", "schedule_compaction", {"threadId": sim.thread_id, "handoff": HANDOFF})
        sim.side_turn(other, "Compact the conversation of the VS Code window.", timeout=JOB_S, allow_mcp_call=True)
        refusal = REFUSED.format(victim=sim.thread_id, caller=other)
        assert len(sim.mock.requests_containing(refusal)) == 1
        assert (sim.compact_requests, sim.start_turn_requests) == ([], [])
        assert sim.state() == owned_before and not jobs.exists()

        # The owned thread's own agent is served.
        sim.mock.queue_mcp_call("rekall", "schedule_compaction", {"threadId": sim.thread_id, "handoff": OWN_HANDOFF})
        run_user_turn(sim, "Compact this conversation now.", allow_mcp_call=True)
        async with rekall_mcp(job_env(sim.env, jobs), sim.thread_id) as rekall:
            done = await rekall.wait_terminal(JOB_S)
            await wait_for_worker_exit(done["pid"])
        compacts = len(sim.compact_requests)

    assert done["state"] == "completed" and done["platform"] == "extension-ipc", done
    assert compacts == 1


async def test_while_codex_asks_to_allow_the_call_only_the_extensions_path_shows_the_turn_calling_it(
        app_server_daemon: Daemon, daemon_model: MockModel, codex_binary: Path, tmp_path: Path) -> None:
    # The owner's evidence (rekall.kernel.caller.calls_in_progress) as real Codex gives it, while the call
    # waits for the user's answer. The relayed state has the turn's mcpToolCall item (inProgress);
    # the shared app-server's read-only listing of a turn in progress has only its user message,
    # so there the request's _meta alone can name the caller.
    from rekall.adapters.app_server.platform import SharedAppServerPlatform
    from rekall.kernel.caller import calls_in_progress

    async with peer_client(app_server_daemon.socket_path, "terminal") as user:
        thread_id = await session(user)
        daemon_model.queue_mcp_call("rekall", "schedule_compaction", {"threadId": thread_id, "handoff": OWN_HANDOFF})
        start = len(user.messages)
        await user.request("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "Compact."}]})
        await user.wait_for(lambda m: m.get("method") == "mcpServer/elicitation/request"
                            and m["params"].get("threadId") == thread_id, start=start, timeout=JOB_S)
        seen = await SharedAppServerPlatform(app_server_daemon.env).observe(thread_id, request_timeout_s=JOB_S)
        await user.allow_mcp_call(thread_id, start=start, timeout=JOB_S)
        done = await wait_terminal(app_server_daemon, thread_id)
        await wait_for_worker_exit(done["pid"])

    with agent_engine(codex_binary, tmp_path) as (sim, jobs):
        sim.mock.queue_mcp_call("rekall", "schedule_compaction", {"threadId": sim.thread_id, "handoff": OWN_HANDOFF})
        sim.user_turn("Compact.")
        sim.wait_until(lambda owner: any(r.method == "mcpServer/elicitation/request"
                                         for r in owner.backend.pending.values()), timeout=JOB_S)
        relayed = calls_in_progress(sim.state()["turns"])
        sim.allow_mcp_call(timeout=JOB_S)

    assert seen.calls_in_progress == frozenset()
    assert relayed == frozenset({"schedule_compaction"})
