"""Every durability call the store makes goes through ``FileOps``.

One seam, so tests can fail or "crash" at any write, fsync or rename (fault injection), and
so the rules live in one place:

* Private: files are created 0600 and opened with ``O_NOFOLLOW`` where the OS has it.
* Atomic replace: temp file in the same directory, write, fsync, ``os.replace``, fsync the
  directory. The rename is retried briefly on Windows only, where readers and virus
  scanners hold files open; elsewhere an error is an error.
* Exclusive create of a complete file: write a temp file, then ``os.link`` it to the final
  name. The link either fails (the name exists) or makes the whole file appear at once, so a
  reader never sees a half-written lock or handoff.
* A failed fsync is never retried (after EIO the kernel may have dropped the data).
"""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rekall.store.fsread import O_BINARY, O_CLOEXEC, O_NOFOLLOW

_WINDOWS = sys.platform == "win32"
#: Windows only: waits between rename attempts when the target is briefly held open.
_REPLACE_RETRY_DELAYS_S = (0.01, 0.02, 0.04, 0.08, 0.1)


class FileOps(NamedTuple):
    """The primitive calls; tests replace one with ``_replace`` to inject a fault."""

    write: Callable[[int, bytes], int] = os.write
    fsync: Callable[[int], None] = os.fsync
    replace: Callable[[str, str], None] = os.replace

    def write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = self.write(fd, view.tobytes())
            view = view[written:]

    def fsync_dir(self, directory: Path) -> None:
        """Make a new or renamed name in ``directory`` durable (POSIX; Windows cannot open dirs)."""
        if _WINDOWS:
            return
        fd = os.open(directory, os.O_RDONLY | O_CLOEXEC)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)

    def _durable_temp(self, path: Path, data: bytes) -> Path:
        import tempfile  # here, not at the top: the worker opens its log through this module before it follows

        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            self.write_all(fd, data)
            self.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(name)
            raise
        os.close(fd)
        return Path(name)

    def atomic_replace(self, path: Path, data: bytes) -> None:
        temp = self._durable_temp(path, data)
        try:
            self._replace_with_retry(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        self.fsync_dir(path.parent)

    def _replace_with_retry(self, temp: Path, path: Path) -> None:
        delays = iter(_REPLACE_RETRY_DELAYS_S if _WINDOWS else ())
        while True:
            try:
                self.replace(str(temp), str(path))
                return
            except PermissionError:
                delay = next(delays, None)
                if delay is None:
                    raise
                time.sleep(delay)

    def create_exclusive(self, path: Path, data: bytes) -> None:
        """Create ``path`` holding ``data``, complete or not at all; ``FileExistsError`` if taken."""
        temp = self._durable_temp(path, data)
        try:
            try:
                os.link(temp, path)
            except FileExistsError:
                raise
            except OSError as exc:  # no hard links here (FAT, some FUSE): plain O_EXCL instead
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV):
                    raise
                self._create_excl_direct(path, data)
        finally:
            temp.unlink(missing_ok=True)
        self.fsync_dir(path.parent)

    def _create_excl_direct(self, path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_BINARY, 0o600)
        try:
            self.write_all(fd, data)
            self.fsync(fd)
        finally:
            os.close(fd)


def open_private_append(path: Path) -> int:
    """Open ``path`` for appending like every jobs-directory file: created 0600, never through a symlink."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_BINARY, 0o600)


def remove_files(paths: list[Path], *, dry_run: bool) -> tuple[list[str], int]:
    """Remove (or, on a dry run, only list) ``paths`` in their order: the names of those that were
    there, and their bytes. One already gone is left out; nothing is retried."""
    names, size = [], 0
    for path in paths:
        try:
            size += os.lstat(path).st_size
        except FileNotFoundError:
            continue
        names.append(path.name)
        if not dry_run:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return names, size
