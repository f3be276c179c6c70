"""A whole rekall job on the real Codex engine: ``rekall mcp`` → worker → owner → ``codex app-server``.

The owner is the codex-backed simulated owner (a real app-server thread relayed the way the
extension relays it, the model a loopback mock); ``schedule_compaction`` goes through the real
``rekall mcp`` over stdio and the worker it spawns is a real detached process. Nothing rekall
sees is scripted: the compaction, its ``contextCompaction`` item, the token telemetry and the
continuation turn all come from the engine. In the last test the agent itself calls
``schedule_compaction`` in the middle of its turn, with Codex as the MCP client, as it would in
the extension.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall.sim import protocol as p
from rekall.sim.owner import pin_for
from rekall.thread.facts import derive_facts
from rekall.usecases.full_auto import full_auto_toml
from tests.mcpkit import HANDOFF, job_env, rekall_mcp, wait_for_worker_exit
from tests.support.codex_backend import CodexSimHandle, start_codex_sim_in_thread
from tests.support.mock_model import escalated_command
from tests.support.account_home import account_env

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

#: An assistant reply this long fills the context; compaction drops assistant output.
FILLER = "context filler " * 8000
#: Real engine turns and compactions take well under a second here; the bound is for slow CI.
JOB_S = 90.0


@pytest.fixture
def codex_sim(codex_binary: Path, private_dir: Path) -> Iterator[CodexSimHandle]:
    with start_codex_sim_in_thread(codex_binary, private_dir / "engine") as handle:
        yield handle


def turn_finished(state: dict[str, Any], turn_id: str) -> bool:
    """The turn has ended and the thread is idle again (the engine reports idle first)."""
    return derive_facts(state).idle and any(t["turnId"] == turn_id and t["status"] != "inProgress"
                                            for t in state["turns"])


def run_user_turn(sim: CodexSimHandle, text: str, *, allow_mcp_call: bool = False) -> str:
    """A user turn in the owning window, run to its end; ``allow_mcp_call``: its user allows the MCP
    tool call the engine asks about (on-request approvals)."""
    turn_id = sim.user_turn(text)["id"]
    if allow_mcp_call:
        sim.allow_mcp_call(timeout=JOB_S)
    sim.wait_until(lambda owner: turn_finished(owner.backend.snapshot(), turn_id), timeout=JOB_S)
    return turn_id


def compaction_items(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for turn in state["turns"] for item in turn["items"] if item.get("type") == "contextCompaction"]


def rekall_mcp_server(env: Mapping[str, str]) -> str:
    """``[mcp_servers.rekall]`` for the engine: this checkout's ``rekall mcp`` with ``env``.

    Codex passes a stdio MCP server only an allowlist of variables (HOME, PATH, ...), so the
    endpoint and the jobs directory are given explicitly.
    """
    return "\n".join(["[mcp_servers.rekall]", f"command = {json.dumps(sys.executable)}", 'args = ["-m", "rekall", "mcp"]',
                      "", "[mcp_servers.rekall.env]",
                      *(f"{k} = {json.dumps(v)}" for k, v in {**env, **account_env()}.items()), ""])


@contextlib.contextmanager
def agent_engine(codex_binary: Path, tmp_path: Path, *, extra_config: str = "",
                 approval_policy: str = "on-request") -> Iterator[tuple[CodexSimHandle, Path]]:
    """The codex-backed owner whose engine runs this checkout's ``rekall mcp`` (reaching the owner's
    socket, jobs in the returned folder), its server ready: the agent (the mock model) can call it."""
    socket_dir = Path(tempfile.mkdtemp(prefix="rk-e2e-", dir="/tmp"))  # short: a socket path has ~100 bytes
    socket_path, jobs = socket_dir / "ipc.sock", tmp_path / "jobs"
    engine_env = {"REKALL_PIPE": str(socket_path), **pin_for(p.DEFAULT_GENERATION), "REKALL_JOBS_DIR": str(jobs),
                  "REKALL_IDLE_STABLE_MS": "50"}
    try:
        with start_codex_sim_in_thread(codex_binary, tmp_path / "engine", socket_path=socket_path,
                                       extra_config=rekall_mcp_server(engine_env) + extra_config,
                                       approval_policy=approval_policy) as sim:
            # Codex offers an MCP server's tools to the model only once the server is ready.
            assert sim.wait_for_mcp_server("rekall", timeout=JOB_S)["status"] == "ready"
            yield sim, jobs
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


def item_types(state: dict[str, Any]) -> list[list[str]]:
    return [[item["type"] for item in turn["items"]] for turn in state["turns"]]


async def test_a_resume_job_compacts_the_real_thread_and_starts_one_continuation_with_the_handoff(
        codex_sim: CodexSimHandle, tmp_path: Path) -> None:
    codex_sim.mock.queue_text(FILLER)
    run_user_turn(codex_sim, "Read the parser and tell me everything about it.")
    before = derive_facts(codex_sim.state())
    assert before.idle and before.tokens and before.window

    env = job_env(codex_sim.env, tmp_path / "jobs", REKALL_IDLE_STABLE_MS="50")
    async with rekall_mcp(env, codex_sim.thread_id) as rekall:
        scheduled = await rekall.schedule(HANDOFF)
        assert scheduled["state"] == "scheduled" and scheduled["resume"] is True
        assert scheduled["contextTokensAtSchedule"] == before.tokens
        done = await rekall.wait_terminal(JOB_S)
        await wait_for_worker_exit(scheduled["pid"])

    assert done["state"] == "resumed", done
    assert done["outcomeMayBeUnknown"] is False

    # The engine's own contextCompaction item went from item/started to item/completed.
    state = codex_sim.state()
    (item,) = compaction_items(state)
    assert item["id"] == done["compactionId"] and item["completed"] is True

    # The headroom guard read the engine's telemetry: fewer tokens, and within 60 % of its window.
    assert done["contextTokensBefore"] == before.tokens and done["modelContextWindowBefore"] == before.window
    assert done["contextTokensAfter"] < done["contextTokensBefore"]
    assert done["contextTokensAfter"] / done["modelContextWindowAfter"] <= 0.6
    assert done["tokensReclaimed"] == before.tokens - done["contextTokensAfter"]

    # One real continuation turn, which the engine ran and sent to the model with the handoff.
    resumed_turn = next(t for t in state["turns"] if t["turnId"] == done["resumeTurnId"])
    assert resumed_turn["params"]["clientUserMessageId"] == done["jobId"]
    marker = f"[Automatic continuation requested through rekall; job {done['jobId']}]"
    request = await anyio.to_thread.run_sync(
        lambda: codex_sim.mock.wait_for(lambda r: r.contains(marker), timeout=JOB_S))
    assert request.kind == "turn"
    assert json.dumps(HANDOFF, indent=2, ensure_ascii=False) in request.text
    assert codex_sim.mock.summary_text in request.text  # it ran on the compacted history
    assert len(codex_sim.mock.requests_containing(marker)) == 1

    # Exactly one of each, at the owner and at the model.
    assert len(codex_sim.compact_requests) == 1 and len(codex_sim.start_turn_requests) == 1
    assert [r.kind for r in codex_sim.mock.requests].count("compaction") == 1


async def test_a_pending_approval_holds_the_job_in_waiting_for_idle_until_it_is_resolved(
        codex_sim: CodexSimHandle, tmp_path: Path) -> None:
    untouched = tmp_path / "never-created"
    codex_sim.mock.queue_tool_call("exec_command", escalated_command(f"touch {untouched}"))
    codex_sim.user_turn("Create the marker file.")
    codex_sim.wait_until(lambda owner: bool(owner.backend.pending), timeout=JOB_S)
    (request_id,) = codex_sim.pending_request_ids()

    idle_stable_ms = 50
    env = job_env(codex_sim.env, tmp_path / "jobs", REKALL_IDLE_STABLE_MS=str(idle_stable_ms))
    async with rekall_mcp(env, codex_sim.thread_id) as rekall:
        scheduled = await rekall.schedule({**HANDOFF, "resume": False})
        await rekall.wait_for({"waiting_for_idle"})
        # The worker follows the thread; while the engine waits on the approval it must not act.
        # Nothing happens to await here, so watch for many idle-stable intervals instead.
        codex_sim.wait_until(lambda owner: owner.followers >= 1, timeout=JOB_S)
        await anyio.sleep(idle_stable_ms * 20 / 1000)
        held = await rekall.status()
        assert held["state"] == "waiting_for_idle"
        assert codex_sim.compact_requests == [] and codex_sim.pending_request_ids() == [request_id]

        codex_sim.answer_request(request_id, {"decision": "decline"})
        done = await rekall.wait_terminal(JOB_S)
        await wait_for_worker_exit(scheduled["pid"])

    assert done["state"] == "completed", done
    (item,) = compaction_items(codex_sim.state())
    assert item["id"] == done["compactionId"] and item["completed"] is True
    assert len(codex_sim.compact_requests) == 1 and codex_sim.start_turn_requests == []
    assert not untouched.exists()  # declined: the engine never ran the command


async def test_the_agent_schedules_its_own_compaction_through_codex_and_rekall_resumes_after_its_turn(
        codex_binary: Path, tmp_path: Path) -> None:
    with agent_engine(codex_binary, tmp_path) as (sim, jobs):
        sim.mock.queue_text(FILLER)
        run_user_turn(sim, "Read the parser and tell me everything about it.")

        sim.mock.queue_mcp_call("rekall", "schedule_compaction", {"threadId": sim.thread_id, "handoff": HANDOFF})
        turn_id = sim.user_turn("Compact this conversation now, then write the changelog.")["id"]
        # Under on-request approvals the engine asks the window's user first (a destructive tool).
        asked = sim.allow_mcp_call(timeout=JOB_S)
        sim.wait_until(lambda owner: turn_finished(owner.backend.snapshot(), turn_id), timeout=JOB_S)
        async with rekall_mcp(job_env(sim.env, jobs), sim.thread_id) as rekall:
            done = await rekall.wait_terminal(JOB_S)
            await wait_for_worker_exit(done["pid"])
        state = sim.state()
        compacts, starts = len(sim.compact_requests), len(sim.start_turn_requests)

    assert done["state"] == "resumed", done
    # The engine ran: the agent's turn with the tool call, then (only after it) the compaction,
    # then the one continuation turn.
    assert item_types(state) == [["userMessage", "agentMessage"],
                                 ["userMessage", "mcpToolCall", "agentMessage"],
                                 ["contextCompaction"],
                                 ["userMessage", "agentMessage"]]
    tool_call = state["turns"][1]["items"][1]
    assert (tool_call["server"], tool_call["tool"], tool_call["status"]) == ("rekall", "schedule_compaction",
                                                                              "completed")
    assert state["turns"][2]["items"][0]["id"] == done["compactionId"]
    assert state["turns"][3]["turnId"] == done["resumeTurnId"]

    # The agent got the tool's answer (its job and what to do next) before it ended its turn.
    answer = sim.mock.requests_containing(f'"jobId":"{done["jobId"]}"')[0]
    assert answer.kind == "turn" and "Finish your turn now" in answer.text
    marker = f"[Automatic continuation requested through rekall; job {done['jobId']}]"
    (continuation,) = sim.mock.requests_containing(marker)
    assert json.dumps(HANDOFF, indent=2, ensure_ascii=False) in continuation.text
    assert (compacts, starts) == (1, 1)
    assert asked.params["serverName"] == "rekall" and '"schedule_compaction"' in asked.params["message"]


#: What lets an agent call ``schedule_compaction`` without being asked (the README's way under ``-a never``).
APPROVE_WITHOUT_ASKING = full_auto_toml("hand")


@pytest.mark.parametrize(("tool_config", "scheduled"), [("", False), (APPROVE_WITHOUT_ASKING, True)])
async def test_under_approval_policy_never_codex_refuses_schedule_compaction_unless_the_config_approves_it(
        codex_binary: Path, tmp_path: Path, tool_config: str, scheduled: bool) -> None:
    with agent_engine(codex_binary, tmp_path, extra_config=tool_config, approval_policy="never") as (sim, jobs):
        sim.mock.queue_mcp_call("rekall", "schedule_compaction", {"threadId": sim.thread_id,
                                                                  "handoff": {**HANDOFF, "resume": False}})
        run_user_turn(sim, "Compact this conversation now.")
        refused = sim.mock.requests_containing("MCP tool call requires approval, but approval policy is never")
        pending = sim.pending_request_ids()
        if scheduled:
            async with rekall_mcp(job_env(sim.env, jobs), sim.thread_id) as rekall:
                done = await rekall.wait_terminal(JOB_S)
                await wait_for_worker_exit(done["pid"])

    assert pending == []  # never asked
    assert (len(refused), jobs.exists()) == ((0, True) if scheduled else (1, False))
    if scheduled:
        assert done["state"] == "completed", done
