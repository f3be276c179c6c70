"""The tally counts what happened: faults that met a live job apart from those planned, and
every request that reached the router (refused ones too) in the duplicate ledger; the audit
sees a lock a worker left behind before anything reaps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import COMPACT, ChaosJob, audit, spawn_driver
from tests.chaos.randomized import Fault, Plan, run_plan

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

#: A worker that ends its job and exits without releasing the thread's lock.
LEAKY_WORKER = """
import sys
from rekall.store import JobStore
thread, job = sys.argv[1:3]
with JobStore.open().open_lifecycle(thread, job) as lifecycle:
    lifecycle.fire("cancel", reason="explicit_cancellation")
"""


def test_requests_the_router_refuses_count_in_the_duplicate_ledger(tmp_path: Path):
    with ChaosJob(tmp_path) as job:
        job.sim.call(lambda owner: owner.request_versions.update({COMPACT: 99}))  # refused before routing
        job.schedule()
        end = job.finish()
        assert (end["state"], end["errorCode"]) == ("failed", "request-version-mismatch")
        assert "the extension expects another version" in end["error"] and "rekall protocol" in end["error"]
        assert job.sim.call(lambda owner: len(owner.compact_requests)) == 0  # the owner never saw it
        assert job.job_counts() == (1, 0) and audit(job).compact_requests == 1


def test_a_fault_planned_after_the_job_ended_is_injected_but_not_landed(tmp_path: Path):
    disconnect = Fault("disconnect", lambda job: job.sim.disconnect_all())
    never_sent = Fault("no start-turn reply", lambda job: job.sim.silence_next("thread-follower-start-turn"),
                       method="thread-follower-start-turn")
    plan = Plan("tally", sim={"runtime": "active"}, env={}, handoff=None, armed=(never_sent,),
                timeline=((0.0, disconnect), (0.4, Fault("(turn ends)", lambda job: job.sim.complete_turn())),
                          (8.0, disconnect)))
    result = run_plan(plan, tmp_path)
    assert result.audit.state == "completed"  # no resume asked for: the armed start-turn fault never fires
    assert plan.fault_kinds == ["no start-turn reply", "disconnect", "disconnect"]
    assert result.landed == ("disconnect",)  # the first disconnect met the waiting job; the second came too late


def test_the_audit_sees_a_lock_the_worker_left_behind(tmp_path: Path):
    with ChaosJob(tmp_path) as job:
        job.schedule(spawn=spawn_driver(LEAKY_WORKER))
        end = job.finish()
        assert end["state"] == "cancelled"
        assert any("left the thread's lock behind" in problem for problem in audit(job).problems)
