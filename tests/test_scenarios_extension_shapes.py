"""End-to-end jobs against the shapes the real extension produces (reference
``extension-generations.md`` §3): ``rekall mcp`` over stdio, the detached worker, and the
simulated owner with one shape option on. Each job ends with its designed outcome, after at
most one compact and at most one start-turn request.
"""

from __future__ import annotations

import anyio
import pytest

from rekall.sim import SimulatedOwner
from tests.mcpkit import HANDOFF, job_env, rekall_mcp
from tests.test_scenarios import counts

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def agent_turn_then_job(sim: SimulatedOwner, rekall) -> None:
    """The agent schedules from inside its own turn, then the turn ends (as in real use)."""
    await rekall.schedule(HANDOFF)
    await rekall.wait_for({"waiting_for_idle"})


# --- 1. paginated history ----------------------------------------------------------------


async def test_a_paginated_thread_is_compacted_and_resumed(jobs_dir):
    async with SimulatedOwner(history_mode="paginated", runtime="active") as sim, \
            rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        sim.backend.user_turn("compact this and carry on")
        await agent_turn_then_job(sim, rekall)
        sim.backend.complete_turn()
        done = await rekall.wait_terminal()
        assert done["state"] == "resumed" and done["compactionId"].startswith("compaction-")
        assert done["tokensReclaimed"] == 80000
        assert counts(sim) == (1, 1)
        assert sim.backend.state["turns"] == []  # everything happened in the history
        assert sim.backend.turns()[-1]["params"]["clientUserMessageId"] == done["jobId"]


async def test_new_input_in_a_paginated_history_cancels_the_continuation(jobs_dir):
    async with SimulatedOwner(history_mode="paginated", compaction_delay_s=60) as sim, \
            rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)
        await rekall.wait_for({"accepted"})
        sim.backend.user_turn("wait, do something else")
        done = await rekall.wait_terminal()
        assert done["state"] == "cancelled" and done["reason"] == "new_turn"  # the extension shows no goal
        assert counts(sim) == (1, 0)


# --- 2. finished requests ----------------------------------------------------------------


async def test_an_approval_answered_in_place_does_not_hold_the_job(jobs_dir):
    async with SimulatedOwner(runtime="active", answered_requests=1) as sim, \
            rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        sim.backend.user_turn("run the tests, then compact")
        approval = sim.backend.add_request()
        await agent_turn_then_job(sim, rekall)
        sim.backend.answer_request(approval)
        sim.backend.complete_turn()
        done = await rekall.wait_terminal()
        assert done["state"] == "resumed"
        assert [r["completed"] for r in sim.backend.state["requests"]] == [True, True]
        assert counts(sim) == (1, 1)


# --- 3. a null runtime status ------------------------------------------------------------


@pytest.mark.parametrize("runtime", [None, "notLoaded"])
async def test_a_thread_not_loaded_yet_is_scheduled_and_waited_for(jobs_dir, runtime):
    async with SimulatedOwner(runtime=runtime) as sim, rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        await rekall.schedule(HANDOFF)  # not refused as an unsupported layout
        await rekall.wait_for({"waiting_for_idle"})
        assert counts(sim) == (0, 0)
        sim.backend.load_thread()
        done = await rekall.wait_terminal()
        assert done["state"] == "resumed"
        assert counts(sim) == (1, 1)


# --- 4. a runtime status that sticks -----------------------------------------------------


async def test_a_runtime_stuck_in_system_error_ends_the_job_after_the_window_without_compacting(jobs_dir):
    env = job_env({}, jobs_dir, REKALL_SYSTEM_ERROR_WINDOW_S="0.5")
    async with SimulatedOwner(runtime="active", system_error_after_turn=True) as sim, \
            rekall_mcp({**env, **sim.env}, sim.thread_id) as rekall:
        sim.backend.user_turn("compact this and carry on")
        await agent_turn_then_job(sim, rekall)
        sim.backend.complete_turn()  # the turn ends, the runtime says systemError and stays there
        done = await rekall.wait_terminal()
        assert done["state"] == "failed" and done["errorCode"] == "thread_system_error"
        assert "systemError" in done["error"] and "nothing was compacted" in done["error"]
        assert "Send a message" in done["error"] and "reload the VS Code window" in done["error"]
        assert done["outcomeMayBeUnknown"] is False
        assert counts(sim) == (0, 0)


# --- 5. what already worked, with the real shapes ----------------------------------------


@pytest.mark.parametrize("options", [
    pytest.param({"snapshot_on_connect": True, "snapshots_at_turn_boundaries": True}, id="unsolicited-snapshots"),
    pytest.param({"replace_root_at_turn_end": True}, id="root-replace"),
    pytest.param({"foreign_batches": True}, id="foreign-batches"),
    pytest.param({"real_submissions": True}, id="submissions-without-terminal"),
])
async def test_the_real_owner_s_ways_of_publishing_still_end_resumed(jobs_dir, options):
    async with SimulatedOwner(runtime="active", **options) as sim, \
            rekall_mcp(job_env(sim.env, jobs_dir), sim.thread_id) as rekall:
        sim.backend.user_turn("compact this and carry on")
        submission = sim.backend.add_unconfirmed_submission()  # in flight until confirmed
        await agent_turn_then_job(sim, rekall)
        sim.backend.complete_turn()
        await anyio.sleep(0.5)  # several idle debounces (60 ms): nothing may happen, and no event says so
        assert (await rekall.status())["state"] == "waiting_for_idle" and counts(sim) == (0, 0)
        sim.backend.confirm_submission(submission)
        done = await rekall.wait_terminal()
        assert done["state"] == "resumed"
        assert counts(sim) == (1, 1)
        if options.get("foreign_batches"):
            assert sim.foreign_batches_sent > 0
