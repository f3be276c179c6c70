"""The per-thread job lock: finding, reading, taking, naming the worker, releasing; and whether
the job a lock names still runs.

The lock lives in the account's lock directory (``.rekall/locks`` in the home the password
database records, see ``rekall.store.paths``), not in the jobs directory nor under ``HOME``, so
that two processes resolving different jobs directories or homes still share one lock per
thread; it names the jobs directory of its job. A lock left by an earlier rekall (whose worker
may still run) in the jobs directory or under ``$HOME/.rekall/locks`` is honoured and released,
never created.

Inspecting, taking over and releasing a lock happen under the store's guard (a kernel lock,
see ``rekall.store.guard``), so that two processes never judge the same lock. A lock is
removed only when its job's processes are provably gone (:func:`job_liveness`); the identity
of one process (machine, pid, start time) is :mod:`rekall.store.processes`'s.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs

from rekall.store.errors import LockBusy
from rekall.store.fsio import FileOps
from rekall.store.fsread import LOCK_LIMIT, read_private
from rekall.store.guard import guarded
from rekall.store.processes import Liveness, LockHolder, liveness
from rekall.store.paths import JobPaths, LockPaths, ensure_private_dir, lock_places
from rekall.store.replay import Replay
from rekall.store.wire import decode_lock, encode_lock

log = logging.getLogger("rekall.store")


class Locks:
    """The lock files of one lock directory (and the legacy locks of one jobs directory).

    Thread ids reaching here are validated by the store.
    """

    def __init__(self, root: Path, jobs: JobPaths, fs: FileOps, host: str, legacy: tuple[Path, ...] = ()) -> None:
        self.root = root
        self.paths = LockPaths(root)
        self._jobs = jobs
        #: Lock directories of earlier releases (``$HOME/.rekall/locks``): read, never written.
        self.legacy = legacy
        self.fs = fs
        self.host = host

    def path(self, thread: str) -> Path:
        return self.paths.lock(thread)

    @contextmanager
    def guarded(self) -> Iterator[None]:
        """Serialise with every process that inspects or takes locks (see ``rekall.store.guard``)."""
        # The lock directory is ours to create (0700) as soon as something must be serialised:
        # for a reader, only when it records a provably dead worker.
        ensure_private_dir(self.root, "lock directory")
        with guarded(self.paths.guard()):
            yield

    def places(self, thread: str) -> tuple[Path, ...]:
        """Where the thread's lock may be (:func:`rekall.store.paths.lock_places`)."""
        return lock_places(self.root, self.legacy, self._jobs, thread)

    def exists(self, thread: str) -> bool:
        """Some lock file is there (readable or not)."""
        return any(os.path.lexists(p) for p in self.places(thread))

    def find(self, thread: str) -> tuple[Path, LockHolder] | None:
        """The thread's lock and where it is (the first of :meth:`places` that holds one)."""
        for path in self.places(thread):
            holder = self.read(path)
            if holder is not None:
                return path, holder
        return None

    def read(self, path: Path) -> LockHolder | None:
        try:
            raw = read_private(path, limit=LOCK_LIMIT)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LockBusy(f"the lock {path} cannot be read: {exc.strerror or exc}",
                           hint="check its permissions; it was not changed") from exc
        try:
            return decode_lock(raw)
        except ValueError as exc:
            raise LockBusy(f"the lock {path} is unreadable ({exc})",
                           hint="if no rekall worker runs for this thread, move the lock aside") from exc

    def take(self, holder: LockHolder) -> Path:
        """Create the thread's lock, complete and exclusively (call under the guard)."""
        path, mine = self.paths.lock(holder.thread_id), encode_lock(holder)
        try:
            self.fs.create_exclusive(path, mine)
        except FileExistsError:  # only a process ignoring the guard gets here
            raise LockBusy(f"the lock of thread {holder.thread_id} appeared while it was being taken",
                           hint="another program writes the jobs directory; nothing was scheduled") from None
        except BaseException:  # the link may have happened before the failure: take back only ours
            if path.exists() and read_private(path, limit=LOCK_LIMIT) == mine:
                path.unlink()
            raise
        return path

    def name_worker(self, thread: str, job: str, pid: int, process_start_time: str | None) -> bool:
        """Name the worker process in the lock (compare-and-set on the job id); False, and nothing
        changed, when the lock no longer names ``job``."""
        with self.guarded():
            found = self.find(thread)
            if found is None or found[1].job_id != job:
                return False
            path, holder = found
            updated = attrs.evolve(holder, pid=pid, process_start_time=process_start_time, host=self.host)
            self.fs.atomic_replace(path, encode_lock(updated))
            return True

    def release(self, thread: str, job: str) -> bool:
        """Remove the thread's lock if it names ``job``; True when it did."""
        with self.guarded():
            try:
                found = self.find(thread)
            except LockBusy as exc:
                log.warning("not releasing the lock of thread %s: %s", thread, exc.message)
                return False
            if found is None or found[1].job_id != job:
                return False
            self.remove(found[0])
            return True

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self.fs.fsync_dir(path.parent)


def job_liveness(holder: LockHolder | None, job: Replay | None, *, host: str) -> Liveness:
    """Alive if any known process of the job is; dead only if every one is provably dead.

    The identities are the lock's holder and the worker recorded by ``worker_started``
    (the lock may still name the scheduler if it died before handing the lock over).
    """
    identities = [] if holder is None else [holder]
    started = next((t for t in (job.transitions if job else ()) if t.trigger == "worker_started"), None)
    if started is not None and job is not None:
        ev = started.evidence
        identities.append(LockHolder(job_id=job.job_id, thread_id=job.thread_id, pid=ev["pid"],
                                    process_start_time=ev.get("processStartTime"), host=ev["host"]))
    verdicts = {liveness(identity, host=host) for identity in identities}
    if Liveness.ALIVE in verdicts:
        return Liveness.ALIVE
    if Liveness.UNKNOWN in verdicts:
        return Liveness.UNKNOWN
    return Liveness.DEAD
