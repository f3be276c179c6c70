"""The worker process's start (``rekall.worker.start``): the first follow on a blocking socket
before the event loop, and what happens to it, run in-process against the simulated owner on
its own thread over a real Unix socket."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rekall.usecases import service
from rekall.worker import start as worker_start
from rekall.adapters.resume import ResumeToken
from rekall.sim import start_sim_in_thread
from rekall.sim.threaded import SimHandle
from rekall.store import JobStore


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    with start_sim_in_thread(compaction_delay_s=0.01) as handle:
        yield handle


def schedule_telling(sim: SimHandle, jobs_dir: Path) -> tuple[dict[str, str], str, ResumeToken]:
    """Schedule a compaction (no resume), keeping the SCHEDULED argument schedule gives the worker."""
    told: list[ResumeToken] = []

    def spawn(thread_id: str, job_id: str, *, scheduled: ResumeToken, **_: Any) -> int:
        told.append(scheduled)
        return os.getpid()

    env = {**os.environ, **sim.env, "REKALL_JOBS_DIR": str(jobs_dir), "REKALL_IDLE_STABLE_MS": "50"}
    job = asyncio.run(service.schedule(sim.thread_id, None, env=env, spawn=spawn))["jobId"]
    return env, job, told[0]


def test_a_first_follow_that_fails_fails_the_job_with_its_error_once_claimed_and_is_not_tried_again(sim, jobs_dir):
    env, job, told = schedule_telling(sim, jobs_dir)
    asked = len(sim.call(lambda owner: owner.routed_for("initialize")))
    sim.call(lambda owner: owner.fail_next("initialize", "request-version-mismatch"))
    assert worker_start.run_worker(sim.thread_id, job, env, scheduled=ResumeToken.from_argument(told.to_argument())) == 1
    assert len(sim.call(lambda owner: owner.routed_for("initialize"))) == asked + 1  # one attempt, no other
    replay = JobStore.open_reader(env).load(sim.thread_id, job)
    assert [t.trigger for t in replay.transitions][:2] == ["schedule", "worker_started"]  # claimed first
    assert replay.state.value == "failed" and replay.view.status.errorCode == "version_mismatch"
    assert "request-version-mismatch" in replay.view.status.error
    assert sim.followers == 0 and sim.compact_requests == []


def test_a_first_follow_on_a_command_line_the_journal_contradicts_is_closed_and_the_journal_followed(sim, jobs_dir):
    env, job, told = schedule_telling(sim, jobs_dir)
    follows = sim.follow_count
    hearsay = told._replace(settled={**told.settled, "how": "not what the journal says"})
    assert worker_start.run_worker(sim.thread_id, job, env, scheduled=hearsay) == 0
    # Followed early on the command line's word, closed once the claim read the journal, followed again.
    assert sim.follow_count == follows + 2
    sim.wait_until(lambda owner: owner.followers == 0)
    assert len(sim.compact_requests) == 1
    log = JobStore.open_reader(env).log_path(sim.thread_id, job).read_text()
    assert "its journal says" in log
