"""A kernel lock around the store's short critical sections, shared by all processes.

The per-thread job lock (``<thread>.lock``) is a file that outlives processes, so taking
it over after its holder died needs care: two processes must not both judge the holder dead,
both reap, and one then delete the lock the other just created. Inspecting, reaping and
taking the job lock therefore happen under this guard: an ``flock`` (``LockFileEx`` on
Windows) on ``<jobs>/.guard``, which the OS releases when its holder dies, so it can
never go stale. The file itself is never deleted (deleting a locked file would let two
processes lock two different inodes).

Critical sections only touch local files, so the wait is short; it is still bounded.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rekall.store.errors import LockBusy
from rekall.store.fsread import O_CLOEXEC, O_NOFOLLOW

GUARD_TIMEOUT_S = 10.0
_POLL_S = 0.005


def try_lock(fd: int, offset: int = 0) -> bool:
    """Take an exclusive kernel lock on ``fd`` without waiting; the OS drops it when the holder dies.

    POSIX: ``flock`` on the whole file. Windows: ``msvcrt.locking`` on one byte at
    ``offset``, a mandatory lock, so callers lock a byte nobody reads.
    """
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        os.lseek(fd, offset, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(fd: int, offset: int = 0) -> None:
    if sys.platform == "win32":  # pragma: no cover
        import msvcrt

        os.lseek(fd, offset, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)


@contextmanager
def guarded(path: Path, timeout_s: float = GUARD_TIMEOUT_S) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        delay = _POLL_S
        while not try_lock(fd):
            if time.monotonic() >= deadline:
                raise LockBusy(f"another rekall process has held {path} for over {timeout_s:g} s",
                               hint="check for a hung rekall process; nothing was changed")
            time.sleep(delay)  # flock cannot be awaited with a timeout; back off briefly
            delay = min(delay * 2, 0.1)
        try:
            yield
        finally:
            unlock(fd)
    finally:
        os.close(fd)
