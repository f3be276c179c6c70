"""The job store: one private directory holding every job's journal, handoff, lock and status.

``JobStore`` is the door callers use: the worker, the service and the surfaces ask it, not
the files. Each concern lives in its own module and takes the parts they all share
(:mod:`rekall.store.parts`: the directories, the clock, the file operations, the host, the
status file, the jobs whose dead worker could not be journaled), never the door, so the
dependency runs one way:

- :mod:`rekall.store.catalog`: reading jobs (one job, a thread's jobs in order, the latest);
- :mod:`rekall.store.status`: the status derived from a journal;
- :mod:`rekall.store.locks`: the per-thread lock, the guard, and whether a job still runs;
- :mod:`rekall.store.reaper`: the ``worker_lost`` rule for a provably dead worker;
- :mod:`rekall.store.schedule`: scheduling a job (the locking protocol) and a failed spawn;
- :mod:`rekall.store.cancel`: the cancel marker.

Readers (``JobStore.open_reader``: status, history, explain) never create or chmod a
folder. Inside an existing jobs directory they record a provably dead worker first (the
``worker_lost`` rule), so every reader tells the truth; when even that record cannot be
written (a full disk), they report the job from what can be proven, without crashing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rekall.kernel.errors import InvalidInput
from rekall.kernel.ids import job_id as valid_job, thread_id as valid_thread
from rekall.states.status import JobStatus, read
from rekall.store import cancel, reaper, schedule, status
from rekall.store.clock import Clock
from rekall.store.fsio import FileOps
from rekall.store.handoff import Verified, verify_sealed
from rekall.store.processes import Liveness, LockHolder, liveness
from rekall.store.parts import StoreParts
from rekall.store.paths import (
    ensure_private_dir,
    legacy_lock_dirs,
    node_jobs_dirs,
    reader_dirs,
    resolve_jobs_dir,
    resolve_lock_dir,
)
from rekall.store.reaper import Reaped
from rekall.store.replay import Replay
from rekall.store.schedule import CreatedJob

__all__ = ["CreatedJob", "JobStore", "Reaped"]


class JobStore(StoreParts):
    """The door to one jobs directory: every caller reads and drives jobs through these verbs."""

    def __init__(self, root: Path, *, lock_root: Path | None = None, clock: Clock | None = None,
                 fs: FileOps | None = None, permission_report: str | None = None,
                 node_dirs: tuple[Path, ...] = (), legacy_lock_roots: tuple[Path, ...] | None = None) -> None:
        lock_root = lock_root if lock_root is not None else resolve_lock_dir()
        super().__init__(root, lock_root=lock_root, clock=clock, fs=fs or FileOps(),
                         permission_report=permission_report, node_dirs=node_dirs,
                         legacy_lock_roots=(legacy_lock_dirs(os.environ, lock_root) if legacy_lock_roots is None
                                            else legacy_lock_roots))

    @classmethod
    def open(cls, env: Mapping[str, str] | None = None, *, clock: Clock | None = None,
             fs: FileOps | None = None) -> JobStore:
        """The store for scheduling and driving jobs: the jobs and lock directories, created 0700 if needed."""
        env = os.environ if env is None else env
        root, lock_root = resolve_jobs_dir(env), resolve_lock_dir()
        reports = [r for r in (ensure_private_dir(root), ensure_private_dir(lock_root, "lock directory")) if r]
        from rekall.store.jobs_dirs import UNRECORDED

        if not env.get(UNRECORDED):
            _remember(root)
        return cls(root, lock_root=lock_root, clock=clock, fs=fs, permission_report="; ".join(reports) or None,
                   node_dirs=tuple(node_jobs_dirs(env, root)), legacy_lock_roots=legacy_lock_dirs(env, lock_root))

    @classmethod
    def open_reader(cls, env: Mapping[str, str] | None = None, *, clock: Clock | None = None,
                    fs: FileOps | None = None) -> JobStore:
        """The store for reading (status, history, explain): creates and chmods nothing.

        A jobs directory that does not exist reads as empty; an existing one must pass the
        same checks as for writing (not a symlink, yours).
        """
        env = os.environ if env is None else env
        root, lock_root, node_dirs = reader_dirs(env)
        return cls(root, lock_root=lock_root, clock=clock, fs=fs, node_dirs=tuple(node_dirs),
                   legacy_lock_roots=legacy_lock_dirs(env, lock_root))

    # --- paths (ids validated) ---------------------------------------------------------

    def status_path(self, thread_id: str) -> Path:
        return self.paths.status_file(valid_thread(thread_id))

    def lock_path(self, thread_id: str) -> Path:
        return self.locks.path(valid_thread(thread_id))

    def journal_path(self, thread_id: str, job_id: str) -> Path:
        return self.paths.journal(valid_thread(thread_id), valid_job(job_id))

    def handoff_path(self, thread_id: str, job_id: str) -> Path:
        return self.paths.handoff(valid_thread(thread_id), valid_job(job_id))

    def cancel_path(self, thread_id: str, job_id: str) -> Path:
        return self.paths.cancel(valid_thread(thread_id), valid_job(job_id))

    def cancel_requested(self, thread_id: str, job_id: str) -> bool:
        """True once ``cancel`` has written the job's marker (``rekall.store.cancel``)."""
        return self.cancel_path(thread_id, job_id).exists()

    def log_path(self, thread_id: str, job_id: str) -> Path:
        return self.paths.log(valid_thread(thread_id), valid_job(job_id))

    # --- reading jobs and their status (rekall.store.catalog, rekall.store.status) -----

    def load(self, thread_id: str, job_id: str) -> Replay:
        return self.catalog.load(thread_id, job_id)

    def latest(self, thread_id: str) -> Replay | None:
        return self.catalog.latest(thread_id)

    def all_jobs(self) -> list[tuple[str, str]]:
        return self.catalog.all_jobs()

    def find(self, job_or_thread: str) -> Replay:
        return self.catalog.find(job_or_thread)

    # The status verbs hand out records; the concerns behind them build the JSON object (what the
    # status file holds) and the record keeps it whole (``JobStatus.as_read``).

    def status_of(self, job: Replay) -> JobStatus:
        return read(status.status_of(self, job))

    def current_fields(self, job: Replay) -> JobStatus:
        return read(status.current_fields(self, job))

    def read_status(self, thread_id: str) -> JobStatus:
        return read(status.read_status(self, thread_id))

    def node_status(self, thread_id: str) -> JobStatus | None:
        """The thread's job in the Node version's jobs directories, if any (marked ``writtenBy``)."""
        from rekall.store.node_version import node_status  # only for a thread without a rekall job

        found = node_status(self.node_dirs, valid_thread(thread_id))
        return None if found is None else read(found)

    # --- the lock (rekall.store.locks) and reaping (rekall.store.reaper) ----------------

    @contextmanager
    def guarded(self) -> Iterator[None]:
        """Serialise with every process that inspects or takes locks (see ``rekall.store.guard``)."""
        with self.locks.guarded():
            yield

    def is_holder_alive(self, holder: LockHolder) -> bool:
        """True only when the holder is proven alive. False does not prove death: see ``lock_liveness``."""
        return liveness(holder, host=self.host) is Liveness.ALIVE

    def set_lock_holder(self, thread_id: str, job_id: str, pid: int, process_start_time: str | None) -> bool:
        """Name the worker process in the lock (compare-and-set on the job id).

        False, and nothing changed, when the lock no longer names ``job_id``: its worker has
        already finished and released it (a fast job can end before its scheduler gets here).
        """
        thread, job = valid_thread(thread_id), valid_job(job_id)
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise InvalidInput(f"pid must be a positive integer; got {pid!r:.40}", field="pid", hint="fix the caller")
        return self.locks.name_worker(thread, job, pid, process_start_time)

    def release_lock(self, thread_id: str, job_id: str) -> bool:
        """Remove the thread's lock if it names ``job_id``; True when it did."""
        return self.locks.release(valid_thread(thread_id), valid_job(job_id))

    def reap_if_dead(self, thread_id: str) -> Reaped | None:
        return reaper.reap_if_dead(self, thread_id)

    def reap_all(self) -> list[Reaped]:
        return reaper.reap_all(self)

    # --- scheduling, driving and cancelling a job --------------------------------------

    def create_job(self, thread_id: str, *, handoff: Mapping[str, Any] | None, user_fingerprint: str | None,
                   extra: Mapping[str, Any] | None = None) -> CreatedJob:
        """Schedule a job for the thread, or return the live job that already holds it."""
        return schedule.create_job(self, thread_id, handoff=handoff, user_fingerprint=user_fingerprint, extra=extra)

    def fail_unstarted(self, thread_id: str, job_id: str, error: str) -> JobStatus:
        return schedule.fail_unstarted(self, thread_id, job_id, error)

    def request_cancel(self, thread_id: str, job_id: str) -> JobStatus:
        return cancel.request_cancel(self, thread_id, job_id)

    def verify_handoff(self, thread_id: str, job_id: str, expected_sha256: str | None) -> dict[str, Any]:
        """The saved handoff record, if unchanged and bound to this thread and job."""
        return self.verify_sealed_handoff(thread_id, job_id, expected_sha256).record

    def verify_sealed_handoff(self, thread_id: str, job_id: str, expected_sha256: str | None,
                              validated: Verified | None = None) -> Verified:
        """:meth:`verify_handoff`, trusting ``validated`` only for the very bytes it was validated from.

        A ``validated`` whose record binds these ids was made by this check for them (it bound
        the record to ids it had checked): the file it was read from is this job's handoff, read
        again there without checking the ids and building the path again."""
        bound = None if validated is None else (validated.record.get("threadId"), validated.record.get("jobId"))
        if validated is not None and bound == (thread_id, job_id):
            return verify_sealed(validated.path, thread_id, job_id, expected_sha256, validated)
        thread, job = valid_thread(thread_id), valid_job(job_id)
        return verify_sealed(self.paths.handoff(thread, job), thread, job, expected_sha256, validated)


def _remember(root: Path) -> None:
    """Record the jobs directory for the plugin's hook, which may run with another environment
    (:mod:`rekall.store.jobs_dirs`); a failure costs only that hook's way to it."""
    import logging

    from rekall.kernel.errors import RekallError
    from rekall.store.jobs_dirs import remember_jobs_dir

    try:
        remember_jobs_dir(root)
    except (OSError, RekallError) as exc:
        logging.getLogger("rekall.store").warning("the jobs directory %s could not be recorded for the "
                                                  "SessionStart hook (%s)", root, exc)
