"""A worker that still exists past its deadline is said to be so: stopped, or running late."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rekall.usecases.doctor import check_workers
from rekall.states.status import ABSENT
from rekall.store import JobStore
from rekall.store.processes import process_stopped
from rekall.testing import FakeClock
from tests.chaos.harness import ChaosJob


def an_hour_from_now() -> FakeClock:
    return FakeClock(datetime.now(timezone.utc) + timedelta(hours=1))


def _wait_stopped(pid: int, timeout_s: float = 10.0) -> None:
    """A signal is delivered, not obeyed at once: wait (bounded) until the process shows it."""
    end = time.monotonic() + timeout_s
    while not process_stopped(pid):
        assert time.monotonic() < end, f"pid {pid} did not stop within {timeout_s:g} s"
        time.sleep(0.01)


def test_a_stopped_worker_past_its_deadline_shows_as_such_in_status_and_doctor(tmp_path: Path):
    with ChaosJob(tmp_path, runtime="active") as job:  # the user's turn runs on: the worker waits
        job.schedule()
        job.wait_state({"waiting_for_idle"})
        assert job.pid is not None
        os.kill(job.pid, signal.SIGSTOP)
        try:
            _wait_stopped(job.pid)
            now = JobStore.open_reader(job.env).read_status(job.thread_id)
            assert now.workerProblem is ABSENT and now.workerDeadlineAt  # before its deadline: nothing to say
            later = an_hour_from_now()
            status = JobStore.open_reader(job.env, clock=later).read_status(job.thread_id)
            assert status.state == "waiting_for_idle"
            assert status.workerProblem.startswith(f"the worker (pid {job.pid}) is stopped (SIGSTOP")
            assert f"`kill -CONT {job.pid}` lets it record timed_out" in status.workerProblem
            row = check_workers(job.store.root, job.store.lock_root, clock=later)
            assert row.level == "AMBER" and "1 worker(s) past their deadline" in row.detail
            assert f"thread {job.thread_id}, job {job.job_id}: the worker (pid {job.pid}) is stopped" in row.detail
        finally:
            os.kill(job.pid, signal.SIGCONT)
        job.cancel()
        assert job.finish()["state"] == "cancelled"
