"""The worker dies (SIGKILL) in every non-terminal state, and between a journal write and its
fsync. Afterwards status and explain tell the truth (``failed``/``worker_lost``, with
``outcomeMayBeUnknown`` when a request may have been sent and its effect was not seen), the
lock is recognised as dead, a new job can be scheduled, the handoff and journal are intact, and
nothing was retried.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from rekall.surfaces.explain import build_explanation
from rekall.usecases.service import Refused
from rekall.store.views import unsealed
from tests.chaos.harness import (COMPACT, START_TURN, UNKNOWN_AFTER, ChaosJob, audit, spawn_driver,
                                 spawn_placeholder, wait_for_exit)
from tests.chaos.ledger import LEDGER
from tests.chaos.rawmcp import ROOT, RawMcp

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
from rekall.worker.start import run_worker

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

#: The worker's journal appends in a clean resumed run: the job's state after each (None: a note). The
#: completion is two records: the compaction machine's handover, then the route the delivery machine chose.
APPENDS = ("waiting_for_idle", None, "requesting", "accepted", "compacted", "waiting_for_resume_idle", "resuming",
           "resumed")


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
        assert (compacts, turns) == (int(append > 3), int(append > 7))
        assert_a_new_job_runs_and_nothing_was_retried(job, held="")


# --- a crash between a request's journal record and the status file ------------------------

#: Runs the real worker, killed (SIGKILL) when it is about to write the status file showing
#: ``sys.argv[3]``: the request's journal record is durable, the status file is the one before.
KILLED_AT_STATUS_WRITE = r"""
import os, signal, sys
from rekall.store.parts import StatusFile
from rekall.worker.start import run_worker

thread, job, state = sys.argv[1], sys.argv[2], sys.argv[3]
plain_save = StatusFile.save

def save(self, thread_id, status, stamps):
    if status["state"] == state:
        os.kill(os.getpid(), signal.SIGKILL)
    plain_save(self, thread_id, status, stamps)

StatusFile.save = save
sys.exit(run_worker(thread, job))
"""


def last_transition(job: ChaosJob) -> tuple[str, int]:
    """The job's state and the sequence number of the journal's last transition (read without reaping)."""
    replay = job.store.load(job.thread_id, job.job_id)
    return replay.state.value, replay.transitions[-1].seq


@pytest.mark.parametrize(("held", "before", "sent"), [("requesting", "waiting_for_idle", (1, 0)),
                                                      ("resuming", "waiting_for_resume_idle", (1, 1))])
def test_a_worker_killed_between_a_request_and_its_status_file_leaves_the_journal_as_the_truth(
        tmp_path: Path, held: str, before: str, sent: tuple[int, int]):
    with ChaosJob(tmp_path) as job:
        job.schedule(spawn=spawn_driver(KILLED_AT_STATUS_WRITE, held))
        job.killed = True  # the driver kills itself: its lock is the reaper's to remove
        assert wait_for_exit(job.pid, 30)
        LEDGER.fault("worker SIGKILL before a status write", on_live_job=True)
        # The request left right after its journal record, before the status file was written.
        assert job.counts() == sent
        state, seq = last_transition(job)
        on_disk = unsealed(json.loads(job.store.status_path(job.thread_id).read_text()))
        assert state == held and (on_disk["state"], on_disk["jobId"]) == (before, job.job_id)
        assert on_disk["journalSeq"] < seq  # the file is behind its journal
        # Every reader reports the journal (the request sent, its effect unobserved), not the file.
        cli = subprocess.run([sys.executable, "-m", "rekall", "status", job.thread_id, "--json"], env=job.env,
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        status = json.loads(cli.stdout)
        assert (status["state"], status["errorCode"], status["outcomeMayBeUnknown"]) == ("failed", "worker_lost", True)
        assert held in status["error"] and "statusFileProblem" not in status
        server = RawMcp(job.env)
        try:
            reply = server.call_tool("compaction_status", {"threadId": job.thread_id})["result"]
        finally:
            assert server.close() == 0
        tool = reply["structuredContent"]
        assert (tool["state"], tool["errorCode"], tool["outcomeMayBeUnknown"]) == ("failed", "worker_lost", True)
        assert unsealed(json.loads(job.store.status_path(job.thread_id).read_text())) == job.status()
        assert_worker_lost(job, held)  # explain, the audit
        # Nothing is sent again, and the next job runs.
        assert job.counts() == sent
        assert_a_new_job_runs_and_nothing_was_retried(job, held="")
