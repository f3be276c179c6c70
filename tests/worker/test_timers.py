"""Timers that fire when due: never before, through both stages, and cancellable at either."""

from __future__ import annotations

import asyncio
import os
import selectors

import pytest

from rekall.worker import timers, reactor as worker, start as worker_start
from rekall.states import JobState

WAIT_S = 5.0  # every wait below is bounded by this


def _run(main):
    with asyncio.Runner(loop_factory=timers.event_loop) as runner:
        return runner.run(asyncio.wait_for(main(), WAIT_S))


@pytest.mark.parametrize("delay", [0.0005, timers.FINAL_APPROACH_S + 0.01])
def test_a_timer_never_runs_its_callback_before_it_is_due(delay):
    async def main():
        loop = asyncio.get_running_loop()
        ran: asyncio.Future[float] = loop.create_future()
        timer = timers.call_later(delay, lambda: ran.set_result(loop.time()))
        assert await ran >= timer.when
        return timer

    assert not _run(main).cancelled()


@pytest.mark.parametrize("stage", ["before its final approach", "in its final approach"])
def test_a_cancelled_timer_never_runs_its_callback(stage, monkeypatch):
    if stage == "in its final approach":  # cancelled once the final wait is armed
        approach = timers.Timer._approach

        def approach_then_cancel(self):
            approach(self)
            self.cancel()

        monkeypatch.setattr(timers.Timer, "_approach", approach_then_cancel)

    async def main():
        loop = asyncio.get_running_loop()
        ran = []
        timer = timers.call_later(timers.FINAL_APPROACH_S + 0.01, ran.append, "ran")
        if stage == "before its final approach":
            timer.cancel()
        later = loop.create_future()
        loop.call_at(timer.when + 0.01, later.set_result, None)
        await later
        return ran, timer

    ran, timer = _run(main)
    assert ran == [] and timer.cancelled()


@pytest.mark.skipif(os.name != "posix", reason="select is the POSIX loop's choice")
def test_the_loop_waits_in_select_whose_timeout_has_microseconds():
    loop = timers.event_loop()
    try:
        assert isinstance(loop._selector, selectors.SelectSelector)  # epoll and poll round up to whole ms
    finally:
        loop.close()


@pytest.mark.skipif(os.name != "posix", reason="select is the POSIX loop's choice")
def test_the_worker_process_runs_its_job_on_the_timers_event_loop(tmp_path, monkeypatch):
    selectors_seen = []

    async def run(self):
        selectors_seen.append(type(asyncio.get_running_loop()._selector))
        return JobState.RESUMED

    monkeypatch.setattr(worker.Worker, "run", run)
    env = {**os.environ, "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "HOME": str(tmp_path)}
    thread, job = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
    assert worker_start.run_worker(thread, job, env) == 0
    assert selectors_seen == [selectors.SelectSelector]


@pytest.mark.skipif(not os.path.exists("/proc/self/timerslack_ns"), reason="Linux's per-process timer slack")
def test_the_workers_loop_asks_the_kernel_for_a_microsecond_of_timer_slack():
    with open("/proc/self/timerslack_ns", "w") as slack:
        slack.write("50000")  # the kernel's default
    timers.event_loop().close()
    with open("/proc/self/timerslack_ns") as slack:
        assert int(slack.read()) == timers.TIMER_SLACK_NS
