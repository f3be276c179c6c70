"""Scheduling a job: one protocol, always under the store's guard (see ``rekall.store.locks``).

1. Read the thread's lock. If its job is still run by a live process, the thread is already
   scheduled: return that job. If the holder is provably dead, the ``worker_lost`` rule
   (``rekall.store.reaper``) records its job and removes the lock. If liveness cannot be
   proven either way (another host, a lock without a PID), refuse: a lock is never removed
   on a guess.
2. Create the lock (complete, exclusively), the handoff record (exclusively), then the
   journal's first record. If any of these fails, everything created so far is removed,
   so there is never a lock without a job.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rekall.kernel.errors import InvalidInput, StoreError
from rekall.kernel.ids import job_id as valid_job, thread_id as valid_thread
from rekall.states import SCHEDULE, JobState
from rekall.states.status import ANCHORS, RESERVED, JobStatus, read, wire
from rekall.store.errors import LockBusy
from rekall.store.handoff import record_bytes, sha256_hex, validate_handoff
from rekall.store.locks import job_liveness
from rekall.store.node_version import refuse_if_node_job_runs
from rekall.store.processes import Liveness, LockHolder, process_start_time
from rekall.store.reaper import mark_worker_lost, reap_lock_if_dead
from rekall.store.replay import Replay
from rekall.store.status import status_of
from rekall.store.views import thread_stamps
from rekall.store.wire import TransitionRecord, encode_record

if TYPE_CHECKING:
    from rekall.store.parts import StoreParts

@attrs.frozen
class CreatedJob:
    job_id: str
    status: JobStatus
    #: True when a live job already held the thread: ``job_id`` and ``status`` are that job's.
    already_scheduled: bool


def _checked_extra(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    if extra is None:
        return {}
    clash = sorted(set(extra) & RESERVED)
    if clash:
        raise InvalidInput(f"extra status field {clash[0]} is reserved by the store", field=clash[0],
                           hint="rename the field")
    other = sorted(set(extra) - ANCHORS)
    if other:
        raise InvalidInput(f"extra status field {other[0]} is not one a scheduler sets; allowed: "
                           f"{', '.join(sorted(ANCHORS))}", field=other[0],
                           hint="pass only what the thread showed when it was scheduled")
    try:
        fields: dict[str, Any] = json.loads(json.dumps(dict(extra), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"extra status fields must be JSON: {exc}", field="extra", hint="fix the caller") from exc
    return fields


def create_job(store: StoreParts, thread_id: str, *, handoff: Mapping[str, Any] | None,
               user_fingerprint: str | None, extra: Mapping[str, Any] | None = None) -> CreatedJob:
    """Schedule a job for the thread, or return the live job that already holds it."""
    thread = valid_thread(thread_id)
    clean = None if handoff is None else validate_handoff(handoff)
    if user_fingerprint is not None and not isinstance(user_fingerprint, str):
        raise InvalidInput("user_fingerprint must be a string or None", field="userFingerprint",
                           hint="fix the caller")
    fields = _checked_extra(extra)
    with store.locks.guarded():
        found = store.locks.find(thread)
        if found is not None:
            existing = _settle_lock(store, thread, *found)
            if existing is not None:
                return existing
        refuse_if_node_job_runs(store.node_dirs, thread)
        latest = store.catalog.latest(thread)
        if latest is not None and not latest.state.terminal:
            _settle_orphan(store, latest)
        return _create(store, thread, str(uuid.uuid4()), clean, user_fingerprint, fields)


def _settle_lock(store: StoreParts, thread: str, path: Path, holder: LockHolder) -> CreatedJob | None:
    home, job = store.lock_job(thread, holder)
    alive = job_liveness(holder, job, host=store.host)
    if alive is Liveness.DEAD:
        reaped = reap_lock_if_dead(store, thread, path, holder)
        if reaped is not None and reaped.journal_unwritable is not None:
            raise StoreError(f"the worker of job {holder.job_id} is gone, but its journal cannot be written "
                             f"({reaped.journal_unwritable}); nothing was scheduled",
                             code="journal_unusable", hint="free disk space, then schedule again")
        return None
    where = f"job {holder.job_id} (pid {holder.pid} on {holder.host or 'an unknown host'})"
    if alive is Liveness.UNKNOWN:
        raise LockBusy(f"thread {thread} is locked by {where}, and whether that process still runs cannot "
                       "be told from here", hint=f"if no rekall worker runs for this thread, inspect "
                       f"`rekall explain {holder.job_id}` and move {path} aside; rekall "
                       "never removes a lock it cannot prove stale")
    if job is not None and not job.state.terminal:
        assert home is not None
        status = status_of(home, job)
        if home is not store:  # scheduled through another CODEX_HOME: still this thread's one job
            status.update(wire(JobStatus(jobsDir=str(home.root))))
        return CreatedJob(job.job_id, read(status), already_scheduled=True)
    state = "has no journal" if job is None else f"already ended ({job.state.value})"
    raise LockBusy(f"thread {thread} is locked by {where}, which {state} while its process still runs",
                   hint="its worker is finishing; schedule again in a moment")


def _settle_orphan(store: StoreParts, job: Replay) -> None:
    if job_liveness(None, job, host=store.host) is not Liveness.DEAD:
        raise LockBusy(f"job {job.job_id} is {job.state.value} without its lock and its worker may still run",
                       hint=f"inspect `rekall explain {job.job_id}`; schedule again once it has ended")
    mark_worker_lost(store, job)
    if job.job_id in store.unrecorded:
        raise StoreError(f"the worker of job {job.job_id} is gone, but its journal cannot be written "
                         f"({store.unrecorded[job.job_id]}); nothing was scheduled",
                         code="journal_unusable", hint="free disk space, then schedule again")


def _create(store: StoreParts, thread: str, job: str, handoff: dict[str, Any] | None,
            fingerprint: str | None, extra: dict[str, Any]) -> CreatedJob:
    now = store.clock.now()
    pid = os.getpid()
    me = LockHolder(job_id=job, thread_id=thread, pid=pid, process_start_time=process_start_time(pid),
                   host=store.host, created_at=now.iso, jobs_dir=str(store.root))
    journal, handoff_path = store.paths.journal(thread, job), store.paths.handoff(thread, job)
    fields = wire(JobStatus(jobId=job, threadId=thread, createdAt=now.iso,
                            jobNumber=store.catalog.next_job_number(thread), userFingerprint=fingerprint,
                            resume=bool(handoff and handoff["resume"]), errorCode=None, outcomeMayBeUnknown=False))
    lock = store.locks.take(me)
    try:
        if handoff is not None:
            data = record_bytes(thread, job, handoff)
            store.fs.create_exclusive(handoff_path, data)
            fields.update(wire(JobStatus(handoffPath=str(handoff_path), handoffSha256=sha256_hex(data))))
        fields.update(extra)
        first = TransitionRecord(seq=0, at=now.iso, mono_ms=now.mono_ms, trigger=SCHEDULE, source=None,
                                 dest=JobState.SCHEDULED, fields=fields,
                                 evidence={"pid": me.pid, "host": me.host,
                                           "processStartTime": me.process_start_time})
        store.fs.create_exclusive(journal, encode_record(first))
    except BaseException as exc:
        # Never a lock without a job. On a read-only filesystem even removing a file that was
        # never created fails (EROFS): that must not keep the lock, which lives elsewhere.
        for path in (journal, handoff_path):
            with contextlib.suppress(OSError):
                path.unlink()
        lock.unlink(missing_ok=True)
        if not isinstance(exc, OSError):
            raise
        raise StoreError(f"the job's files could not be written in the jobs directory {store.root}: "
                         f"{exc.strerror or exc}; nothing was scheduled and the thread's lock was released",
                         hint="make that folder writable, or set REKALL_JOBS_DIR to one you can write") from exc
    stamps = thread_stamps(store.paths, thread)  # before reading: see rekall.store.views
    created = store.catalog.load(thread, job)
    status = status_of(store, created)
    store.status_file.save_quietly(thread, status, stamps)
    return CreatedJob(job, read(status), already_scheduled=False)


def fail_unstarted(store: StoreParts, thread_id: str, job_id: str, error: str) -> JobStatus:
    """The worker could not be started: fail the job with the cause and release its lock.

    Nothing was sent to the extension, so the outcome is known. The journal is kept.
    """
    thread, job = valid_thread(thread_id), valid_job(job_id)
    with store.open_lifecycle(thread, job) as lifecycle:
        if not lifecycle.state.terminal:
            lifecycle.fire("fail", errorCode="spawn_failed", error=error, delivery="not_delivered")
        status = lifecycle.derived_status
    store.locks.release(thread, job)
    return read(status)
