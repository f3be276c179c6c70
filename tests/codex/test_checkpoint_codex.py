"""A thread's standing checkpoint on a REAL Codex app-server daemon, delivered by the plugin's trusted
``SessionStart(compact)`` hook after Codex's own compactions, ``/compact`` and never after a rekall
job's own compaction (that one carries the job's handoff only).

Real Codex (the pinned release) with the mock model, the plugin installed and its hook trusted as
users do it (the ``hook_daemon`` fixture of :mod:`tests.codex.test_session_hook_codex`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall.store.checkpoint import deliveries
from rekall.usecases.checkpoint import clear_checkpoint, save_checkpoint
from rekall.usecases.hook_doctor import hook_rows
from tests.codex.daemonkit import PeerClient, peer_client, start_daemon, stop_daemon
from tests.codex.test_app_server_delivery import compaction_turn_ended, injection_marker, new_conversation
from tests.codex.test_app_server_job import FILLER, JOB_S, run_turn
from tests.codex.test_registration import install_plugin
from tests.codex.test_session_hook_codex import (  # noqa: F401 - the fixtures are used by name
    HookDaemon,
    hook_daemon,
    hook_env,
    hook_model,
    next_turn_request,
    schedule_and_finish,
)
from tests.mcpkit import HANDOFF
from tests.support.codex_home import make_isolated_home
from tests.support.mock_model import MockModel

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

CHECKPOINT = {"summary": "Port the parser to Rust, module by module.",
              "preserve": ["Never edit vendor/: it is generated.", "The public API stays as it is."],
              "discard": ["The first failed attempt with nom."], "nextStep": "Port lexer.rs next, then its tests."}


def checkpoint_marker(thread_id: str) -> str:
    return f"[Checkpoint saved through rekall before a context compaction; thread {thread_id}]"


def copies(model: MockModel, seq: int, thread_id: str) -> int:
    """How many copies of the checkpoint the first model request of a turn after request ``seq`` holds."""
    return next_turn_request(model, seq).text.count(checkpoint_marker(thread_id))


async def auto_compacted_turn(user: PeerClient, hooked: HookDaemon, thread_id: str) -> int:
    """A turn whose long answer passes the thread's auto-compaction limit, then the turn Codex compacts
    before; returns the request ``seq`` the latter's first request follows."""
    hooked.model.queue_text(FILLER)
    await run_turn(user, thread_id, "Tell me everything about it.")
    before, start = hooked.model.requests[-1].seq, len(user.messages)
    await run_turn(user, thread_id, "Where are we?")
    assert any(m.get("method") == "item/completed" and m["params"]["item"]["type"] == "contextCompaction"
               for m in user.messages[start:])  # Codex compacted by itself
    return before


async def compact_turn(user: PeerClient, hooked: HookDaemon, thread_id: str) -> int:
    """``/compact`` (``thread/compact/start``), then a turn; returns the ``seq`` that turn's first request follows."""
    start = len(user.messages)
    await user.request("thread/compact/start", {"threadId": thread_id})
    await compaction_turn_ended(user, thread_id, start)
    before = hooked.model.requests[-1].seq
    await run_turn(user, thread_id, "And now?")
    return before


async def auto_compacting_thread(user: PeerClient) -> str:
    thread_id = (await user.request("thread/start", {"approvalPolicy": "never", "config": {
        "model_auto_compact_token_limit": 20_000}}))["thread"]["id"]
    await run_turn(user, thread_id, "Read the parser.")
    return thread_id


async def test_a_checkpoint_reaches_the_next_request_once_after_each_of_codexs_compactions_and_none_once_cleared(
        hook_daemon: HookDaemon) -> None:
    hooked = hook_daemon
    env = hook_env(hooked)
    async with peer_client(hooked.daemon.socket_path) as user:
        thread_id = await auto_compacting_thread(user)
        hooked.model.queue_tool_call("update_plan", {"explanation": "The port, in order.", "plan": [
            {"step": "Port lexer.rs", "status": "in_progress"}, {"step": "Port ast.rs", "status": "pending"}]})
        await run_turn(user, thread_id, "Plan the port.")
        with anyio.fail_after(JOB_S):
            saved = await save_checkpoint(thread_id, CHECKPOINT, env=env)
        first = await auto_compacted_turn(user, hooked, thread_id)
        second = await auto_compacted_turn(user, hooked, thread_id)
        by_compact = await compact_turn(user, hooked, thread_id)
        cleared = await anyio.to_thread.run_sync(lambda: clear_checkpoint(thread_id, env=env))
        after_clear = await compact_turn(user, hooked, thread_id)

    assert saved["changed"] is True and saved["hookCanDeliver"] is True and "hookWarning" not in saved, saved
    assert [copies(hooked.model, seq, thread_id) for seq in (first, second, by_compact, after_clear)] == [1, 1, 1, 0]
    assert cleared["cleared"] is True
    claimed = deliveries(hooked.jobs, thread_id)
    assert [(c["route"], c["checkpointSha256"]) for c in claimed] == [("hook", saved["checkpointSha256"])] * 3
    assert len({c["compaction"] for c in claimed}) == 3  # one claim per compaction
    request = next_turn_request(hooked.model, first)
    assert " ago and 1 turn ago, as rekall saved it" in request.text  # the long answer ended since it was saved
    # Codex's own update_plan call, read from the real transcript, comes along.
    assert "Your latest plan (update_plan)" in request.text and "- [in_progress] Port lexer.rs" in request.text
    assert CHECKPOINT["nextStep"] in request.text and "does not by itself authorise its nextStep" in request.text


async def test_after_a_rekall_jobs_own_compaction_only_the_jobs_handoff_goes_once(hook_daemon: HookDaemon) -> None:
    hooked = hook_daemon
    async with peer_client(hooked.daemon.socket_path) as user:
        thread_id = await new_conversation(user, hooked.model)
        with anyio.fail_after(JOB_S):
            await save_checkpoint(thread_id, CHECKPOINT, env=hook_env(hooked))
        done = await schedule_and_finish(user, hooked, thread_id, {**HANDOFF, "resume": False})
        before = hooked.model.requests[-1].seq
        await run_turn(user, thread_id, "What were we doing?")

    request = next_turn_request(hooked.model, before)
    assert request.text.count(injection_marker(done["jobId"])) == 1
    assert request.text.count(checkpoint_marker(thread_id)) == 0
    assert deliveries(hooked.jobs, thread_id) == []


@pytest.fixture
async def untrusted_daemon(codex_binary: Path, hook_model: MockModel, tmp_path_factory: pytest.TempPathFactory,
                           monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[HookDaemon]:
    """The plugin installed, its hook never trusted."""
    import os

    from tests.codex.test_session_hook_codex import REKALL_COMMAND

    home = make_isolated_home(tmp_path_factory.mktemp("untrusted") / "h", hook_model.base_url,
                              approval_policy="never")
    await anyio.to_thread.run_sync(install_plugin, codex_binary, home)
    monkeypatch.setenv("PATH", f"{REKALL_COMMAND.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in ("REKALL_JOBS_DIR", "CONTEXT_COMPACT_JOBS_DIR"):
        monkeypatch.delenv(name, raising=False)
    daemon = start_daemon(codex_binary, home)
    try:
        yield HookDaemon(daemon, hook_model, home / "tools" / "rekall" / "jobs")
    finally:
        stop_daemon(daemon)


async def test_with_the_hook_untrusted_nothing_delivers_it_and_doctor_and_the_save_say_why(
        untrusted_daemon: HookDaemon) -> None:
    hooked = untrusted_daemon
    env = hook_env(hooked)
    async with peer_client(hooked.daemon.socket_path) as user:
        thread_id = await auto_compacting_thread(user)
        with anyio.fail_after(JOB_S):
            saved = await save_checkpoint(thread_id, CHECKPOINT, env=env)
        after = await compact_turn(user, hooked, thread_id)
        rows = await hook_rows(env)

    assert saved["hookCanDeliver"] is False and "untrusted" in saved["hookWarning"], saved
    assert "trust rekall's SessionStart hook" in saved["hookWarning"]
    trusted = next(row for row in rows if row.name == "session_hook_trusted")
    assert trusted.level == "AMBER" and "untrusted" in trusted.detail, rows
    assert copies(hooked.model, after, thread_id) == 0
    assert deliveries(hooked.jobs, thread_id) == []




#: Every approval policy Codex 0.171.0 takes as a plain value ("untrusted" it refuses itself: no longer supported).
@pytest.mark.parametrize("policy", ["on-failure", "on-request", "never"])
async def test_codex_runs_the_agents_save_checkpoint_without_asking_under_every_approval_policy(
        codex_binary: Path, tmp_path: Path, policy: str) -> None:
    from rekall.store.checkpoint import current
    from tests.codex.test_end_to_end import agent_engine, run_user_turn

    with agent_engine(codex_binary, tmp_path, approval_policy=policy) as (sim, jobs):
        sim.mock.queue_mcp_call("rekall", "save_checkpoint", {"threadId": sim.thread_id, "handoff": CHECKPOINT})
        run_user_turn(sim, "Save a checkpoint of the task.")
        pending, state, thread_id = sim.pending_request_ids(), sim.state(), sim.thread_id

    (call,) = [item for turn in state["turns"] for item in turn["items"] if item.get("type") == "mcpToolCall"]
    assert (call["tool"], call["status"]) == ("save_checkpoint", "completed"), call
    assert pending == []  # never asked
    assert not sim.mock.requests_containing("requires approval")
    saved = current(jobs, thread_id)
    assert saved is not None and saved["event"] == "saved"
