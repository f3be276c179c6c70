"""Every read the store makes of its own files: never through a symlink, never of anything but a
regular file (a FIFO planted there would stall the command), never past a size limit.

Apart from :mod:`rekall.store.fsio` (the writes, with their fault-injection seam) so that
the fast read paths load no more than they use.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import time
from pathlib import Path

O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_BINARY = getattr(os, "O_BINARY", 0)


class TooLarge(OSError):
    """A file is larger than rekall reads: it is not one rekall wrote (or it was damaged)."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size:,} bytes, over the limit of {limit:,}")
        self.path, self.size, self.limit = path, size, limit


class ReadTimedOut(OSError):
    """A pipe, FIFO or terminal did not deliver its data and close within the wait."""

    def __init__(self, path: Path | str, wait_s: float) -> None:
        super().__init__(errno.ETIMEDOUT, f"no end of data within {wait_s:g} s")
        self.path, self.wait_s = path, wait_s


class WrongKind(OSError):
    """A path where rekall keeps a file of its own holds something else: a FIFO, a directory, a
    socket, a device or a symbolic link. Refused before any read, naming the path and what is there."""

    def __init__(self, path: Path | str, kind: str) -> None:
        # The errno a surface reads (rekall.kernel.errors): a symlink keeps ELOOP's "symlink_refused".
        code = {"a symbolic link": errno.ELOOP, "a directory": errno.EISDIR}.get(kind, errno.EINVAL)
        super().__init__(code, f"{kind}, not a regular file", str(path))
        self.path, self.kind = path, kind


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a file rekall knows"


#: How long a read of something that is not a regular file (a FIFO, a pipe, a terminal) waits for
#: the writer to finish: a FIFO nobody writes to would otherwise hold the command forever.
STREAM_WAIT_S = 30.0

#: Every file rekall reads has a size limit (``read_private(limit=...)``), so a huge or
#: hostile file costs at most its limit in memory. Each is far above what rekall writes.
LOCK_LIMIT = 64 * 1024
STATUS_LIMIT = 4 * 1024 * 1024
JOURNAL_LIMIT = 64 * 1024 * 1024


def read_private(path: Path, *, limit: int) -> bytes:
    """The bytes of the regular file ``path``; :class:`WrongKind` for anything else (a symlink,
    which is never followed, a FIFO, a directory, a device), :class:`TooLarge` past ``limit`` bytes.

    Opened without blocking and checked on the open descriptor, so a FIFO planted at one of
    rekall's fixed paths is refused at once and a file swapped meanwhile is checked as it is read.
    The size is checked before reading and the read is capped, so a file that grows meanwhile
    cannot cost more than ``limit + 1`` bytes either.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_BINARY)
    except FileNotFoundError:
        raise
    except OSError:
        # What could not be opened may be what does not belong here: a symlink (O_NOFOLLOW: ELOOP,
        # or EMLINK on FreeBSD), a socket (ENXIO).
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            raise WrongKind(path, kind_of(mode)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise WrongKind(path, kind_of(mode))
        return read_fd_limited(fd, path, limit=limit)
    finally:
        os.close(fd)


def read_limited(path: Path | str, *, limit: int, wait_s: float = STREAM_WAIT_S) -> bytes:
    """:func:`read_private` for a file the user names (``--handoff FILE``), which may be a symlink
    or a stream (``<(cmd)``, a FIFO).

    Opened without blocking, so that a FIFO with no writer opens at once; its read is then bounded
    by ``wait_s`` (:class:`ReadTimedOut`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | O_CLOEXEC | O_BINARY)
    try:
        return read_fd_limited(fd, path, limit=limit, wait_s=wait_s)
    finally:
        os.close(fd)


def read_fd_limited(fd: int, path: Path | str, *, limit: int, wait_s: float = STREAM_WAIT_S) -> bytes:
    """Up to ``limit`` bytes from the open ``fd`` (``TooLarge`` past it); ``path`` names it in errors."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        data = _read_stream(fd, path, limit + 1, wait_s)
    elif info.st_size > limit:
        raise TooLarge(path, info.st_size, limit)
    else:
        data = _read_at_most(fd, limit + 1, info.st_size)
    if len(data) > limit:
        raise TooLarge(path, len(data), limit)
    return data


def _read_stream(fd: int, path: Path | str, cap: int, wait_s: float) -> bytes:
    """Up to ``cap`` bytes, to the end of the stream, each read waited for until one deadline.
    The descriptor's blocking mode is left as it is (standard input is shared with the shell)."""
    deadline = time.monotonic() + wait_s
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks: list[bytes] = []
    total = 0
    while total < cap:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            raise ReadTimedOut(path, wait_s)
        try:
            chunk = os.read(fd, min(65536, cap - total))
        except BlockingIOError:  # woken with nothing to read after all
            continue
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _read_at_most(fd: int, cap: int, size: int) -> bytes:
    """Up to ``cap`` bytes, to the end of the file. Sized by what ``fstat`` said (plus one byte,
    to see the end) rather than by ``cap``: a buffered ``read(cap)`` allocates the whole cap,
    a megabyte for a handoff of a few hundred bytes, just before the continuation is sent."""
    chunks: list[bytes] = []
    total = 0
    while total < cap:
        chunk = os.read(fd, min(max(size - total + 1, 65536), cap - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
