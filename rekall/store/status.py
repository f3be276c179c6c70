"""A thread's status: derived from its latest job's journal, and the status file that caches it
(:class:`rekall.store.parts.StatusFile`).

The journal is the truth; the status file (``<thread>.json``) is rebuilt from it whenever it
is missing, stale or unreadable, unless a live worker holds the thread's lock (its next transition
rewrites it). A job whose dead worker could not be journaled (a full disk) is reported from
what can be proven (:func:`rekall.store.reaper.unrecorded_loss`). Every write seals the file
with the stamps of the journals it was derived from, so that a reader may serve it as is
while they are unchanged (:mod:`rekall.store.views`).
"""

from __future__ import annotations

import logging
from typing import Any

from rekall.kernel.ids import thread_id as valid_thread
from rekall.states.status import JobStatus, read, wire
from rekall.store.errors import StatusCorrupt
from rekall.store.overdue import overdue_worker
from rekall.store.processes import Liveness
from rekall.store.paths import JobPaths
from rekall.store.parts import StoreParts
from rekall.store.reaper import unrecorded_loss
from rekall.store.replay import Replay, derive_status, history_before
from rekall.store.views import not_scheduled, served_status, thread_stamps

log = logging.getLogger("rekall.store")


def status_of(store: StoreParts, job: Replay) -> dict[str, Any]:
    """The derived status of ``job``, with the summaries of the thread's earlier jobs."""
    status = derive_status(job.view, job.transitions[-1], job.path, store.paths.log(job.thread_id, job.job_id),
                           history_before(job, store.catalog.earlier(job)))
    problem = store.unrecorded.get(job.job_id)
    if problem is not None and not job.state.terminal:
        status.update(unrecorded_loss(job, problem))
    return status


def current_fields(store: StoreParts, job: Replay) -> dict[str, Any]:
    """The job's fields and state, as :func:`status_of` reports them, without the thread's history."""
    fields = {**job.view.fields, **wire(JobStatus(state=job.state.value))}
    problem = store.unrecorded.get(job.job_id)
    if problem is not None and not job.state.terminal:
        fields.update(unrecorded_loss(job, problem))
    return fields


def read_status(store: StoreParts, thread_id: str) -> dict[str, Any]:
    """The thread's latest job, derived from its journal.

    A status file that is missing, stale or unreadable is reported under
    ``statusFileProblem`` and rewritten, unless a live worker holds the thread's lock (its next
    transition rewrites it). Without any job: ``{threadId, status/state: not_scheduled}``.
    """
    thread = valid_thread(thread_id)
    stamps = thread_stamps(store.paths, thread)  # before reading: see rekall.store.views
    latest = store.catalog.latest(thread)
    on_disk, problem = store.status_file.read(thread)
    if latest is None:
        return _without_journal(store.paths, thread, on_disk, problem)
    status = status_of(store, latest)
    if problem is None and on_disk != status:
        if _behind(on_disk, status) and store.lock_liveness(thread) is Liveness.ALIVE:
            return status  # the worker journaled a transition and is about to rewrite the file
        problem = "stale: it differs from the journal"
    if problem is not None:
        log.warning("status file of thread %s is %s; rebuilt from the journal", thread, problem)
        if store.lock_liveness(thread) is not Liveness.ALIVE and latest.job_id not in store.unrecorded:
            store.status_file.save_quietly(thread, status, stamps)
        status.update(wire(JobStatus(statusFileProblem=f"{problem}; rebuilt from the journal")))
    elif latest.state.terminal and served_status(store.paths, thread) is None:
        # Right, but not sealed for these journals (an earlier rekall wrote it, or a note came
        # after the end): sealed now, so that the next read can serve it as is.
        if store.lock_liveness(thread) is not Liveness.ALIVE:
            store.status_file.save_quietly(thread, status, stamps)
    status.update(overdue_worker(store, latest))  # said now, never saved: it depends on the clock
    return status


def _without_journal(paths: JobPaths, thread: str, on_disk: dict[str, Any] | None,
                     problem: str | None) -> dict[str, Any]:
    if on_disk is not None:  # written by the Node version, or by hand: shown, not trusted
        found = read(on_disk)
        state = next((s for s in (found.state, found.status) if isinstance(s, str)), "unknown")
        return {**on_disk, **wire(JobStatus(threadId=thread, state=state,
                                            statusFileProblem="no journal backs this status file; shown as found"))}
    if problem is not None and problem != "missing":
        raise StatusCorrupt(f"the status file {paths.status_file(thread)} is {problem} and no journal "
                            "exists to rebuild it from",
                            hint="move the file aside; nothing else refers to it")
    return not_scheduled(thread)


def _behind(on_disk: dict[str, Any] | None, status: dict[str, Any]) -> bool:
    """The file shows an earlier point of the same job's journal."""
    if on_disk is None or read(on_disk).jobId != read(status).jobId:
        return False
    seq, now = read(on_disk).journalSeq, read(status).journalSeq
    return isinstance(seq, int) and isinstance(now, int) and seq < now
