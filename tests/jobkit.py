"""Shared helpers for tests that need real jobs on disk: a store, a handoff, scripted runs.

Each scripted run is the sequence of triggers and evidence a worker would fire for one
outcome, so explain, history and the CLI are tested on journals written by the real store.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Any

from rekall.states import DeliveryState, JobState, JobView
from rekall.kernel.jobstate import CONTINUATION, INJECTION
from rekall.store import CreatedJob, JobStore, Lifecycle, process_start_time
from rekall.testing import FakeClock

FINGERPRINT = "fp-1"


def handoff(resume: bool = True, **changes: Any) -> dict[str, Any]:
    value = {"summary": "Refactored the parser; tests pass.", "preserve": ["parser.py owns tokenising"],
             "discard": ["old stack traces"], "nextStep": "Wire the parser into the CLI." if resume else "",
             "resume": resume}
    return {**value, **changes}


def new_thread() -> str:
    return str(uuid.uuid4())


def open_store(root: Path, clock: FakeClock | None = None) -> JobStore:
    return JobStore.open({"REKALL_JOBS_DIR": str(root)}, clock=clock or FakeClock())


def schedule(store: JobStore, thread: str, *, resume: bool = True, with_handoff: bool = True) -> CreatedJob:
    return store.create_job(thread, handoff=handoff(resume) if with_handoff else None, user_fingerprint=FINGERPRINT)


def me(job_id: str) -> dict[str, Any]:
    """worker_started evidence naming this (live) process."""
    return {"jobId": job_id, "pid": os.getpid(), "host": socket.gethostname(),
            "processStartTime": process_start_time(os.getpid())}


def idle(tokens: int | None, window: int | None = 100_000, **more: Any) -> dict[str, Any]:
    return {"idleMs": 750, "tokens": tokens, "window": window, "revision": 7, "boundaryFingerprint": FINGERPRINT,
            **more}


def completed(tokens: int | None, window: int | None = 100_000, **more: Any) -> dict[str, Any]:
    return {"compactionId": "cmp-2", "tokens": tokens, "window": window, "revision": 9, **more}


def script(job_id: str, outcome: str) -> list[tuple[str, dict[str, Any]]]:
    """The triggers a worker fires for ``outcome`` (a job scheduled with resume as the outcome needs)."""
    start = [("worker_started", me(job_id)), ("idle_stable", idle(90_000)),
             ("compaction_accepted", {"ownerId": "owner-1"})]
    scripts = {
        "completed": start + [("compaction_completed", completed(30_000))],
        "skipped": start + [("compaction_completed", completed(61_000))],
        "completed_user_moved_on": start + [("compaction_completed",
                                             completed(30_000, userMovedOn="new_user_input"))],
        "skipped_at_resume": start + [("compaction_completed", completed(30_000)),
                                      ("idle_stable", idle(70_000, handoffVerified=True))],
        "resumed": start + [("compaction_completed", completed(30_000)),
                            ("idle_stable", idle(31_000, handoffVerified=True)),
                            ("handoff_delivered", {"turnId": "turn-9", "turnStatus": "inProgress"})],
        "cancelled": start[:2] + [("cancel", {"reason": "new_user_input", "delivery": "unknown"})],
        "explicitly_cancelled": start[:2] + [("cancel", {"reason": "explicit_cancellation", "delivery": "unknown"})],
        "failed": start + [("fail", {"errorCode": "owner_gone", "error": "the owner window closed"})],
        "timed_out": start[:1] + [("deadline", {"deadlineS": 900})],
    }
    return scripts[outcome]


def run(store: JobStore, clock: FakeClock, thread: str, job_id: str, outcome: str, step_ms: int = 500) -> JobState:
    """Fire the scripted triggers for ``outcome``, advancing the clock between them."""
    with store.open_lifecycle(thread, job_id) as lifecycle:
        return run_lifecycle(lifecycle, clock, script(job_id, outcome), step_ms)


def run_lifecycle(lifecycle: Lifecycle, clock: FakeClock, steps: list[tuple[str, dict[str, Any]]],
                  step_ms: int = 500) -> JobState:
    state = lifecycle.state
    for trigger, evidence in steps:
        clock.advance(step_ms)
        state = lifecycle.fire(trigger, **evidence)
    return state


RESUME_NEEDED = {"completed": False}


def scheduled_run(store: JobStore, clock: FakeClock, thread: str, outcome: str) -> str:
    """Schedule a job for ``thread``, run it to ``outcome``, release its lock; returns the job id."""
    created = schedule(store, thread, resume=RESUME_NEEDED.get(outcome, True))
    run(store, clock, thread, created.job_id, outcome)
    store.release_lock(thread, created.job_id)
    return created.job_id


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file's bytes (the guard file aside), to prove an operation changed nothing on disk."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file() and p.name != ".guard"}


def dead_process() -> tuple[int, str | None]:
    """The pid and start-time token of a process that has exited."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = process_start_time(child.pid)
    child.communicate(b"", timeout=30)
    return child.pid, started


def dead_pid() -> int:
    """The pid of a process that has exited."""
    return dead_process()[0]


#: The triggers that bring a resuming job to each state it can be in while its worker runs.
_UP_TO = ["worker_started", "idle_stable", "compaction_accepted", "compaction_completed", "idle_stable"]
_STATE_AFTER = {"waiting_for_idle": 1, "requesting": 2, "accepted": 3, "waiting_for_resume_idle": 4, "resuming": 5}


def job_with_dead_worker(store: JobStore, clock: FakeClock, thread: str, state: str) -> str:
    """A resuming job brought to ``state`` by a worker that has since died (its lock names it)."""
    created = schedule(store, thread, resume=True)
    job = created.job_id
    pid, started = dead_process()
    dead = {"jobId": job, "pid": pid, "host": socket.gethostname(), "processStartTime": started}
    steps = script(job, "resumed")[: _STATE_AFTER[state]]
    steps[0] = ("worker_started", dead)
    with store.open_lifecycle(thread, job) as lifecycle:
        assert run_lifecycle(lifecycle, clock, steps).value == state
    store.set_lock_holder(thread, job, pid, started)
    return job


#: Where each of the job's states is in the two machines (compaction, delivery, route): what a view in that
#: state holds (an injection not sent yet).
MACHINE_STATES = {
    JobState.WAITING_FOR_RESUME_IDLE: (JobState.COMPACTED, DeliveryState.WAITING, CONTINUATION),
    JobState.RESUMING: (JobState.COMPACTED, DeliveryState.SENDING, CONTINUATION),
    JobState.INJECTING: (JobState.COMPACTED, DeliveryState.WAITING, INJECTION),
    JobState.RESUMED: (JobState.COMPACTED, DeliveryState.DELIVERED, CONTINUATION),
    JobState.COMPLETED: (JobState.COMPACTED, DeliveryState.SETTLED, None),
    JobState.SKIPPED: (JobState.COMPACTED, DeliveryState.SETTLED, CONTINUATION),
}


def view_in(job_id: str, state: JobState, fields: dict[str, Any], entered: dict[JobState, int] | None = None,
            *, sent: bool = False) -> JobView:
    """A job's view in ``state`` (with ``sent``: an injection sent, its answer awaited)."""
    compaction, delivery, route = MACHINE_STATES.get(state, (state, DeliveryState.PENDING, None))
    if sent:
        delivery = DeliveryState.SENDING
    if state is JobState.SKIPPED:
        fields = {"resumeSkipped": "insufficient_headroom", **fields}
    view = JobView(job_id, "t", compaction, fields, entered or {}, delivery, route)
    assert view.state is state
    return view
