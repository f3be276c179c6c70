"""The jobs directories this account has used, kept where any of its processes finds them.

Codex runs hooks in its own environment (under the app-server daemon a short one), so the
plugin's hook may not see the ``CODEX_HOME`` or ``REKALL_JOBS_DIR`` a job was scheduled with. The
store therefore records each jobs directory it opens for writing in
``<account home>/.rekall/jobs-dirs.json`` (the account's home from the password database, as for
the lock directory: no variable moves it), and the hook looks there too. Directories that no
longer exist are dropped whenever the list is written; a process whose environment sets
:data:`UNRECORDED` (``rekall demo``, whose folder is temporary) records nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rekall.store import paths
from rekall.kernel.errors import StoreError

#: Set (to anything) in the environment of a process whose jobs directory must not be recorded.
UNRECORDED = "REKALL_JOBS_DIR_UNRECORDED"

#: The list is read up to this size and holds at most this many directories (the newest kept).
_LIMIT = 256 * 1024
_KEPT = 64


def jobs_dirs_file() -> Path:
    # Looked up through paths, as the lock directory is: one seam for the tests.
    return paths.account_home() / ".rekall" / "jobs-dirs.json"  # type: ignore[attr-defined]


def known_jobs_dirs() -> list[Path]:
    """The recorded jobs directories, newest first, for a reader (the hook): those of a damaged
    list that are still absolute paths; none when the file is missing or unreadable (one that is
    not a regular file, such as a FIFO planted there, is refused at once and named in a warning)."""
    return _read()[0]


def read_jobs_dirs() -> list[Path]:
    """The recorded jobs directories, newest first; none when the file does not exist.

    Raises :class:`StoreError` when the file is not a list of absolute paths: it is reported,
    never replaced, since replacing it would drop the directories the hook looks in."""
    found, problem = _read()
    if problem is not None:
        raise _corrupt(jobs_dirs_file(), problem)
    return found


def _read() -> tuple[list[Path], str | None]:
    """The absolute paths the file lists, and what is wrong with its content (``None``: nothing). A file
    that cannot be read as one (a FIFO, a directory) lists nothing: it holds no list to lose."""
    from rekall.store.fsread import read_private

    path = jobs_dirs_file()
    try:
        found = json.loads(read_private(path, limit=_LIMIT))
    except FileNotFoundError:
        return [], None
    except ValueError as exc:
        return [], f"not JSON ({exc})"
    except OSError as exc:
        import logging  # here, not at the top: the SessionStart hook's fast path reads this file

        logging.getLogger("rekall.store").warning("the list of jobs directories %s is ignored: %s", path,
                                                  exc.strerror or exc)
        return [], None
    listed = found if isinstance(found, list) else []
    absolute = [Path(p) for p in listed if isinstance(p, str) and os.path.isabs(p)]
    return absolute, None if isinstance(found, list) and len(absolute) == len(found) else "not a list of absolute paths"


def _corrupt(target: Path, why: str) -> StoreError:
    return StoreError(f"{target} is corrupt: {why}; rekall leaves it as it is",
                      hint=f"fix it, or move it aside (mv {target} {target}.bad): the SessionStart hook "
                           "finds jobs directories other than the default only through it")


def remember_jobs_dir(root: Path) -> None:
    """Record ``root`` as the newest entry, dropping directories that no longer exist (written only
    when that changes the list; atomic, 0600). A corrupt list raises and is left as it is."""
    known = read_jobs_dirs()
    entries = [root, *(p for p in known if p != root and os.path.isdir(p))][:_KEPT]
    if entries != known:
        _write(entries)


def forget_vanished_jobs_dirs() -> list[Path]:
    """Drop the recorded directories that no longer exist; returns them (a corrupt list raises)."""
    known = read_jobs_dirs()
    kept = [p for p in known if os.path.isdir(p)]
    if kept != known:
        _write(kept)
    return [p for p in known if p not in kept]


def _write(entries: list[Path]) -> None:
    target = jobs_dirs_file()
    paths.ensure_private_dir(target.parent, "rekall folder")
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, json.dumps([str(p) for p in entries], ensure_ascii=False).encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, target)
