"""The handoff reaches the model exactly once after a job, on the REAL shared app-server daemon.

Real Codex 0.171.0 (the session's daemon, tests/codex/conftest.py) with the mock model; nothing
of Codex is mocked. A ``websockets`` client with no rekall code plays the user's terminal; rekall
is scheduled through its service, as the MCP tool does, and its worker runs detached. What the
model received is read from the mock model's recorded requests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall.usecases import service
from rekall.states.status import wire
from rekall.store import JobStore
from tests.codex.daemonkit import Daemon, PeerClient, peer_client
from tests.codex.test_app_server_job import FILLER, JOB_S, on_thread, rekall_cli, run_turn
from tests.mcpkit import HANDOFF, TERMINAL, wait_for_worker_exit
from tests.support.mock_model import MockModel, RecordedRequest

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

HANDOFF_JSON = json.dumps(HANDOFF, indent=2, ensure_ascii=False)


def injection_marker(job_id: str) -> str:
    return f"[Handoff saved through rekall before a context compaction; job {job_id}"


def continuation_marker(job_id: str) -> str:
    return f"[Automatic continuation requested through rekall; job {job_id}]"


def handoff_copies(request: RecordedRequest) -> int:
    """How many copies of the handoff's text the request carried."""
    return request.text.count(HANDOFF["nextStep"])


def rekall_env(daemon: Daemon, jobs: Path, **more: str) -> dict[str, str]:
    return {**os.environ, "CODEX_HOME": str(daemon.codex_home), "REKALL_JOBS_DIR": str(jobs),
            "REKALL_IDLE_STABLE_MS": "100", **more}


async def schedule_and_finish(user: PeerClient, daemon: Daemon, thread_id: str, handoff: dict[str, Any],
                              jobs: Path, **env: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Schedule a job on the thread, wait for its end; what the user's terminal saw meanwhile."""
    start = len(user.messages)
    with anyio.fail_after(JOB_S):
        scheduled = await service.schedule(thread_id, handoff, env=rekall_env(daemon, jobs, **env))
    done = await wait_terminal(jobs, thread_id, scheduled["jobId"])
    await wait_for_worker_exit(done["pid"])
    return done, user.messages[start:]


async def wait_terminal(jobs: Path, thread_id: str, job_id: str) -> dict[str, Any]:
    store = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)})
    with anyio.fail_after(JOB_S):
        while (status := store.read_status(thread_id)).jobId != job_id or status.state not in TERMINAL:
            await anyio.sleep(0.05)
    return wire(status)  # as the status file and `rekall status --json` hold it


def journaled_triggers(jobs: Path, job_id: str) -> list[str]:
    from rekall.surfaces.explain import build_explanation

    explanation = build_explanation(JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)}), job_id)
    return [row["trigger"] for row in explanation["timeline"]]


async def new_conversation(user: PeerClient, model: MockModel) -> str:
    thread_id = (await user.request("thread/start", {"approvalPolicy": "never"}))["thread"]["id"]
    model.queue_text(FILLER)
    await run_turn(user, thread_id, "Read the parser and tell me everything about it.")
    return thread_id


async def compaction_turn_ended(user: PeerClient, thread_id: str, start: int) -> None:
    """Until the turn that ran a compaction seen after ``start`` completed (a turn cannot start before)."""
    item = await user.wait_for(lambda m: on_thread("item/completed", thread_id)(m)
                               and m["params"]["item"]["type"] == "contextCompaction", start=start, timeout=JOB_S)
    await user.wait_for(lambda m: on_thread("turn/completed", thread_id)(m)
                        and m["params"]["turn"]["id"] == item["params"]["turnId"], start=start, timeout=JOB_S)


def turns_started(seen: list[dict[str, Any]], thread_id: str) -> list[str]:
    return [m["params"]["turn"]["id"] for m in seen if on_thread("turn/started", thread_id)(m)]


def next_turn_request(model: MockModel, seq: int) -> RecordedRequest:
    """The one model request of a turn after request ``seq``."""
    (request,) = [r for r in model.requests if r.seq > seq and r.kind == "turn"]
    return request


async def test_without_a_continuation_the_users_next_request_carries_the_injected_handoff_once_and_no_turn_was_started(
        app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path) -> None:
    daemon, jobs = app_server_daemon, private_dir / "jobs"
    async with peer_client(daemon.socket_path) as user:
        thread_id = await new_conversation(user, daemon_model)
        done, seen = await schedule_and_finish(user, daemon, thread_id, {**HANDOFF, "resume": False}, jobs)
        before_next = daemon_model.requests[-1].seq
        await run_turn(user, thread_id, "What were we doing?")

    assert done["state"] == "completed" and done["platform"] == "app-server", done
    assert done["handoffDelivery"] == "injected" and done["outcomeMayBeUnknown"] is False
    assert done["injectedBytes"] > len(HANDOFF_JSON) and done["injectDelayMs"] is not None
    # rekall started no turn: the only turn between the schedule and the user's next is the compaction's.
    compactions = [m["params"]["item"]["id"] for m in seen if on_thread("item/completed", thread_id)(m)
                   and m["params"]["item"]["type"] == "contextCompaction"]
    assert compactions == [done["compactionId"]] and len(turns_started(seen, thread_id)) == 1
    # The user's next request is the first to carry the handoff, once, framed; no request before it did.
    next_request = next_turn_request(daemon_model, before_next)
    marker = injection_marker(done["jobId"])
    assert next_request.text.count(marker) == 1 and handoff_copies(next_request) == 1
    assert f"thread {thread_id}]" in next_request.text and "resume false" in next_request.text
    assert daemon_model.requests_containing(marker) == [next_request]
    # The compaction machine hands over; the delivery machine chooses the injection, journals it, and it lands.
    assert journaled_triggers(jobs, done["jobId"])[-4:] == ["compaction_completed", "route_chosen", "idle_stable",
                                                            "handoff_delivered"]
    # status, explain and history say how the handoff reached the model.
    assert "handoff delivered  injected" in rekall_cli(daemon, "status", thread_id, jobs=jobs)
    assert "handoff_delivered" in rekall_cli(daemon, "explain", done["jobId"], jobs=jobs)
    (row,) = json.loads(rekall_cli(daemon, "history", "--json", jobs=jobs))[:1]
    assert row["handoffDelivery"] == "injected" and "injected into the thread's context" in row["outcome"]


async def test_with_a_continuation_it_carries_the_handoff_once_and_the_next_request_has_no_second_copy(
        app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path) -> None:
    daemon, jobs = app_server_daemon, private_dir / "jobs"
    async with peer_client(daemon.socket_path) as user:
        thread_id = await new_conversation(user, daemon_model)
        done, seen = await schedule_and_finish(user, daemon, thread_id, HANDOFF, jobs)
        await user.wait_for(lambda m: on_thread("turn/completed", thread_id)(m)
                            and m["params"]["turn"]["id"] == done["resumeTurnId"], timeout=JOB_S)
        before_next = daemon_model.requests[-1].seq
        await run_turn(user, thread_id, "And now?")

    assert done["state"] == "resumed" and done["handoffDelivery"] == "continuation", done
    (continuation,) = daemon_model.requests_containing(continuation_marker(done["jobId"]))[:1]
    assert handoff_copies(continuation) == 1
    assert not daemon_model.requests_containing(injection_marker(done["jobId"]))
    next_request = next_turn_request(daemon_model, before_next)
    assert handoff_copies(next_request) == 1  # the continuation's message, kept in the history: no second copy


async def test_a_continuation_overtaken_by_the_users_input_is_replaced_by_one_injection(
        app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path) -> None:
    daemon, jobs = app_server_daemon, private_dir / "jobs"
    store = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)})
    async with peer_client(daemon.socket_path) as user:
        thread_id = await new_conversation(user, daemon_model)
        start = len(user.messages)
        env = rekall_env(daemon, jobs, REKALL_IDLE_STABLE_MS="1500")  # time for the user to type first
        with anyio.fail_after(JOB_S):
            scheduled = await service.schedule(thread_id, HANDOFF, env=env)
            while store.read_status(thread_id).state != "waiting_for_resume_idle":
                await anyio.sleep(0.02)
        await compaction_turn_ended(user, thread_id, start)
        await run_turn(user, thread_id, "Actually, stop and look at the tests first.")
        done = await wait_terminal(jobs, thread_id, scheduled["jobId"])
        await wait_for_worker_exit(done["pid"])
        seen = user.messages[start:]
        before_next = daemon_model.requests[-1].seq
        await run_turn(user, thread_id, "Go on.")

    assert done["state"] == "completed" and done["resumeSkipped"] == "new_user_input", done
    assert done["handoffDelivery"] == "injected"
    assert "resumeTurnId" not in done and len(turns_started(seen, thread_id)) == 2  # the compaction, the user's
    marker = injection_marker(done["jobId"])
    carried = daemon_model.requests_containing(marker)
    assert carried and all(r.text.count(marker) == 1 for r in carried)  # in the history from then on, once
    next_request = next_turn_request(daemon_model, before_next)
    assert next_request.text.count(marker) == 1
    assert not daemon_model.requests_containing(continuation_marker(done["jobId"]))


async def test_a_continuation_skipped_for_headroom_is_replaced_by_one_injection(
        app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path, monkeypatch) -> None:
    daemon, jobs = app_server_daemon, private_dir / "jobs"
    # A summary larger than the conversation it replaces: the count after the compaction is not
    # below the count before, so the headroom rule refuses the continuation.
    monkeypatch.setattr(daemon_model, "summary_text", "a long summary " * 6000)
    async with peer_client(daemon.socket_path) as user:
        thread_id = (await user.request("thread/start", {"approvalPolicy": "never"}))["thread"]["id"]
        await run_turn(user, thread_id, "Read the parser.")
        done, seen = await schedule_and_finish(user, daemon, thread_id, HANDOFF, jobs)
        before_next = daemon_model.requests[-1].seq
        await run_turn(user, thread_id, "Go on.")

    assert done["state"] == "skipped" and done["resumeSkipped"] == "insufficient_headroom", done
    assert done["handoffDelivery"] == "injected" and len(turns_started(seen, thread_id)) == 1
    marker = injection_marker(done["jobId"])
    next_request = next_turn_request(daemon_model, before_next)
    assert next_request.text.count(marker) == 1 and handoff_copies(next_request) == 1
    assert "skipped it for headroom" in next_request.text
    assert daemon_model.requests_containing(marker) == [next_request]
    assert not daemon_model.requests_containing(continuation_marker(done["jobId"]))


async def test_with_injection_turned_off_nothing_is_injected_and_the_status_says_why(
        app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path) -> None:
    daemon, jobs = app_server_daemon, private_dir / "jobs"
    async with peer_client(daemon.socket_path) as user:
        thread_id = await new_conversation(user, daemon_model)
        done, _ = await schedule_and_finish(user, daemon, thread_id, {**HANDOFF, "resume": False}, jobs,
                                            REKALL_INJECT_HANDOFF="off")
        before_next = daemon_model.requests[-1].seq
        await run_turn(user, thread_id, "What were we doing?")

    assert done["state"] == "completed" and done["handoffDelivery"] == "not_delivered", done
    assert "REKALL_INJECT_HANDOFF=off" in done["handoffDeliveryNote"]
    assert not daemon_model.requests_containing(injection_marker(done["jobId"]))
    next_request = next_turn_request(daemon_model, before_next)
    assert handoff_copies(next_request) == 0


async def test_a_compaction_rekall_did_not_request_gets_nothing_from_it(
        app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path) -> None:
    daemon, jobs = app_server_daemon, private_dir / "jobs"
    async with peer_client(daemon.socket_path) as user:
        thread_id = await new_conversation(user, daemon_model)
        done, _ = await schedule_and_finish(user, daemon, thread_id, {**HANDOFF, "resume": False}, jobs)
        # The user compacts again with the same request rekall uses (what `/compact` sends), later.
        start = len(user.messages)
        await user.request("thread/compact/start", {"threadId": thread_id})
        await compaction_turn_ended(user, thread_id, start)
        before_next = daemon_model.requests[-1].seq
        await run_turn(user, thread_id, "Where are we?")

    marker = injection_marker(done["jobId"])
    next_request = next_turn_request(daemon_model, before_next)
    assert next_request.text.count(marker) <= 1  # what Codex kept of the one injection; nothing new
    store = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)})
    assert [job for _, job in store.all_jobs()] == [done["jobId"]]  # no job, no injection for the user's compaction
    assert journaled_triggers(jobs, done["jobId"]).count("handoff_delivered") == 1


async def test_codexs_own_auto_compaction_after_a_job_gets_nothing_from_rekall(
        app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path) -> None:
    daemon, jobs = app_server_daemon, private_dir / "jobs"
    async with peer_client(daemon.socket_path) as user:
        thread_id = (await user.request("thread/start", {"approvalPolicy": "never", "config": {
            "model_auto_compact_token_limit": 20_000}}))["thread"]["id"]
        await run_turn(user, thread_id, "Read the parser.")
        done, _ = await schedule_and_finish(user, daemon, thread_id, {**HANDOFF, "resume": False}, jobs)
        start = len(user.messages)
        daemon_model.queue_text(FILLER)  # past the limit: Codex compacts by itself
        await run_turn(user, thread_id, "Tell me everything about it.")
        await run_turn(user, thread_id, "Where are we?")
        seen = user.messages[start:]

    auto = [m["params"]["item"]["id"] for m in seen if on_thread("item/completed", thread_id)(m)
            and m["params"]["item"]["type"] == "contextCompaction"]
    assert auto and done["compactionId"] not in auto  # Codex's own, after the job
    marker = injection_marker(done["jobId"])
    assert all(r.text.count(marker) <= 1 for r in daemon_model.requests_containing(marker))
    store = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)})
    assert [job for _, job in store.all_jobs()] == [done["jobId"]]
    assert journaled_triggers(jobs, done["jobId"]).count("handoff_delivered") == 1
