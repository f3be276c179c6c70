"""A thread's status: derived from its latest job's journal, and the status file that caches it.

The journal is the truth; the status file (``<thread>.json``) is rebuilt from it whenever it
is missing, stale or unreadable, unless a live worker owns the thread (its next transition
rewrites it). A job whose dead worker could not be journaled (a full disk) is reported from
what can be proven (:func:`rekall.store.reaper.unrecorded_loss`). Every write seals the file
with the stamps of the journals it was derived from, so that a reader may serve it as is
while they are unchanged (:mod:`rekall.store.views`).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from rekall.ids import thread_id as valid_thread
from rekall.states import TERMINAL_STATES
from rekall.states.status import JobStatus, read, wire
from rekall.store.errors import StatusCorrupt
from rekall.store.fsio import FileOps
from rekall.store.fsread import STATUS_LIMIT, TooLarge, read_private
from rekall.store.overdue import overdue_worker
from rekall.store.owner import Liveness
from rekall.store.paths import Layout
from rekall.store.reaper import unrecorded_loss
from rekall.store.replay import Replay, derive_status, history_before
from rekall.store.views import sealed, served_status, thread_stamps, unsealed

if TYPE_CHECKING:
    from rekall.store.jobstore import JobStore

log = logging.getLogger("rekall.store")

ENDED = frozenset(state.value for state in TERMINAL_STATES)


class StatusFile:
    """The status files of one jobs directory: a derived view, never the truth."""

    def __init__(self, layout: Layout, fs: FileOps) -> None:
        self.layout = layout
        self.fs = fs

    def read(self, thread: str) -> tuple[dict[str, Any] | None, str | None]:
        """The file's JSON object, or ``None`` and why not (``missing``, ``corrupt (…)``, …)."""
        try:
            raw = read_private(self.layout.status(thread), limit=STATUS_LIMIT)
        except FileNotFoundError:
            return None, "missing"
        except TooLarge as exc:
            return None, f"too large ({exc.strerror}; not read)"
        except OSError as exc:
            return None, f"unreadable ({exc.strerror or exc})"
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return None, f"corrupt ({exc})"
        if not isinstance(value, dict):
            return None, "corrupt (not a JSON object)"
        return unsealed(value), None

    def save(self, thread: str, status: dict[str, Any], stamps: dict[str, list[int]]) -> None:
        """Write ``status``, sealed with the ``stamps`` of the journals it was derived from (taken
        before they were read: :mod:`rekall.store.views`)."""
        value = sealed(status, stamps, ended=status["state"] in ENDED)
        data = (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        self.fs.atomic_replace(self.layout.status(thread), data)

    def save_quietly(self, thread: str, status: dict[str, Any], stamps: dict[str, list[int]]) -> None:
        """Save, logging a failure: a reader never fails on a derived view."""
        try:
            self.save(thread, status, stamps)
        except OSError as exc:
            log.warning("status file of thread %s not written (%s); the journal holds the job", thread, exc)


def status_of(store: JobStore, job: Replay) -> dict[str, Any]:
    """The derived status of ``job``, with the summaries of the thread's earlier jobs."""
    status = derive_status(job.view, job.transitions[-1], job.path, store.layout.log(job.thread_id, job.job_id),
                           history_before(job, store.catalog.earlier(job)))
    problem = store.unrecorded.get(job.job_id)
    if problem is not None and not job.state.terminal:
        status.update(unrecorded_loss(job, problem))
    return status


def current_fields(store: JobStore, job: Replay) -> dict[str, Any]:
    """The job's fields and state, as :func:`status_of` reports them, without the thread's history."""
    fields = {**job.view.fields, **wire(JobStatus(state=job.state.value))}
    problem = store.unrecorded.get(job.job_id)
    if problem is not None and not job.state.terminal:
        fields.update(unrecorded_loss(job, problem))
    return fields


def read_status(store: JobStore, thread_id: str) -> dict[str, Any]:
    """The thread's latest job, derived from its journal.

    A status file that is missing, stale or unreadable is reported under
    ``statusFileProblem`` and rewritten, unless a live worker owns the thread (its next
    transition rewrites it). Without any job: ``{threadId, status/state: not_scheduled}``.
    """
    thread = valid_thread(thread_id)
    stamps = thread_stamps(store.layout, thread)  # before reading: see rekall.store.views
    latest = store.catalog.latest(thread)
    on_disk, problem = store.status_file.read(thread)
    if latest is None:
        return _without_journal(store.layout, thread, on_disk, problem)
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
    elif latest.state.terminal and served_status(store.layout, thread) is None:
        # Right, but not sealed for these journals (an earlier rekall wrote it, or a note came
        # after the end): sealed now, so that the next read can serve it as is.
        if store.lock_liveness(thread) is not Liveness.ALIVE:
            store.status_file.save_quietly(thread, status, stamps)
    status.update(overdue_worker(store, latest))  # said now, never saved: it depends on the clock
    return status


def _without_journal(layout: Layout, thread: str, on_disk: dict[str, Any] | None,
                     problem: str | None) -> dict[str, Any]:
    if on_disk is not None:  # written by the Node version, or by hand: shown, not trusted
        found = read(on_disk)
        state = next((s for s in (found.state, found.status) if isinstance(s, str)), "unknown")
        return {**on_disk, **wire(JobStatus(threadId=thread, state=state,
                                            statusFileProblem="no journal backs this status file; shown as found"))}
    if problem is not None and problem != "missing":
        raise StatusCorrupt(f"the status file {layout.status(thread)} is {problem} and no journal "
                            "exists to rebuild it from",
                            hint="move the file aside; nothing else refers to it")
    return wire(JobStatus(threadId=thread, status="not_scheduled", state="not_scheduled"))


def _behind(on_disk: dict[str, Any] | None, status: dict[str, Any]) -> bool:
    """The file shows an earlier point of the same job's journal."""
    if on_disk is None or read(on_disk).jobId != read(status).jobId:
        return False
    seq, now = read(on_disk).journalSeq, read(status).journalSeq
    return isinstance(seq, int) and isinstance(now, int) and seq < now
