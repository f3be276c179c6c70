"""The ``worker_lost`` rule: a job whose worker is provably gone is recorded as failed.

If the holder of a thread's lock is provably dead (same host; PID gone or reused), its job
becomes ``failed`` with ``errorCode`` ``worker_lost`` (its ``outcomeMayBeUnknown`` per the
outcome rule) and the lock is removed. If liveness cannot be proven either way (another
host, a lock without a PID), nothing is done: a lock is never removed on a guess.

Readers (status, history, explain) record a provably dead worker first, so every reader tells
the truth; when even that record cannot be written (a full disk), the job is remembered in
the store's ``unrecorded`` and reported from what can be proven, without crashing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rekall.kernel.errors import StoreError
from rekall.kernel.ids import thread_id as valid_thread
from rekall.states import JobState
from rekall.states.rules import outcome_may_be_unknown
from rekall.states.status import JobStatus, known, wire
from rekall.store.errors import LockBusy
from rekall.store.locks import job_liveness
from rekall.store.processes import Liveness, LockHolder
from rekall.store.replay import Replay

if TYPE_CHECKING:
    from rekall.store.parts import StoreParts

log = logging.getLogger("rekall.store")


@attrs.frozen(kw_only=True)
class Reaped:
    """What the ``worker_lost`` rule did for one thread's lock or job."""

    job_id: str
    #: The job was journaled as ``worker_lost`` now.
    reaped: bool
    #: The dead worker's lock was removed.
    lock_removed: bool
    #: The job's state afterwards (``None``: its journal could not be read).
    state: str | None
    #: Why the journal could not take the ``worker_lost`` record (the job is then reported from
    #: what can be proven), else ``None``.
    journal_unwritable: str | None = None


def reap_if_dead(store: StoreParts, thread_id: str) -> Reaped | None:
    """Apply the ``worker_lost`` rule to the thread if its job's process is provably gone.

    Returns what was done or ``None``
    when there was nothing to do. A lock whose holder cannot be judged is left alone. Never
    raises for a write that fails: the job is then reported from what can be proven
    (see :func:`unrecorded_loss`).
    """
    thread = valid_thread(thread_id)
    if not _may_need_reaping(store, thread):
        return None  # the common case takes no guard, so a reader creates nothing
    with store.locks.guarded():
        try:
            found = store.locks.find(thread)
        except LockBusy as exc:
            log.warning("cannot judge the lock of thread %s: %s", thread, exc.message)
            return None
        if found is not None:
            return reap_lock_if_dead(store, thread, *found)
        return _reap_orphan_if_dead(store, thread)


def reap_all(store: StoreParts) -> list[Reaped]:
    """``reap_if_dead`` for every thread that has a job here."""
    threads: dict[str, list[str]] = {}
    for thread, job in store.paths.journals():  # listed once, not once per thread
        threads.setdefault(thread, []).append(job)
    done = []
    for thread in sorted(threads):
        try:
            result = reap_if_dead(store, thread) if _may_need_reaping(store, thread, threads[thread]) else None
        except StoreError as exc:  # one unreadable journal must not hide the others
            log.warning("cannot judge thread %s: %s", thread, exc.message)
            continue
        if result is not None:
            done.append(result)
    return done


def _may_need_reaping(store: StoreParts, thread: str, listed: list[str] | None = None) -> bool:
    if store.locks.exists(thread):
        return True
    try:
        latest = store.catalog.latest(thread, listed)
    except StoreError:
        return False  # an unreadable journal proves nothing; readers report it
    return latest is not None and not latest.state.terminal and latest.job_id not in store.unrecorded


def reap_lock_if_dead(store: StoreParts, thread: str, path: Path, holder: LockHolder) -> Reaped | None:
    """Record the lock's job as ``worker_lost`` and remove the lock, if its processes are provably gone
    (call under the guard)."""
    home, job = store.lock_job(thread, holder)
    if job_liveness(holder, job, host=store.host) is not Liveness.DEAD:
        return None
    reaped = job is not None and not job.state.terminal
    if reaped:
        assert job is not None and home is not None
        job = mark_worker_lost(home, job)
        store.unrecorded.update(home.unrecorded)
    if job is not None and job.job_id in store.unrecorded:
        return Reaped(job_id=holder.job_id, reaped=False, lock_removed=False, state=job.state.value,
                      journal_unwritable=store.unrecorded[job.job_id])
    store.locks.remove(path)
    log.warning("removed the stale lock of thread %s (job %s, pid %s)", thread, holder.job_id, holder.pid)
    return Reaped(job_id=holder.job_id, reaped=reaped, lock_removed=True,
                  state=None if job is None else job.state.value)


def _reap_orphan_if_dead(store: StoreParts, thread: str) -> Reaped | None:
    """A job that is not over but has no lock: reap it if its worker is gone."""
    latest = store.catalog.latest(thread)
    if latest is None or latest.state.terminal or job_liveness(None, latest, host=store.host) is not Liveness.DEAD:
        return None
    # A worker releases its lock last, once its end is journaled, or when the journal refused that
    # record: a job that is not over and whose lock is gone is the second case (a full disk).
    job = mark_worker_lost(store, latest, unjournaled_end(latest.state.value, "its worker released the lock "
                                                                           "without journaling how the job ended",
                                                          _owner(latest)))
    return Reaped(job_id=job.job_id, reaped=job.job_id not in store.unrecorded, lock_removed=False,
                  state=job.state.value)


def mark_worker_lost(store: StoreParts, job: Replay, error: str | None = None) -> Replay:
    """Journal ``fail`` (``worker_lost``), saying what the dead worker had already done (``error``
    when more precise words are known: they are kept, never replaced by vaguer ones).

    When the journal cannot be written (a full disk), nothing changes on disk, the job is
    remembered in ``store.unrecorded`` and returned as it was: readers report it without crashing.
    """
    before = job.state
    try:
        with store.open_lifecycle(job.thread_id, job.job_id) as lifecycle:
            lifecycle.fire("fail", errorCode="worker_lost", error=error or _lost_words(before, _owner(job)),
                           delivery="unknown")
    except (OSError, StoreError) as exc:
        problem = exc.message if isinstance(exc, StoreError) else f"{exc.strerror or exc}"
        log.error("job %s: its worker is gone, and this could not be journaled: %s", job.job_id, problem)
        store.unrecorded[job.job_id] = problem
        return job
    return store.catalog.load(job.thread_id, job.job_id)


def unjournaled_end(state: str, problem: str, owner: str) -> str:
    """The words for a worker gone while the journal could not take a record after ``state``
    (``owner``: the thread's owner in its platform's words)."""
    may_have = {"requesting": f"the compaction request may have reached {owner}",
                "accepted": "the compaction may still complete",
                "resuming": "a continuation may have started",
                "injecting": "the handoff may have been injected"}.get(state, "nothing was sent after it")
    return f"the worker process is gone and the journal could not be written after `{state}` ({problem}); {may_have}"


def unrecorded_loss(job: Replay, problem: str) -> dict[str, Any]:
    """What can be proven of a job whose worker is gone when the journal cannot take the record:
    it failed (``worker_lost``), and the outcome rule of its last journaled state."""
    state = job.state.value
    return wire(JobStatus(
        status="failed", state="failed", errorCode="worker_lost",
        error=unjournaled_end(state, problem, _owner(job)),
        outcomeMayBeUnknown=outcome_may_be_unknown(job.state, {"delivery": "unknown"}),
        lastJournaledState=state, journalUnwritable=problem))


def _owner(job: Replay) -> str:
    from rekall.adapters.registry import owner_words

    return owner_words(known(job.view.status.platform))


def _lost_words(state: JobState, owner: str) -> str:
    """What a dead worker had done, in the words its ``worker_lost`` record keeps."""
    done = {
        JobState.ACCEPTED: f", after {owner} accepted the compaction request; the compaction may still "
                           "complete",
        JobState.COMPACTED: ", after the compaction completed: the thread was compacted, and no route was chosen "
                            "for the handoff",
        JobState.WAITING_FOR_RESUME_IDLE: ", after the compaction completed: the thread was compacted, and the "
                                          "continuation did not run",
        JobState.RESUMING: ", after the compaction completed: the thread was compacted, and a continuation may "
                           "have started",
        JobState.INJECTING: ", after the compaction completed: the thread was compacted, and the handoff may "
                            "have been injected into its context",
    }.get(state, "")
    return f"the worker process ended while the job was {state.value}{done}; nothing is retried automatically"
