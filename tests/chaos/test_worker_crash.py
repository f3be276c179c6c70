"""The worker dies (SIGKILL) in every non-terminal state, and between a journal write and its
fsync. Afterwards status and explain tell the truth (``failed``/``worker_lost``, with
``outcomeMayBeUnknown`` when a request may have been sent and its effect was not seen), the
lock is recognised as dead, a new job can be scheduled, the handoff and journal are intact, and
nothing was retried.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from rekall.explain import build_explanation
from rekall.service import Refused
from tests.chaos.harness import (COMPACT, START_TURN, UNKNOWN_AFTER, ChaosJob, audit, spawn_driver,
                                 spawn_placeholder)
from tests.chaos.ledger import LEDGER

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


@attrs.frozen
class Hold:
    """How to make a job sit in ``state`` long enough to kill its worker there."""

    state: str
    reach: Callable[[ChaosJob, int], object] = lambda job, follows: None
    sim: dict[str, Any] = attrs.field(factory=dict)
    env: dict[str, str] = attrs.field(factory=dict)
    arm: Callable[[ChaosJob], object] = lambda job: None
    spawn: Callable[..., int] | None = None


HOLDS = [
    # a spawn that starts a process which never runs the job
    Hold("scheduled", spawn=spawn_placeholder),
    Hold("waiting_for_idle", lambda job, follows: job.wait_followed(follows), sim={"runtime": "active"}),
    Hold("requesting", lambda job, follows: job.wait_sent(COMPACT),
         arm=lambda job: job.sim.delay_next(COMPACT, 30)),
    Hold("accepted", lambda job, follows: job.wait_state({"accepted"}), sim={"compaction_delay_s": 60}),
    Hold("waiting_for_resume_idle", lambda job, follows: job.wait_state({"waiting_for_resume_idle"}),
         env={"REKALL_IDLE_STABLE_MS": "1500"}),
    Hold("resuming", lambda job, follows: job.wait_sent(START_TURN),
         arm=lambda job: job.sim.delay_next(START_TURN, 30)),
]


def assert_worker_lost(job: ChaosJob, held: str) -> None:
    """What status and explain must say about a job whose worker died in ``held``."""
    unknown = held in UNKNOWN_AFTER
    status = job.status()
    assert (status["state"], status["errorCode"], status["outcomeMayBeUnknown"]) == ("failed", "worker_lost", unknown)
    assert held in status["error"]
    result = audit(job)
    assert result.path[-2:] == (held, "failed")
    assert not result.data_lost and not result.problems, (result.data_lost, result.problems)
    explanation = build_explanation(job.store, job.job_id)
    assert explanation["outcome"].startswith("Failed: the worker process was lost")
    assert ("outcome may be unknown" in explanation["outcome"]) is unknown
    LEDGER.job(result, f"worker killed in {held}")


def compacting(owner: Any) -> bool:
    return any(item.get("type") == "contextCompaction" and item.get("completed") is False
               for turn in owner.backend.state["turns"] for item in turn.get("items", []))


def assert_a_new_job_runs_and_nothing_was_retried(job: ChaosJob, held: str) -> None:
    before, first = job.counts(), job.job_id
    if held == "accepted":  # the owner still compacts for the lost job: a second compaction is refused
        with pytest.raises(Refused) as caught:
            job.schedule()
        assert "compaction in progress" in caught.value.message
        assert job.counts() == before and job.job_id == first
        return
    job.sim.wait_until(lambda owner: not compacting(owner))  # a short compaction may still be finishing
    job.sim.set_runtime("active")  # hold the new job before any request, then cancel it
    follows = job.sim.follow_count
    again = job.schedule()
    assert again["alreadyScheduled"] is False and again["jobNumber"] == 2 and again["jobId"] != first
    job.wait_followed(follows)
    job.cancel()
    end = job.finish()
    assert (end["state"], end["outcomeMayBeUnknown"]) == ("cancelled", False)
    assert end["history"][0]["jobId"] == first and end["history"][0]["state"] in ("failed", "resumed")
    assert job.counts() == before  # the dead job's requests were never sent again
    result = audit(job)
    assert not result.data_lost and not result.problems, (result.data_lost, result.problems)
    LEDGER.job(result, "the job after a crash")


@pytest.mark.parametrize("hold", HOLDS, ids=lambda h: h.state)
def test_a_worker_killed_in_each_state_is_reported_lost_and_the_thread_can_be_scheduled_again(tmp_path: Path,
                                                                                             hold: Hold):
    with ChaosJob(tmp_path, env=hold.env, **hold.sim) as job:
        hold.arm(job)
        follows = job.sim.follow_count
        job.schedule(spawn=hold.spawn)
        hold.reach(job, follows)
        assert job.status()["state"] == hold.state
        job.kill_worker()
        LEDGER.fault("worker SIGKILL", on_live_job=True)
        assert_worker_lost(job, hold.state)
        assert not job.store.lock_path(job.thread_id).exists()
        assert_a_new_job_runs_and_nothing_was_retried(job, hold.state)


# --- a crash inside an append ------------------------------------------------------------

#: Runs the real worker with a FileOps that dies at the N-th journal append: after the write
#: but before its fsync ("kept": a process crash keeps the page cache), the same with the
#: unsynced bytes dropped ("lost": what a power cut does), or half-way through the write ("torn").
CRASHING_WORKER = r"""
import os, signal, sys
from rekall.store import FileOps, JobStore
from rekall.worker import run_worker

thread, job, mode, target = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
durable = {}
appends = 0

def is_journal(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith(".journal.jsonl")
    except OSError:
        return False

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def write(fd, data):
    global appends
    if is_journal(fd):
        durable.setdefault(fd, os.fstat(fd).st_size)
        appends += 1
        if appends == target and mode == "torn":
            os.write(fd, data[: len(data) // 2])
            die()
    return os.write(fd, data)

def fsync(fd):
    if is_journal(fd) and appends == target and mode in ("kept", "lost"):
        if mode == "lost":
            os.ftruncate(fd, durable[fd])
        die()
    os.fsync(fd)
    if is_journal(fd):
        durable[fd] = os.fstat(fd).st_size

faulty = FileOps(write=write, fsync=fsync)
plain_open = JobStore.open.__func__
JobStore.open = classmethod(lambda cls, env=None, **kw: plain_open(cls, env, **{**kw, "fs": faulty}))
sys.exit(run_worker(thread, job))
"""

#: The worker's journal appends in a clean resumed run: the state each one moves to (None: a note).
APPENDS = ("waiting_for_idle", None, "requesting", "accepted", "waiting_for_resume_idle", "resuming", "resumed")


def state_after(appends: int) -> str:
    return next((s for s in reversed(APPENDS[:appends]) if s is not None), "scheduled")


@pytest.mark.parametrize("mode", ["kept", "lost", "torn"])
@pytest.mark.parametrize("append", range(1, len(APPENDS) + 1))
def test_a_crash_inside_any_journal_append_leaves_a_truthful_intact_job(tmp_path: Path, append: int, mode: str):
    survived = append if mode == "kept" else append - 1  # records on disk after the crash
    held = state_after(survived)
    with ChaosJob(tmp_path) as job:
        job.schedule(spawn=spawn_driver(CRASHING_WORKER, mode, str(append)))
        job.killed = True  # the driver kills itself: its lock is the reaper's to remove
        end = job.finish()
        LEDGER.fault(f"crash in journal append ({mode})", on_live_job=True)
        if held == "resumed":  # the terminal record was already written: the job stands, the lock goes
            assert (end["state"], end["outcomeMayBeUnknown"]) == ("resumed", False)
            result = audit(job)
            assert not result.data_lost and not result.problems, (result.data_lost, result.problems)
            LEDGER.job(result, f"crash in append {append} ({mode})")
        else:
            assert_worker_lost(job, held)
        compacts, turns = job.counts()
        # Journal first: a request is sent only after its record is durable.
        assert (compacts, turns) == (int(append > 3), int(append > 6))
        assert_a_new_job_runs_and_nothing_was_retried(job, held="")
