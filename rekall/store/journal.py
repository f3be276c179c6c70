"""The per-job journal: append-only, one checksummed JSON line per record, fsynced.

Reading (anyone, any time) never changes the file. A torn or garbled *last* line is what a
crash in the middle of an append leaves behind; readers ignore it, and the next writer cuts
it off before appending (appending after a partial line would glue the new record onto
garbage and move the damage into the middle). A bad line *followed by good ones* is real
corruption: it is reported with its line number, never skipped.

The writer appends a whole line with one ``O_APPEND`` write, then fsyncs, and only then
returns. The job lock makes the writer the only one; in case that promise is broken (a
worker judged dead that was not), each append holds an exclusive kernel lock on the journal
(``flock``; ``LockFileEx`` on Windows) from its length check to its fsync, so a second writer
is refused instead of interleaving, and the check that the file still has the length it last
saw catches one that appended in between. After any failed write the handle refuses more writes:
a failed fsync is not retried, because the kernel may already have dropped the data.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import attrs

from rekall.store.errors import JournalCorrupt, JournalUnusable, UnknownRecordVersion
from rekall.store.fsio import FileOps
from rekall.store.fsread import JOURNAL_LIMIT, O_BINARY, O_CLOEXEC, O_NOFOLLOW, read_private
from rekall.store.guard import try_lock, unlock
from rekall.store.wire import BadRecord, Garbled, NewerVersion, Record, decode_line, encode_record

log = logging.getLogger("rekall.store")

#: Windows locks are mandatory: lock a byte far past the end, which no reader reads.
_LOCK_OFFSET = 1 << 40


@attrs.frozen
class Scan:
    records: tuple[Record, ...]
    #: Bytes of the intact prefix; anything after it is a torn tail.
    good_length: int
    torn_bytes: int


def scan_journal(path: Path) -> Scan:
    """Read and check every line of ``path`` without changing it."""
    data = _read_journal(path)
    records: list[Record] = []
    offset = 0
    lines = _lines(data)
    for number, line in enumerate(lines, start=1):
        last = number == len(lines)
        try:
            records.append(decode_line(line))
        except Garbled as exc:
            if last:
                return Scan(tuple(records), offset, len(data) - offset)
            raise _corrupt(path, number, str(exc)) from exc
        except BadRecord as exc:
            raise _corrupt(path, number, str(exc)) from exc
        except NewerVersion as exc:
            raise _unknown_version(path, number, exc) from exc
        offset += len(line)
    return Scan(tuple(records), offset, 0)


def first_record(path: Path) -> Record:
    """Only the first record (it creates the job), for ordering jobs without replaying them."""
    data = _read_journal(path)
    end = data.find(b"\n")
    try:
        return decode_line(data if end < 0 else data[: end + 1])
    except (Garbled, BadRecord) as exc:
        raise _corrupt(path, 1, str(exc)) from exc
    except NewerVersion as exc:
        raise _unknown_version(path, 1, exc) from exc


def _read_journal(path: Path) -> bytes:
    """The journal's bytes; ``FileNotFoundError`` when it is gone, else :class:`JournalCorrupt`
    naming the path when it cannot be read (a directory, a FIFO or a symlink planted there)."""
    try:
        return read_private(path, limit=JOURNAL_LIMIT)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise JournalCorrupt(f"cannot read the journal {path}: {exc.strerror or exc}",
                             hint="move it aside if rekall did not write it; nothing was changed") from exc


def _lines(data: bytes) -> list[bytes]:
    """Split after each newline only (``bytes.splitlines`` would also split on a stray CR)."""
    pieces = data.split(b"\n")
    lines = [piece + b"\n" for piece in pieces[:-1]]
    if pieces[-1]:
        lines.append(pieces[-1])  # no newline: a torn tail unless proven otherwise
    return lines


def _unknown_version(path: Path, number: int, exc: NewerVersion) -> UnknownRecordVersion:
    return UnknownRecordVersion(f"{path} line {number} is a record of version {exc.version!r}, which this rekall "
                                "does not know", hint="upgrade rekall to read this job; nothing was changed")


def _corrupt(path: Path, number: int, reason: str) -> JournalCorrupt:
    return JournalCorrupt(f"{path} line {number} is damaged ({reason}); it is not the torn end of a crash",
                          hint="the journal was changed outside rekall; keep it for inspection and move it "
                               "aside to schedule again; nothing was changed")


class JournalWriter:
    """The single appender of one job's journal."""

    def __init__(self, path: Path, fd: int, length: int, fs: FileOps) -> None:
        self.path, self._fd, self._length, self._fs = path, fd, length, fs
        self._broken: str | None = None

    @classmethod
    def open(cls, path: Path, scan: Scan, fs: FileOps) -> JournalWriter:
        """Open for appending after ``scan``, cutting a torn tail first."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_BINARY)
        try:
            if not try_lock(fd, _LOCK_OFFSET):
                raise JournalUnusable(f"{path} is being appended to by another process",
                                      hint="another process writes this job; stop one of them")
            try:
                if scan.torn_bytes:
                    os.ftruncate(fd, scan.good_length)
                    fs.fsync(fd)
                    log.warning("cut a torn tail of %d bytes from %s", scan.torn_bytes, path)
                if os.fstat(fd).st_size != scan.good_length:
                    raise JournalUnusable(f"{path} changed while it was being opened",
                                          hint="another process writes this job; stop one of them")
            finally:
                unlock(fd, _LOCK_OFFSET)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, scan.good_length, fs)

    def append(self, record: Record) -> None:
        """Write ``record`` and fsync it; when this returns, the record is durable."""
        if self._broken is not None:
            raise JournalUnusable(f"{self.path} refuses writes after an earlier failure ({self._broken})",
                                  hint="reopen the job; the journal on disk is the truth")
        if not try_lock(self._fd, _LOCK_OFFSET):
            self._broken = "another process was appending"
            raise JournalUnusable(f"{self.path} is being appended to by another process; this job has two writers",
                                  hint="only the lock's owner may write; inspect with `rekall explain`")
        try:
            self._append_locked(record)
        finally:
            unlock(self._fd, _LOCK_OFFSET)

    def _append_locked(self, record: Record) -> None:
        if os.fstat(self._fd).st_size != self._length:
            self._broken = "the file was changed by another writer"
            raise JournalUnusable(f"{self.path} was appended to by someone else; this job has two writers",
                                  hint="only the lock's owner may write; inspect with `rekall explain`")
        line = encode_record(record)
        try:
            self._fs.write_all(self._fd, line)
            self._fs.fsync(self._fd)
        except OSError as exc:
            self._broken = f"{exc.strerror or exc}"
            self._undo()
            raise JournalUnusable(f"could not make a record durable in {self.path}: {exc.strerror or exc}",
                                  hint="check the disk; the transition did not take effect") from exc
        self._length += len(line)

    def _undo(self) -> None:
        """Best effort: take back the unsynced bytes so that a reader does not replay them."""
        try:
            os.ftruncate(self._fd, self._length)
        except OSError:
            log.error("could not cut an undurable record from %s", self.path)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
