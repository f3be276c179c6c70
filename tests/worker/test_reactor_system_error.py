"""The worker and a runtime status stuck in ``systemError`` (in-process, simulated owner).

The real extension can leave ``threadRuntimeStatus.type`` at ``systemError`` after a turn
failed, while the thread still accepts new turns. rekall never compacts or continues while
the status is not ``idle``; once it has stayed ``systemError`` for the window after the
user's turn ended, the job ends ``failed`` (``thread_system_error``) instead of at the deadline.
"""

from __future__ import annotations

import anyio
import pytest

from rekall.kernel.settings import WorkerSettings
from rekall.surfaces.explain import build_explanation
from rekall.sim import SimulatedOwner
from rekall.states import JobState
from tests.worker.test_reactor import HANDOFF, run, schedule

pytestmark = pytest.mark.anyio

WINDOW = WorkerSettings(idle_stable_s=0.05, deadline_s=20, system_error_window_s=0.3)


async def run_while_the_turn_ends_in_system_error(sim, store, job, settings: WorkerSettings) -> JobState:
    """Run the job's worker while the user's turn ends, leaving systemError behind."""

    async def the_turn_ends_in_system_error() -> None:
        await sim.wait_until(lambda s: s.followers >= 1, timeout=10)
        sim.backend.complete_turn("completed")

    async with anyio.create_task_group() as group:
        group.start_soon(the_turn_ends_in_system_error)
        return await run(store, sim, job, settings)


def _held(store, job) -> dict:
    return next(r for r in build_explanation(store, job)["timeline"] if r["trigger"] == "system_error_held")


async def test_system_error_after_the_user_turn_ends_the_job_after_the_window_without_compacting(tmp_path):
    async with SimulatedOwner(runtime="active", system_error_after_turn=True) as sim:
        sim.backend.user_turn("compact and carry on")
        store, job = await schedule(sim, tmp_path / "jobs")
        assert await run_while_the_turn_ends_in_system_error(sim, store, job, WINDOW) is JobState.FAILED
        status = store.read_status(sim.thread_id)
        assert status.errorCode == "thread_system_error" and status.outcomeMayBeUnknown is False
        assert "systemError" in status.error and "nothing was compacted" in status.error
        assert "Send a message" in status.error and "reload the VS Code window" in status.error
        held = _held(store, job)["evidence"]
        assert held["heldMs"] >= 0 and held["windowS"] == 0.3 and held["runtimeStatus"] == "systemError"
        assert not sim.compact_requests and not sim.start_turn_requests


async def test_the_window_starts_only_once_the_user_turn_has_ended(tmp_path):
    async with SimulatedOwner(runtime="active", system_error_after_turn=True) as sim:
        sim.backend.user_turn("long task")
        store, job = await schedule(sim, tmp_path / "jobs")

        async def script() -> None:
            await sim.wait_until(lambda s: s.followers >= 1, timeout=10)
            sim.backend.set_runtime("systemError")  # a stale status while the turn still runs
            await anyio.sleep(0.6)  # twice the window: nothing may happen, and no event says so
            assert store.read_status(sim.thread_id).state == "waiting_for_idle"
            sim.backend.complete_turn("completed")

        async with anyio.create_task_group() as group:
            group.start_soon(script)
            assert await run(store, sim, job, WINDOW) is JobState.FAILED
        assert store.read_status(sim.thread_id).errorCode == "thread_system_error"
        assert not sim.compact_requests


async def test_a_system_error_that_clears_within_the_window_lets_the_job_go_on(tmp_path):
    async with SimulatedOwner(runtime="systemError") as sim:
        store, job = await schedule(sim, tmp_path / "jobs")

        async def the_user_reloads_the_window() -> None:
            await sim.wait_until(lambda s: s.followers >= 1, timeout=10)
            sim.backend.load_thread()

        async with anyio.create_task_group() as group:
            group.start_soon(the_user_reloads_the_window)
            final = await run(store, sim, job, WorkerSettings(idle_stable_s=0.05, deadline_s=20,
                                                              system_error_window_s=5))
        assert final is JobState.RESUMED
        assert len(sim.compact_requests) == 1 and len(sim.start_turn_requests) == 1
        assert all(r["trigger"] != "system_error_held" for r in build_explanation(store, job)["timeline"])


async def test_system_error_after_the_compaction_ends_the_job_before_any_continuation(tmp_path):
    async with SimulatedOwner(system_error_after_turn=True) as sim:
        store, job = await schedule(sim, tmp_path / "jobs", handoff=HANDOFF)
        assert await run(store, sim, job, WINDOW) is JobState.FAILED
        status = store.read_status(sim.thread_id)
        assert status.errorCode == "thread_system_error" and status.compactionId == "compaction-1"
        assert "no continuation turn was started" in status.error
        assert len(sim.compact_requests) == 1 and not sim.start_turn_requests


async def test_a_deadline_that_passes_first_names_what_the_job_waited_for_and_the_runtime_that_stayed_system_error(
        tmp_path):
    async with SimulatedOwner(runtime="active", system_error_after_turn=True) as sim:
        sim.backend.user_turn("compact and carry on")
        store, job = await schedule(sim, tmp_path / "jobs")
        short = WINDOW._replace(deadline_s=0.5, system_error_window_s=30)  # the deadline comes first
        assert await run_while_the_turn_ends_in_system_error(sim, store, job, short) is JobState.TIMED_OUT
        error = store.read_status(sim.thread_id).error
        assert error.startswith("deadline of 0.5 s exceeded in waiting_for_idle, waiting for the thread to stay idle "
                                "for the stable interval before the compaction; last seen: the thread's runtime "
                                "stayed systemError for "), error
        assert not sim.compact_requests and not sim.start_turn_requests
