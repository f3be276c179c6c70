"""What every concern of the store shares, below them all: the directories, the clock, the file
operations, the host, the catalog, the locks, the status file, and driving one job.

:class:`rekall.store.jobstore.JobStore` is the door callers use. The modules behind its verbs
(``status``, ``reaper``, ``schedule``, ``cancel``, ``overdue``) take these parts and never the
door, so the dependency runs one way: door → concerns → parts.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from rekall.kernel.errors import StoreError
from rekall.kernel.ids import job_id as valid_job, thread_id as valid_thread
from rekall.states import TERMINAL_STATES
from rekall.store.catalog import Catalog
from rekall.store.clock import Clock, SystemClock
from rekall.store.errors import LockBusy, UnknownJob
from rekall.store.fsio import FileOps
from rekall.store.fsread import STATUS_LIMIT, TooLarge, WrongKind, read_private
from rekall.store.journal import JournalWriter, scan_journal
from rekall.store.lifecycle import Lifecycle
from rekall.store.locks import Locks, job_liveness
from rekall.store.processes import Liveness, LockHolder, this_host
from rekall.store.paths import JobPaths, inspect_jobs_dir
from rekall.store.replay import Replay, history_before, replay_scan
from rekall.store.views import sealed, stamp, thread_stamps, unsealed

log = logging.getLogger("rekall.store")

ENDED = frozenset(state.value for state in TERMINAL_STATES)


class StatusFile:
    """The status files of one jobs directory: a derived view, never the truth."""

    def __init__(self, paths: JobPaths, fs: FileOps) -> None:
        self.paths = paths
        self.fs = fs

    def read(self, thread: str) -> tuple[dict[str, Any] | None, str | None]:
        """The file's JSON object, or ``None`` and why not (``missing``, ``corrupt (…)``, …)."""
        path = self.paths.status_file(thread)
        try:
            raw = read_private(path, limit=STATUS_LIMIT)
        except FileNotFoundError:
            return None, "missing"
        except TooLarge as exc:
            return None, f"too large ({exc.strerror}; not read)"
        except WrongKind as exc:
            return None, f"not a regular file ({path} is {exc.kind})"
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
        self.fs.atomic_replace(self.paths.status_file(thread), data)

    def save_quietly(self, thread: str, status: dict[str, Any], stamps: dict[str, list[int]]) -> None:
        """Save, logging a failure: a reader never fails on a derived view."""
        try:
            self.save(thread, status, stamps)
        except OSError as exc:
            log.warning("status file of thread %s not written (%s); the journal holds the job", thread, exc)


class StoreParts:
    """One jobs directory's shared parts. Build a :class:`~rekall.store.jobstore.JobStore`, not this."""

    def __init__(self, root: Path, *, lock_root: Path, clock: Clock | None = None, fs: FileOps | None = None,
                 permission_report: str | None = None, node_dirs: tuple[Path, ...] = (),
                 legacy_lock_roots: tuple[Path, ...] = ()) -> None:
        self.root = root
        self.paths = JobPaths(root)
        self.lock_root = lock_root
        #: Lock directories of earlier releases, read and released, never created (``rekall.store.paths``).
        self.legacy_lock_roots = legacy_lock_roots
        self.clock: Clock = clock or SystemClock()
        self.fs = fs or FileOps()
        self.host = this_host()
        self.catalog = Catalog(self.paths)
        self.locks = Locks(self.lock_root, self.paths, self.fs, self.host, self.legacy_lock_roots)
        self.status_file = StatusFile(self.paths, self.fs)
        #: Set when opening had to tighten the directory's permissions (see ``ensure_private_dir``).
        self.permission_report = permission_report
        #: The Node version's jobs directories, read only (``rekall.store.node_version``).
        self.node_dirs = node_dirs
        #: Jobs whose dead worker could not be recorded (the journal refused the write): why.
        self.unrecorded: dict[str, str] = {}

    def open_lifecycle(self, thread_id: str, job_id: str) -> Lifecycle:
        """Open a job for driving (cuts a torn journal tail). Only the lock's holder may do this."""
        thread, job = valid_thread(thread_id), valid_job(job_id)
        path = self.paths.journal(thread, job)
        try:
            scan = scan_journal(path)
        except FileNotFoundError:
            raise UnknownJob(f"no job {job} for thread {thread} in {self.root}",
                             hint="check the ids with `rekall status`") from None
        replay = replay_scan(path, scan, thread, job)
        writer = JournalWriter.open(path, scan, self.fs)
        others = thread_stamps(self.paths, thread)  # before the history is read: see rekall.store.views
        return Lifecycle(replay, writer, clock=self.clock, log_path=self.paths.log(thread, job),
                         history=history_before(replay, self.catalog.earlier(replay, listed=list(others))),
                         write_status=lambda value: self.status_file.save(
                             thread, value, {**others, job: stamp(path)}))

    def lock_holder(self, thread_id: str) -> LockHolder | None:
        """Who holds the thread's lock, or ``None`` when it is free."""
        found = self.locks.find(valid_thread(thread_id))
        return None if found is None else found[1]

    def lock_liveness(self, thread_id: str) -> Liveness | None:
        """ALIVE, DEAD or UNKNOWN for the thread's lock (the rule ``reap_if_dead`` applies); None when free."""
        thread = valid_thread(thread_id)
        try:
            holder = self.lock_holder(thread)
        except LockBusy:
            return Liveness.UNKNOWN
        if holder is None:
            return None
        return job_liveness(holder, self.lock_job(thread, holder)[1], host=self.host)

    def lock_job(self, thread: str, holder: LockHolder) -> tuple[StoreParts | None, Replay | None]:
        """The store holding the lock's job and the job, each ``None`` when it cannot be read."""
        home = self.home_of(holder)
        return home, (home.catalog.load_if_exists(thread, holder.job_id) if home is not None else None)

    def home_of(self, holder: LockHolder) -> StoreParts | None:
        """The store holding the lock's job: this one, or the jobs directory the lock names
        (another ``CODEX_HOME``); ``None`` when that directory cannot be used."""
        if holder.jobs_dir is None or Path(holder.jobs_dir) == self.root:
            return self
        other = Path(holder.jobs_dir)
        if not os.path.lexists(other):
            return None  # gone (a demo's or a test's folder): nothing to say, its lock is judged by its holder
        try:
            inspect_jobs_dir(other)
        except StoreError as exc:
            log.warning("the lock of job %s names the jobs directory %s: %s", holder.job_id, other, exc.message)
            return None
        return type(self)(other, lock_root=self.lock_root, clock=self.clock, fs=self.fs,
                          legacy_lock_roots=self.legacy_lock_roots)
