"""End-to-end scenarios: ``rekall mcp`` over stdio, the detached worker, the simulated owner.

Every scenario of the Node version's suite (reference §8.1) is here with its outcome in
rekall's states, plus reconnects, an owner moving, the deadline, a protocol bump, cancels
in each non-terminal state and racing schedules. Each test asserts how many compact and
start-turn requests the owner received: never more than one of each.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from rekall.sim import SimulatedOwner
from rekall.store.paths import resolve_lock_dir
from tests.mcpkit import HANDOFF, job_env, rekall_mcp, wait_for_note, wait_for_worker_exit

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

COMPACT = "thread-follower-compact-thread"
START_TURN = "thread-follower-start-turn"


def counts(sim: SimulatedOwner) -> tuple[int, int]:
    return len(sim.compact_requests), len(sim.start_turn_requests)


async def finish(rekall, status) -> None:
    """The worker exits after the terminal state and releases the lock."""
    await wait_for_worker_exit(status["pid"])


# --- the Node scenarios ----------------------------------------------------------------


async def test_compact_only_completes_then_a_second_job_keeps_history_and_can_be_cancelled(jobs_dir):
    async with SimulatedOwner() as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        first = await rekall.schedule()
        assert first["state"] == "scheduled" and first["resume"] is False
        again = await rekall.schedule()
        assert again["alreadyScheduled"] is True and again["jobId"] == first["jobId"]
        done = await rekall.wait_terminal()
        assert done["state"] == "completed"
        assert done["compactionId"] == "compaction-1"
        assert done["tokensReclaimed"] == 80000
        assert done["outcomeMayBeUnknown"] is False
        await finish(rekall, done)
        assert not (resolve_lock_dir() / f"{sim.thread_id}.lock").exists()

        sim.backend.set_runtime("active")  # the agent is mid-turn: the second job must wait
        second = await rekall.schedule()
        assert second["jobNumber"] == 2
        assert [h["jobId"] for h in second["history"]] == [first["jobId"]]
        assert second["history"][0]["tokensReclaimed"] == 80000
        await rekall.wait_for({"waiting_for_idle"})
        cancelled = await rekall.call("cancel_compaction", jobId=second["jobId"])
        assert cancelled["cancellationRequested"] is True
        end = await rekall.wait_terminal()
        assert end["state"] == "cancelled" and end["reason"] == "explicit_cancellation"
        assert end["outcomeMayBeUnknown"] is False
        assert counts(sim) == (1, 0)


async def test_resume_starts_exactly_one_continuation_carrying_the_handoff(jobs_dir):
    async with SimulatedOwner() as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        scheduled = await rekall.schedule(HANDOFF)
        assert scheduled["handoff"] == HANDOFF
        saved = Path(scheduled["handoffPath"]).read_text(encoding="utf-8")
        assert HANDOFF["summary"] in saved
        status = await rekall.status()
        assert "summary" not in status and HANDOFF["summary"] not in str(status)

        done = await rekall.wait_terminal()
        assert done["state"] == "resumed"
        assert done["resumeTurnId"].startswith("resumed-turn")
        assert done["tokensReclaimed"] == 80000
        assert done["reclaimedFraction"] == pytest.approx(80000 / 90000)
        assert done["compactionDurationMs"] >= 0 and done["resumeDelayMs"] >= 0
        assert counts(sim) == (1, 1)
        request = sim.start_turn_requests[0]
        turn = request.params["turnStart"]
        text = turn["request"]["input"][0]["text"]
        assert scheduled["jobId"] in text and HANDOFF["nextStep"] in text and HANDOFF["preserve"][0] in text
        assert scheduled["handoffPath"] in text
        assert turn["request"]["clientUserMessageId"] == scheduled["jobId"]
        assert turn["context"]["inheritThreadSettings"] is True
        assert "model" not in turn["request"] and "approvalPolicy" not in turn["request"]
        assert request.envelope["version"] == 3 and sim.compact_requests[0].envelope["version"] == 2
        await finish(rekall, done)


async def test_a_handoff_without_resume_compacts_and_starts_no_turn(jobs_dir):
    async with SimulatedOwner() as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule({**HANDOFF, "resume": False, "nextStep": ""})
        done = await rekall.wait_terminal()
        assert done["state"] == "completed" and done["resume"] is False
        assert counts(sim) == (1, 0)


async def test_new_input_before_idle_cancels_without_compacting(jobs_dir):
    async with SimulatedOwner(runtime="active") as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        await rekall.wait_for({"waiting_for_idle"})
        sim.backend.user_turn("actually, do something else")
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["reason"] == "new_turn"  # the extension shows no goal
        assert done["outcomeMayBeUnknown"] is False
        assert counts(sim) == (0, 0)


async def test_a_stopped_turn_before_idle_cancels_without_compacting(jobs_dir):
    async with SimulatedOwner(runtime="active") as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        sim.backend.user_turn("long task")
        await rekall.schedule(HANDOFF)
        await rekall.wait_for({"waiting_for_idle"})
        sim.backend.stop_turn("interrupted")
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["reason"] == "user_turn_stopped"
        assert counts(sim) == (0, 0)


async def test_a_thread_whose_latest_user_turn_was_stopped_is_refused(jobs_dir):
    async with SimulatedOwner() as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        sim.backend.user_turn("task")
        sim.backend.stop_turn("interrupted")
        message = await rekall.call_error("schedule_compaction")
        assert "stopped" in message
        assert (await rekall.status())["state"] == "not_scheduled"
        assert counts(sim) == (0, 0)


async def test_cancel_before_idle_cancels_cleanly_and_removes_the_lock(jobs_dir):
    async with SimulatedOwner(runtime="active") as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        scheduled = await rekall.schedule(HANDOFF)
        await rekall.wait_for({"waiting_for_idle"})
        await rekall.call("cancel_compaction", jobId=scheduled["jobId"])
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["outcomeMayBeUnknown"] is False
        await finish(rekall, done)
        assert not (resolve_lock_dir() / f"{sim.thread_id}.lock").exists()
        assert counts(sim) == (0, 0)


async def test_new_input_during_compaction_cancels_with_an_unknown_outcome(jobs_dir):
    async with SimulatedOwner(compaction_delay_s=60) as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        await rekall.wait_for({"accepted"})
        sim.backend.user_turn("new instruction")
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["reason"] == "new_turn"  # the extension shows no goal
        assert done["outcomeMayBeUnknown"] is True
        assert counts(sim) == (1, 0)


async def test_new_input_while_waiting_to_resume_cancels_with_a_known_outcome(jobs_dir):
    env = job_env({}, jobs_dir, REKALL_IDLE_STABLE_MS="3000")
    async with SimulatedOwner() as sim, rekall_mcp({**env, **sim.env}, sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        await rekall.wait_for({"waiting_for_resume_idle"})
        sim.backend.user_turn("stop here please")
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["outcomeMayBeUnknown"] is False
        assert done["compactionId"] == "compaction-1"
        assert counts(sim) == (1, 0)


async def test_a_tampered_handoff_fails_before_any_continuation(jobs_dir):
    async with SimulatedOwner(compaction_delay_s=0.3) as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        scheduled = await rekall.schedule(HANDOFF)
        with open(scheduled["handoffPath"], "a", encoding="utf-8") as handle:
            handle.write(" ")
        done = await rekall.wait_terminal()
        assert done["state"] == "failed" and done["errorCode"] == "handoff_changed"
        assert done["outcomeMayBeUnknown"] is False
        assert counts(sim) == (1, 0)


async def test_a_start_turn_ack_without_a_turn_fails_with_an_unknown_outcome(jobs_dir):
    async with SimulatedOwner() as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        sim.reply_next(START_TURN, {"ok": True})
        await rekall.schedule(HANDOFF)
        done = await rekall.wait_terminal()
        assert done["state"] == "failed" and done["outcomeMayBeUnknown"] is True
        assert counts(sim) == (1, 1)


async def test_a_dropped_connection_on_start_turn_fails_with_an_unknown_outcome(jobs_dir):
    async with SimulatedOwner() as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        sim.drop_connection_on(START_TURN)
        await rekall.schedule(HANDOFF)
        done = await rekall.wait_terminal()
        assert done["state"] == "failed" and done["outcomeMayBeUnknown"] is True
        assert counts(sim) == (1, 1)


@pytest.mark.parametrize(
    ("telemetry", "reason"),
    [
        ("low", "more_than_60_percent_used"),
        ("missing", "missing_token_telemetry"),
        ("stale", "stale_or_unreclaimed_token_telemetry"),
    ],
)
async def test_resume_is_skipped_without_headroom(jobs_dir, telemetry, reason):
    async with SimulatedOwner(telemetry_after=telemetry) as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        done = await rekall.wait_terminal()
        assert done["state"] == "skipped"
        assert done["resumeSkipped"] == "insufficient_headroom" and done["resumeSkipReason"] == reason
        assert done["jobNumber"] == 1 and done["outcomeMayBeUnknown"] is False
        assert counts(sim) == (1, 0)


async def test_exactly_sixty_percent_still_resumes(jobs_dir):
    async with SimulatedOwner(telemetry_after="exact") as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        done = await rekall.wait_terminal()
        assert done["state"] == "resumed" and done["tokensReclaimed"] == 30000
        assert counts(sim) == (1, 1)


async def test_telemetry_that_degrades_before_the_resume_skips_it(jobs_dir):
    async with SimulatedOwner(telemetry_after="degrades", telemetry_step_s=0.01) as sim, \
            rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        done = await rekall.wait_terminal()
        assert done["state"] == "skipped"
        assert done["resumeSkipReason"] == "more_than_60_percent_used"
        assert done["contextTokensAfter"] == 10000 and done["resumeCheckContextTokens"] == 70000
        assert counts(sim) == (1, 0)


# --- beyond the Node suite ---------------------------------------------------------------


async def test_the_worker_reconnects_after_a_dropped_connection_while_waiting(jobs_dir):
    async with SimulatedOwner(runtime="active") as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        scheduled = await rekall.schedule(HANDOFF)
        # Connected means the first snapshot is in the worker's hands, not just its follow at the
        # owner: a drop in between is a failed first connect (not retried), not this scenario.
        await wait_for_note(jobs_dir, scheduled["jobId"], "connected")
        connections = sim.connections
        await sim.disconnect_all()
        await sim.wait_until(lambda s: s.connections > connections and s.followers >= 1, timeout=10)
        sim.backend.complete_turn("completed")
        done = await rekall.wait_terminal()
        assert done["state"] == "resumed"
        assert counts(sim) == (1, 1)
        notes = await wait_for_note(jobs_dir, scheduled["jobId"], "reconnected")
        assert "connection_lost" in notes


async def test_the_worker_follows_the_thread_when_its_owner_moves(jobs_dir):
    async with SimulatedOwner(runtime="active") as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        await rekall.wait_for({"waiting_for_idle"})
        new_owner = sim.move_owner()
        sim.backend.complete_turn("completed")
        done = await rekall.wait_terminal()
        assert done["state"] == "resumed"
        assert counts(sim) == (1, 1)
        assert sim.compact_requests[0].envelope["targetClientId"] == new_owner
        assert sim.start_turn_requests[0].envelope["targetClientId"] == new_owner


async def test_the_deadline_ends_a_job_that_never_sees_idle_as_timed_out(jobs_dir):
    env = job_env({}, jobs_dir, REKALL_DEADLINE_S="1")
    async with SimulatedOwner(runtime="active") as sim, rekall_mcp({**env, **sim.env}, sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        done = await rekall.wait_terminal()
        assert done["state"] == "timed_out" and done["outcomeMayBeUnknown"] is False
        assert done["errorCode"] == "deadline_exceeded"
        assert counts(sim) == (0, 0)


async def test_a_protocol_version_bump_fails_the_job_with_its_code(jobs_dir):
    async with SimulatedOwner(runtime="active") as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        await rekall.wait_for({"waiting_for_idle"})
        await sim.wait_until(lambda s: s.followers >= 1, timeout=10)  # the worker follows, on v11
        newer = sim.state_version + 1
        sim.state_version = newer
        sim.backend.complete_turn("completed")
        done = await rekall.wait_terminal()
        assert done["state"] == "failed" and done["errorCode"] == "protocol_version_unsupported"
        assert f"at base version {newer};" in done["error"] and done["error"].endswith("update rekall")
        assert counts(sim) == (0, 0)


async def test_cancel_while_requesting_records_an_unknown_outcome(jobs_dir):
    async with SimulatedOwner() as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        sim.delay_next(COMPACT, 30)
        scheduled = await rekall.schedule(HANDOFF)
        await rekall.wait_for({"requesting"})
        await rekall.call("cancel_compaction", jobId=scheduled["jobId"])
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["outcomeMayBeUnknown"] is True
        assert counts(sim) == (1, 0)


async def test_cancel_after_acceptance_records_an_unknown_outcome(jobs_dir):
    async with SimulatedOwner(compaction_delay_s=60) as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        scheduled = await rekall.schedule(HANDOFF)
        await rekall.wait_for({"accepted"})
        asked = await rekall.call("cancel_compaction", jobId=scheduled["jobId"])
        assert asked["cancellationRequested"] is True and asked["outcomeMayBeUnknown"] is True  # as described
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["outcomeMayBeUnknown"] is True
        assert counts(sim) == (1, 0)


async def test_cancel_while_waiting_to_resume_records_a_known_outcome(jobs_dir):
    env = job_env({}, jobs_dir, REKALL_IDLE_STABLE_MS="3000")
    async with SimulatedOwner() as sim, rekall_mcp({**env, **sim.env}, sim.thread_id) as rekall:
        scheduled = await rekall.schedule(HANDOFF)
        await rekall.wait_for({"waiting_for_resume_idle"})
        asked = await rekall.call("cancel_compaction", jobId=scheduled["jobId"])
        assert asked["cancellationRequested"] is True and asked["outcomeMayBeUnknown"] is False
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["outcomeMayBeUnknown"] is False
        assert counts(sim) == (1, 0)


async def test_cancel_while_resuming_records_an_unknown_outcome(jobs_dir):
    async with SimulatedOwner() as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        sim.delay_next(START_TURN, 30)
        scheduled = await rekall.schedule(HANDOFF)
        await rekall.wait_for({"resuming"})
        await rekall.call("cancel_compaction", jobId=scheduled["jobId"])
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["outcomeMayBeUnknown"] is True
        assert counts(sim) == (1, 1)


async def test_two_racing_schedules_make_one_job(jobs_dir):
    async with SimulatedOwner(runtime="active") as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as a, \
            rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as b:
        results: list[dict] = []

        async def schedule(client) -> None:
            results.append(await client.schedule(HANDOFF))

        async with anyio.create_task_group() as group:
            group.start_soon(schedule, a)
            group.start_soon(schedule, b)
        assert len({r["jobId"] for r in results}) == 1
        assert sorted(r["alreadyScheduled"] for r in results) == [False, True]
        sim.backend.complete_turn("completed")
        done = await a.wait_terminal()
        assert done["state"] == "resumed"
        assert counts(sim) == (1, 1)
