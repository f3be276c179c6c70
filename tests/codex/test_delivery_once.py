"""One delivery, one answer, on the REAL shared app-server daemon: an explicit cancel ends every route,
and an injection never goes into a running turn.

Real Codex (the pinned release) with the mock model; nothing of Codex is mocked. A ``websockets`` client
with no rekall code plays the user. The mock model records every request: a turn whose model was
sampled twice shows two turn requests between its start and its end. Where the hook matters, the plugin
is installed and its hook trusted as users do it (tests/codex/test_session_hook_codex.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall.usecases import service
from rekall.store import JobStore
from rekall.store.delivery import DeliveryKey, holder
from tests.codex.daemonkit import Daemon, PeerClient, peer_client
from tests.codex.test_app_server_delivery import (
    compaction_turn_ended,
    handoff_copies,
    injection_marker,
    new_conversation,
    rekall_env,
    wait_terminal,
)
from tests.codex.test_app_server_job import JOB_S, on_thread, run_turn
from tests.codex.test_session_hook_codex import HookDaemon, hook_daemon, hook_env, hook_model, hook_runs  # noqa: F401
from tests.mcpkit import HANDOFF, wait_for_worker_exit
from tests.support.mock_model import MockModel, RecordedRequest

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

#: Long enough that the user's message, sent as soon as the compaction's turn ends, comes first.
SLOW_IDLE_MS = "1500"


async def user_turn(user: PeerClient, model: MockModel, thread_id: str, text: str) -> list[RecordedRequest]:
    """Run one user turn to its end: the model's turn requests it made (one per sampling)."""
    before = model.requests[-1].seq if model.requests else 0
    await run_turn(user, thread_id, text)
    return [r for r in model.requests if r.seq > before and r.kind == "turn"]


async def until_state(jobs: Path, thread_id: str, job_id: str, state: str) -> None:
    store = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)})
    with anyio.fail_after(JOB_S):
        while (status := store.read_status(thread_id)).jobId != job_id or status.state != state:
            await anyio.sleep(0.02)


def rekall_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rekall", *args], capture_output=True, text=True, env=env,
                          timeout=60)


async def test_an_explicit_cancel_in_waiting_for_resume_idle_keeps_the_trusted_hook_from_delivering(
        hook_daemon: HookDaemon) -> None:
    hooked = hook_daemon
    # Idle must hold this long before the compaction and again before the continuation: time to cancel in between.
    env = hook_env(hooked, REKALL_IDLE_STABLE_MS="8000")
    async with peer_client(hooked.daemon.socket_path) as user:
        thread_id = await new_conversation(user, hooked.model)
        start = len(user.messages)
        with anyio.fail_after(JOB_S):
            job = (await service.schedule(thread_id, HANDOFF, env=env))["jobId"]
        await until_state(hooked.jobs, thread_id, job, "waiting_for_resume_idle")
        cancelled = rekall_command(env, "cancel", job)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "no continuation, injection or hook will deliver it" in " ".join(cancelled.stdout.split())
        done = await wait_terminal(hooked.jobs, thread_id, job)
        await wait_for_worker_exit(done["pid"])
        await compaction_turn_ended(user, thread_id, start)
        seen_from = len(user.messages)
        requests = await user_turn(user, hooked.model, thread_id, "What were we doing?")
        seen = user.messages[seen_from:]

    assert [r["status"] for r in hook_runs(seen, thread_id)] == ["completed"]  # the hook ran, and printed nothing
    assert len(requests) == 1 and handoff_copies(requests[0]) == 0
    assert not hooked.model.requests_containing(injection_marker(job))
    assert done["state"] == "cancelled" and done["reason"] == "explicit_cancellation", done
    assert done["handoffDelivery"] == "not_delivered" and "cancelled explicitly" in done["handoffDeliveryNote"]
    assert holder(hooked.jobs, DeliveryKey(thread_id, job=job))["route"] == "cancel"


async def test_the_users_input_in_waiting_for_resume_idle_cancels_and_the_trusted_hook_delivers_once(
        hook_daemon: HookDaemon) -> None:
    hooked = hook_daemon
    async with peer_client(hooked.daemon.socket_path) as user:
        thread_id = await new_conversation(user, hooked.model)
        start = len(user.messages)
        with anyio.fail_after(JOB_S):
            job = (await service.schedule(thread_id, HANDOFF,
                                          env=hook_env(hooked, REKALL_IDLE_STABLE_MS=SLOW_IDLE_MS)))["jobId"]
        await until_state(hooked.jobs, thread_id, job, "waiting_for_resume_idle")
        await compaction_turn_ended(user, thread_id, start)
        requests = await user_turn(user, hooked.model, thread_id, "Actually, look at the tests first.")
        done = await wait_terminal(hooked.jobs, thread_id, job)
        await wait_for_worker_exit(done["pid"])

    assert done["state"] == "cancelled" and done["reason"] == "new_user_input", done
    assert len(requests) == 1 and requests[0].text.count(injection_marker(job)) == 1
    assert handoff_copies(requests[0]) == 1 and "the user sent new input first" in requests[0].text
    assert len(hooked.model.requests_containing(injection_marker(job))) == 1
    status = JobStore.open_reader({"CODEX_HOME": str(hooked.daemon.codex_home)}).read_status(thread_id)
    assert status.handoffDelivery == "hook"


async def test_typing_right_after_the_compaction_without_the_hook_injects_once_before_the_second_message(
        app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path) -> None:
    daemon, jobs = app_server_daemon, private_dir / "jobs"
    async with peer_client(daemon.socket_path) as user:
        thread_id = await new_conversation(user, daemon_model)
        start = len(user.messages)
        with anyio.fail_after(JOB_S):
            job = (await service.schedule(thread_id, {**HANDOFF, "resume": False},
                                          env=rekall_env(daemon, jobs, REKALL_IDLE_STABLE_MS=SLOW_IDLE_MS)))["jobId"]
        await compaction_turn_ended(user, thread_id, start)
        first = await user_turn(user, daemon_model, thread_id, "Run the tests.")
        done = await wait_terminal(jobs, thread_id, job)
        await wait_for_worker_exit(done["pid"])
        second = await user_turn(user, daemon_model, thread_id, "And now?")

    assert len(first) == 1 and len(second) == 1, (len(first), len(second))  # one answer per message
    marker = injection_marker(job)
    assert handoff_copies(first[0]) == 0 and first[0].text.count(marker) == 0  # it waited for the turn to end
    assert second[0].text.count(marker) == 1 and handoff_copies(second[0]) == 1
    assert daemon_model.requests_containing(marker) == [second[0]]
    assert done["state"] == "completed" and done["handoffDelivery"] == "injected", done


async def test_typing_right_after_the_compaction_with_the_trusted_hook_the_hooks_copy_is_the_only_one(
        hook_daemon: HookDaemon) -> None:
    hooked = hook_daemon
    env = hook_env(hooked, REKALL_IDLE_STABLE_MS=SLOW_IDLE_MS, REKALL_INJECT_HANDOFF="on")
    async with peer_client(hooked.daemon.socket_path) as user:
        thread_id = await new_conversation(user, hooked.model)
        start = len(user.messages)
        with anyio.fail_after(JOB_S):
            job = (await service.schedule(thread_id, {**HANDOFF, "resume": False}, env=env))["jobId"]
        await compaction_turn_ended(user, thread_id, start)
        first = await user_turn(user, hooked.model, thread_id, "Run the tests.")
        done = await wait_terminal(hooked.jobs, thread_id, job)
        await wait_for_worker_exit(done["pid"])
        second = await user_turn(user, hooked.model, thread_id, "And now?")

    marker = injection_marker(job)
    assert len(first) == 1 and len(second) == 1
    assert first[0].text.count(marker) == 1 and handoff_copies(first[0]) == 1  # the hook's copy
    assert hooked.model.requests_containing(marker)[0] is first[0]
    assert second[0].text.count(marker) <= 1  # what Codex keeps of it in the history: rekall injected nothing
    assert holder(hooked.jobs, DeliveryKey(thread_id, job=job))["route"] == "hook"
    status = JobStore.open_reader({"CODEX_HOME": str(hooked.daemon.codex_home)}).read_status(thread_id)
    assert (status.state, status.handoffDelivery) == ("completed", "hook"), done
    assert done["handoffDelivery"] == "hook"


async def test_a_queued_follow_up_at_the_idle_after_the_compaction_gets_no_continuation_and_one_delivery(
        codex_binary: Path, app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path) -> None:
    daemon, jobs = app_server_daemon, private_dir / "jobs"
    async with peer_client(daemon.socket_path) as user:
        thread_id = await new_conversation(user, daemon_model)
        start = len(user.messages)
        daemon_model.compaction_gate.clear()  # the compaction waits while the follow-up is queued
        try:
            with anyio.fail_after(JOB_S):
                job = (await service.schedule(thread_id, HANDOFF, env=rekall_env(
                    daemon, jobs, REKALL_IDLE_STABLE_MS=SLOW_IDLE_MS)))["jobId"]
            await until_state(jobs, thread_id, job, "accepted")
            queued = await anyio.to_thread.run_sync(lambda: subprocess.run(
                [str(codex_binary), "queue", "--thread", thread_id, "--message", "Then update the changelog."],
                capture_output=True, text=True, timeout=60,
                env={**os.environ, "CODEX_HOME": str(daemon.codex_home)}))
            assert queued.returncode == 0, (queued.stdout, queued.stderr)
        finally:
            daemon_model.compaction_gate.set()
        await compaction_turn_ended(user, thread_id, start)
        after_compaction = len(user.messages)
        follow_up = (await user.wait_for(on_thread("turn/started", thread_id), start=after_compaction - 1,
                                         timeout=JOB_S))["params"]["turn"]["id"]
        await user.wait_for(lambda m: on_thread("turn/completed", thread_id)(m)
                            and m["params"]["turn"]["id"] == follow_up, start=start, timeout=JOB_S)
        done = await wait_terminal(jobs, thread_id, job)
        await wait_for_worker_exit(done["pid"])
        seen = user.messages[start:]

    assert "resumeTurnId" not in done and done["resumeSkipped"] in ("new_user_input", "new_turn"), done
    marker = injection_marker(job)
    carried = daemon_model.requests_containing(marker)
    assert all(r.text.count(marker) == 1 for r in carried)
    assert done["handoffDelivery"] == "injected", done
    started = [m for m in seen if on_thread("turn/started", thread_id)(m)]
    assert len(started) == 2, started  # the compaction's, the queued follow-up's: rekall started none
    queued_requests = [r for r in daemon_model.requests if "Then update the changelog." in r.text and r.kind == "turn"]
    assert queued_requests and all(r.text.count(marker) == 0 for r in queued_requests[:1])
