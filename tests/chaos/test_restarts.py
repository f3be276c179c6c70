"""More than one worker for a job: two started at once, one started again after the first
died, and a new job scheduled while the lost job's compaction still runs. In each case the
owner receives at most one request of each kind, and the refusals say why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rekall.usecases.service import Refused
from tests.chaos.harness import COMPACT, ChaosJob, audit, wait_for_exit
from tests.chaos.ledger import LEDGER

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def test_two_workers_started_for_one_job_run_it_once(tmp_path: Path):
    with ChaosJob(tmp_path) as job:
        job.schedule(two_workers=True)
        assert len(job.pids) == 2
        end = job.finish()
        LEDGER.fault("two workers for one job", on_live_job=True)
        result = audit(job)
        assert end["state"] == "resumed" and job.job_counts() == (1, 1)
        assert not result.data_lost and not result.problems, (result.data_lost, result.problems)
        assert "job_already_started" in job.log_text() or "not scheduled" in job.log_text()
        LEDGER.job(result, "two workers for one job")


def test_a_worker_restarted_mid_job_refuses_and_nothing_is_sent_twice(tmp_path: Path):
    with ChaosJob(tmp_path, compaction_delay_s=60) as job:
        job.schedule()
        job.wait_state({"accepted"})
        second = job.restart_worker()
        assert wait_for_exit(second, 20)
        assert "not scheduled" in job.log_text()
        end = job.finish()
        LEDGER.fault("worker restarted", on_live_job=True)
        assert (end["state"], end["errorCode"], end["outcomeMayBeUnknown"]) == ("failed", "worker_lost", True)
        result = audit(job)
        assert job.job_counts() == (1, 0)
        assert not result.data_lost and not result.problems, (result.data_lost, result.problems)
        LEDGER.job(result, "worker restarted mid-job")


def test_scheduling_while_a_lost_workers_compaction_runs_is_refused(tmp_path: Path):
    with ChaosJob(tmp_path, compaction_delay_s=60) as job:
        job.schedule()
        job.wait_state({"accepted"})
        job.kill_worker()
        with pytest.raises(Refused) as caught:
            job.schedule()  # right after the worker was lost; its status reaps it
        assert "compaction in progress" in caught.value.message
        assert job.counts() == (1, 0)
        LEDGER.fault("schedule while a lost job compacts", on_live_job=True)
