"""Every read the store makes of its own files: never through a symlink, never past a size limit.

Apart from :mod:`rekall.store.fsio` (the writes, with their fault-injection seam) so that
the fast read paths load no more than they use.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_BINARY = getattr(os, "O_BINARY", 0)


class TooLarge(OSError):
    """A file is larger than rekall reads: it is not one rekall wrote (or it was damaged)."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size:,} bytes, over the limit of {limit:,}")
        self.path, self.size, self.limit = path, size, limit


#: Every file rekall reads has a size limit (``read_private(limit=...)``), so a huge or
#: hostile file costs at most its limit in memory. Each is far above what rekall writes.
LOCK_LIMIT = 64 * 1024
STATUS_LIMIT = 4 * 1024 * 1024
JOURNAL_LIMIT = 64 * 1024 * 1024


def read_private(path: Path, *, limit: int) -> bytes:
    """The bytes of ``path`` without following a symlink; ``TooLarge`` past ``limit`` bytes.

    The size is checked before reading and the read is capped, so a file that grows meanwhile
    (or a device such as ``/dev/zero``) cannot cost more than ``limit + 1`` bytes either.
    """
    return read_limited(path, limit=limit, follow=False)


def read_limited(path: Path | str, *, limit: int, follow: bool = True) -> bytes:
    """:func:`read_private` for a file the user names (``--handoff FILE``), which may be a symlink."""
    fd = os.open(path, os.O_RDONLY | (0 if follow else O_NOFOLLOW) | O_CLOEXEC | O_BINARY)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise TooLarge(path, size, limit)
        data = _read_at_most(fd, limit + 1, size)
        if len(data) > limit:
            raise TooLarge(path, len(data), limit)
        return data
    finally:
        os.close(fd)


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
