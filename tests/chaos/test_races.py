"""Races: many schedules for one thread, many threads at once, and a cancel racing each transition."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pytest

from rekall.usecases import service
from tests.chaos.harness import COMPACT, START_TURN, UNKNOWN_AFTER, ChaosJob, audit
from tests.chaos.ledger import LEDGER
from tests.mcpkit import HANDOFF

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

RACERS = 20
ROOT = Path(__file__).resolve().parents[2]

SCHEDULE_BY_CLI = r"""
import sys
from rekall.surfaces.cli import main
print("ready", flush=True)
sys.stdin.readline()  # everyone starts together
sys.exit(main(["schedule", sys.argv[1], "--handoff", sys.argv[2], "--json"]))
"""


def schedule_in_threads(job: ChaosJob, tmp_path: Path) -> list[dict[str, Any]]:
    barrier = threading.Barrier(RACERS)

    def one(_: int) -> dict[str, Any]:
        barrier.wait(timeout=30)
        return asyncio.run(service.schedule(job.thread_id, HANDOFF, env=job.env))

    with ThreadPoolExecutor(max_workers=RACERS) as pool:
        return list(pool.map(one, range(RACERS)))


def schedule_in_processes(job: ChaosJob, tmp_path: Path) -> list[dict[str, Any]]:
    handoff = tmp_path / "handoff.json"
    handoff.write_text(json.dumps(HANDOFF), encoding="utf-8")
    children = [subprocess.Popen([sys.executable, "-c", SCHEDULE_BY_CLI, job.thread_id, str(handoff)], env=job.env,
                                 cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for _ in range(RACERS)]
    watchdog = threading.Timer(120, lambda: [c.kill() for c in children])  # bounds every read below
    watchdog.start()
    try:
        assert [c.stdout.readline().strip() for c in children] == ["ready"] * RACERS
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate()[0] for child in children]
    finally:
        watchdog.cancel()
    assert [c.returncode for c in children] == [0] * RACERS, outputs
    return [json.loads(out) for out in outputs]


@pytest.mark.parametrize("racers", [schedule_in_threads, schedule_in_processes], ids=["threads", "processes"])
def test_twenty_concurrent_schedules_for_one_thread_make_exactly_one_job(tmp_path: Path, racers: Callable):
    with ChaosJob(tmp_path, runtime="active") as job:
        baseline = job.owner_baseline()
        results = racers(job, tmp_path)
        LEDGER.fault("concurrent schedule", RACERS)
        fresh = [r for r in results if r["alreadyScheduled"] is False]
        assert len(fresh) == 1
        assert {r["jobId"] for r in results} == {fresh[0]["jobId"]}
        assert sum(r["alreadyScheduled"] is True for r in results) == RACERS - 1
        assert len(list(job.jobs_dir.glob(f"{job.thread_id}.*.journal.jsonl"))) == 1
        job.track(fresh[0], HANDOFF, baseline)
        job.sim.complete_turn("completed")
        assert job.finish()["state"] == "resumed"
        result = audit(job)
        assert (result.compact_requests, result.start_turn_requests) == (1, 1)
        assert not result.data_lost and not result.problems, (result.data_lost, result.problems)
        LEDGER.job(result, "concurrent schedules")


def test_twenty_threads_scheduled_at_once_all_reach_a_terminal_state(tmp_path: Path):
    # One jobs directory for all of them: every schedule and every worker contends for its guard.
    jobs = [ChaosJob(tmp_path, env={"REKALL_DEADLINE_S": "60"}) for _ in range(RACERS)]
    try:
        barrier = threading.Barrier(RACERS)

        def run(job: ChaosJob) -> Any:
            barrier.wait(timeout=30)
            job.schedule()
            job.finish(timeout=90)
            return audit(job)

        with ThreadPoolExecutor(max_workers=RACERS) as pool:
            results = list(pool.map(run, jobs))
    finally:
        for job in jobs:
            job.close()
    LEDGER.fault("threads scheduled at once", RACERS)
    for result in results:
        LEDGER.job(result, "parallel threads")
    assert [r.state for r in results] == ["resumed"] * RACERS
    assert [(r.compact_requests, r.start_turn_requests) for r in results] == [(1, 1)] * RACERS
    assert not [p for r in results for p in (*r.data_lost, *r.problems)]


# --- a cancel racing each transition ---------------------------------------------------------

def _after_schedule(job: ChaosJob, follows: int) -> None:
    return None


def _when_idle(job: ChaosJob, follows: int) -> None:
    job.wait_followed(follows)
    job.sim.complete_turn("completed")


def _when_sent(method: str) -> Callable[[ChaosJob, int], None]:
    return lambda job, follows: job.wait_sent(method)


@attrs.frozen
class Race:
    """A cancel ``delays`` seconds after ``anchor`` (the moment the clock starts), for each delay."""

    delays: tuple[float, ...]
    anchor: Callable[[ChaosJob, int], None]
    sim: dict[str, Any] = attrs.field(factory=dict)
    arm: Callable[[ChaosJob], None] = lambda job: None


#: The delays straddle the moment each transition is expected: the worker starts within a few
#: hundred ms, the debounce is 60 ms, the compaction takes 100 ms, and the owner acknowledges a
#: compact request 50 ms after it arrives and a start-turn request 50 ms after it started the turn.
RACES = {
    "worker_started": Race((0.0, 0.2, 0.35, 0.5), _after_schedule),
    "idle_stable": Race((0.03, 0.055, 0.065, 0.09), _when_idle, {"runtime": "active"}),
    "compaction_accepted": Race((0.03, 0.045, 0.055, 0.07), _when_sent(COMPACT),
                                {"compaction_delay_s": 0.1, "compact_ack_delay_s": 0.05}),
    "compaction_completed": Race((0.08, 0.095, 0.105, 0.12), _when_sent(COMPACT), {"compaction_delay_s": 0.1}),
    "idle_stable_to_resume": Race((0.13, 0.155, 0.165, 0.19), _when_sent(COMPACT), {"compaction_delay_s": 0.1}),
    "handoff_delivered": Race((0.03, 0.045, 0.055, 0.07), _when_sent(START_TURN),
                         arm=lambda job: job.sim.delay_next(START_TURN, 0.05)),
}


def race_cancel(workdir: Path, transition: str, delay: float) -> tuple[str, list[str]]:
    """One job with a cancel ``delay`` s after the anchor; returns how it ended and what is wrong."""
    race = RACES[transition]
    with ChaosJob(workdir, **race.sim) as job:
        race.arm(job)
        follows = job.sim.follow_count
        job.schedule()
        race.anchor(job, follows)
        time.sleep(delay)  # the race itself: cancel at this moment, whatever the worker is doing
        answer = job.cancel()
        job.finish()
        result = audit(job)
        LEDGER.job(result, f"cancel racing {transition}")
        wrong = [*result.data_lost, *result.problems]
        compacts, turns = job.job_counts()
        if result.state == "cancelled":
            source = result.path[-2]
            if job.status().get("reason") != "explicit_cancellation":
                wrong.append(f"cancelled for {job.status().get('reason')}")
            # Resuming, a worker that found the cancel's delivery claim sent nothing: the outcome is known then.
            unknown = bool(turns) if source == "resuming" else source in UNKNOWN_AFTER
            if result.outcome_may_be_unknown is not unknown:
                wrong.append(f"cancelled in {source} with outcomeMayBeUnknown {result.outcome_may_be_unknown}")
            if source in ("scheduled", "waiting_for_idle") and compacts:
                wrong.append(f"a compact request after the cancel in {source}")
            if source != "resuming" and turns:
                wrong.append(f"a start-turn request after the cancel in {source}")
            return f"cancelled in {source}", wrong
        if answer["cancellationRequested"] and answer["state"] in ("resumed", "completed", "skipped"):
            wrong.append(f"cancel accepted for a job already {answer['state']}")
        return f"finished first ({result.state})", wrong


@pytest.mark.parametrize("transition", list(RACES))
def test_a_cancel_racing_a_transition_lands_cleanly_before_or_after_it(tmp_path: Path, transition: str):
    delays = RACES[transition].delays
    with ThreadPoolExecutor(max_workers=len(delays)) as pool:
        outcomes = list(pool.map(lambda pair: race_cancel(tmp_path / f"run{pair[0]}", transition, pair[1]),
                                 enumerate(delays)))
    LEDGER.fault(f"cancel racing {transition}", len(delays))
    wrong = [f"delay {delay}: {how}: {problem}" for delay, (how, problems) in zip(delays, outcomes)
             for problem in problems]
    assert not wrong, "\n".join(wrong)
