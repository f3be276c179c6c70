"""Views derived from the journals that a reader may serve without replaying them.

Replaying journals is the truth, and it costs: rekall's records, the lifecycle table, every
journal read and checked. Two views spare a reader that work while nothing has changed:

* the status file (``<thread>.json``) carries a seal, ``derivedFrom``: the stamp of every
  journal of the thread when it was derived, whether its job had ended, the version of
  rekall that derived it, and a checksum of its content;
* the history rows (``.history-rows``) keep each ended job's ``rekall history`` row with the
  stamp of its journal.

A stamp is a journal's inode, size and modification time (ns), followed by its job's delivery
claim's, if there is one (readers fold the claim in). Journals are only appended
to, so a new record changes the size, and a file replaced or rewritten changes the inode or
the time. A view is served only when its stamps match the journals on disk now (the same
journals, not one more or fewer), this version of rekall derived it, its checksum holds and
its jobs had ended: a running job needs the liveness rules only the full path applies.
Otherwise the reader takes the full path, which replays the journals and writes the view
again. Writers take the stamps before they read the journals, so a journal that changes
meanwhile leaves a stamp that no longer matches, never one that matches older content.

A thread with nothing on disk (no journal, status file or lock) has no job, and says so at once
(:func:`trusted_status`).

This module loads nothing heavy: ``rekall status --json`` and ``rekall history --json``
serve from it before the rest of rekall is imported (:mod:`rekall.surfaces.cli_entry`), and so does the
MCP server's ``compaction_status`` before the status code is loaded (:mod:`rekall.surfaces.mcp_light`).
"""

from __future__ import annotations

import json
import os
import zlib
from collections import namedtuple

TYPE_CHECKING = False  # not typing's: kept light, this runs on every `rekall status`
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

from rekall import __version__
from rekall.kernel.ids import is_uuid
from rekall.store.fsread import STATUS_LIMIT, read_private
from rekall.store.paths import JobPaths, legacy_lock_dirs, lock_places, reader_dirs

#: The key of the status file's seal; never part of a status that is shown.
SEAL = "derivedFrom"
#: The rows file is read up to this size; a larger one is not trusted, so the full path answers.
ROWS_LIMIT = 256 * 1024 * 1024


def stamp(path: os.PathLike[str] | str) -> list[int]:
    """``[inode, size, mtime_ns]`` of ``path`` itself (a symlink is stamped, never followed)."""
    return _stamp(os.lstat(path))


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def job_stamp(paths: JobPaths, thread: str, job: str, journal: os.stat_result | None = None) -> list[int]:
    """A job's stamp: its journal's, then its delivery claim's, if any. Readers fold the claim into the
    job (:mod:`rekall.store.delivery`), so a claim taken or planted after a view was derived makes
    the view stale, whichever process took it."""
    journal = os.lstat(paths.journal(thread, job)) if journal is None else journal
    try:
        claim = _stamp(os.lstat(paths.delivery(thread, job)))
    except FileNotFoundError:
        claim = []
    return _stamp(journal) + claim


def thread_stamps(paths: JobPaths, thread: str) -> dict[str, list[int]]:
    """The stamp of each job of ``thread`` (:func:`job_stamp`), by job id (one removed meanwhile is left out)."""
    stamps = {}
    for _, job, entry in paths.journal_entries(thread=thread):
        try:
            stamps[job] = job_stamp(paths, thread, job, entry.stat(follow_symlinks=False))
        except FileNotFoundError:
            continue
    return stamps


# --- the status file's seal ----------------------------------------------------------------


def status_text(status: dict[str, Any]) -> str:
    """``status`` as ``rekall status --json`` prints it (without the final newline)."""
    return json.dumps(status, indent=2, ensure_ascii=False)


def sealed(status: dict[str, Any], stamps: dict[str, list[int]], *, ended: bool) -> dict[str, Any]:
    """``status`` with its seal, ready to be written as the status file."""
    seal = {"rekall": __version__, "ended": ended, "journals": stamps,
            "crc32": zlib.crc32(status_text(status).encode("utf-8"))}
    return {**status, SEAL: seal}


def unsealed(found: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in found.items() if key != SEAL}


def served_status(paths: JobPaths, thread: str) -> tuple[dict[str, Any], str] | None:
    """The thread's status and its text, from the status file, when its seal holds; else ``None``."""
    try:
        found = json.loads(read_private(paths.status_file(thread), limit=STATUS_LIMIT))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    seal = found.pop(SEAL, None)
    if not isinstance(seal, dict) or seal.get("rekall") != __version__ or seal.get("ended") is not True:
        return None
    text = status_text(found)
    if seal.get("crc32") != zlib.crc32(text.encode("utf-8")) or seal.get("journals") != thread_stamps(paths, thread):
        return None
    return found, text


def not_scheduled(thread: str) -> dict[str, Any]:
    """The status of a thread that has no job (the Node version's word for it, then rekall's)."""
    return {"threadId": thread, "status": "not_scheduled", "state": "not_scheduled"}


def trusted_status(env: Mapping[str, str], thread: str) -> tuple[dict[str, Any], str] | None:
    """The thread's status and its text when what is on disk proves it without a replay: a sealed
    status file (:func:`served_status`), or nothing at all that names the thread in an existing jobs
    directory (no journal, status file or lock, and no Node version's jobs directory to look in);
    else ``None``.

    ``thread`` must be a whole lower-case UUID (anything else is ``None``: the full path resolves
    or refuses it). Raises what :func:`rekall.store.paths.reader_dirs` raises for a directory
    that fails its checks."""
    if not (is_uuid(thread) and thread == thread.lower()):
        return None
    root, lock_root, node_dirs = reader_dirs(env)
    paths = JobPaths(root)
    if os.path.lexists(paths.checkpoint_log(thread)):
        return None  # the full path adds the thread's checkpoint (rekall.store.checkpoint.summary)
    served = served_status(paths, thread)
    if served is not None or node_dirs or not os.path.isdir(root):  # no jobs directory yet: the full path says why
        return served
    if any(os.path.lexists(p) for p in (paths.status_file(thread),
                                         *lock_places(lock_root, legacy_lock_dirs(env, lock_root), paths, thread))):
        return None
    for _ in paths.journal_entries(thread=thread):
        return None
    status = not_scheduled(thread)
    return status, status_text(status)


# --- the history rows of ended jobs ----------------------------------------------------------


#: One ended job's history row: its journal's stamp (``[inode, size, mtime_ns]``), the row's
#: ``createdAt`` and ``jobNumber`` (what rows are sorted by), the time of the journal's first
#: record (what ``--since`` compares) and ``text``, the row as printed inside its list.
Row = namedtuple("Row", "stamp created_at job_number scheduled_at text")


def row_text(row: dict[str, Any]) -> str:
    """``row`` as it appears inside the printed list (indented one level)."""
    return "  " + json.dumps(row, indent=2, ensure_ascii=False, default=str).replace("\n", "\n  ")


def list_text(texts: list[str]) -> str:
    """The printed list of rows given by their :func:`row_text` (what ``json.dumps(rows, indent=2)`` gives)."""
    return "[\n" + ",\n".join(texts) + "\n]" if texts else "[]"


def left_out_note(count: int) -> str:
    """What ``history --json`` says on stderr when ``--limit`` left jobs out (served here or by the CLI)."""
    return f"rekall: {count} older jobs left out; pass --limit 0 for all\n"


class HistoryRows:
    """The rows file: ``{"rekall", "crc32"}``, a newline, then the index and the texts, checked
    together by the CRC. Keys are ``<thread>.<job>``."""

    def __init__(self, rows: dict[str, Row] | None = None) -> None:
        self.rows = rows or {}

    @classmethod
    def load(cls, paths: JobPaths) -> HistoryRows | None:
        """The saved rows, or ``None`` when there are none this version can trust."""
        try:
            raw = read_private(paths.history_rows(), limit=ROWS_LIMIT)
            head, _, body = raw.partition(b"\n")
            header = json.loads(head)
            if header.get("rekall") != __version__ or header.get("crc32") != zlib.crc32(body):
                return None
            index, _, texts = body.partition(b"\n")
            blob = texts.decode("utf-8")
            return cls({key: Row(st, created, number, at, blob[start:end])
                        for key, st, created, number, at, start, end in json.loads(index)})
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def get(self, key: str, current: list[int]) -> Row | None:
        row = self.rows.get(key)
        return row if row is not None and row.stamp == current else None

    def encode(self) -> bytes:
        index, texts, at = [], [], 0
        for key, row in self.rows.items():
            index.append([key, row.stamp, row.created_at, row.job_number, row.scheduled_at, at, at + len(row.text)])
            texts.append(row.text)
            at += len(row.text)
        body = json.dumps(index, separators=(",", ":")).encode() + b"\n" + "".join(texts).encode("utf-8")
        return json.dumps({"rekall": __version__, "crc32": zlib.crc32(body)}).encode() + b"\n" + body


def served_history(paths: JobPaths, thread: str | None = None) -> list[Row] | None:
    """Every job's row, newest first, when each journal on disk is an ended job with a row whose
    stamp still matches (the order ``rekall history`` gives); else ``None``."""
    saved = HistoryRows.load(paths)
    if saved is None:
        return None
    picked = []
    for thread_id, job, entry in paths.journal_entries(thread=thread):  # the full path's order, for equal keys
        try:
            row = saved.get(f"{thread_id}.{job}", job_stamp(paths, thread_id, job, entry.stat(follow_symlinks=False)))
        except FileNotFoundError:
            return None
        if row is None:
            return None
        picked.append(row)
    picked.sort(key=lambda row: (row.created_at, row.job_number), reverse=True)
    return picked
