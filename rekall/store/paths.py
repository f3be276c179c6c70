"""Where the store keeps things: the jobs directory and the name of every file in it.

Per thread: ``<thread>.json`` (status, a derived view), ``<thread>.lock`` (the job lock).
Per job: ``<thread>.<job>.journal.jsonl`` (the source of truth), ``.handoff.json`` (the
immutable handoff record), ``.cancel`` (the cancel marker), ``.log`` (the worker's log).
``.guard`` serialises short critical sections (lock inspection, take-over) between
processes. Ids are validated UUIDs before they reach a file name.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from rekall.config import codex_home, env_value
from rekall.errors import StoreError

log = logging.getLogger("rekall.store")

JOURNAL_SUFFIX = ".journal.jsonl"
GUARD_NAME = ".guard"


def resolve_jobs_dir(env: Mapping[str, str]) -> Path:
    """``REKALL_JOBS_DIR``, else ``CONTEXT_COMPACT_JOBS_DIR``, else an existing legacy
    ``$CODEX_HOME/tools/context-compact/jobs``, else ``$CODEX_HOME/tools/rekall/jobs``.

    ``CODEX_HOME`` defaults to ``~/.codex``; an empty variable counts as unset.
    """
    explicit = env_value(env, "REKALL_JOBS_DIR", "CONTEXT_COMPACT_JOBS_DIR")
    if explicit is not None:
        return Path(explicit).expanduser().absolute()
    home = codex_home(env).expanduser().absolute()
    legacy = home / "tools" / "context-compact" / "jobs"
    if legacy.is_dir():  # reuse the Node version's directory so its locks and history survive
        return legacy
    return home / "tools" / "rekall" / "jobs"


def _make_private_dirs(path: Path) -> None:
    """Create ``path`` and any missing parents 0700 (``mkdir(parents=True)`` gives parents the umask)."""
    missing = []
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            break
        missing.append(candidate)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue  # created meanwhile by another rekall process; the leaf is checked below
        os.chmod(directory, 0o700)  # exactly 0700, whatever the umask


def inspect_jobs_dir(path: Path) -> os.stat_result:
    """Refuse an existing jobs directory that is a symlink, not a directory, or someone else's.

    Changes nothing, so `rekall doctor` can apply the same rule. Group and other bits are
    not refused here: :func:`ensure_private_dir` tightens them.
    """
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise StoreError(f"cannot inspect the jobs directory {path}: {exc.strerror or exc}",
                         hint="set REKALL_JOBS_DIR to a directory you can write") from None
    if stat.S_ISLNK(st.st_mode):
        raise StoreError(f"the jobs directory {path} is a symbolic link; refusing to follow it",
                         hint="point REKALL_JOBS_DIR at the real directory")
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"the jobs directory {path} is not a directory", hint="set REKALL_JOBS_DIR elsewhere")
    if sys.platform != "win32" and st.st_uid != os.geteuid():
        raise StoreError(f"the jobs directory {path} belongs to uid {st.st_uid}, not to you; refusing to use it",
                         hint="set REKALL_JOBS_DIR to a private directory of your own")
    return st


def ensure_private_dir(path: Path) -> str | None:
    """Create ``path`` 0700, or check an existing one. Returns a report when it fixed something.

    A directory owned by someone else is refused. One of ours that group or others can
    reach (the Node version created its directory with default permissions) is tightened to
    0700 and reported, since refusing would strand existing jobs.
    """
    try:
        _make_private_dirs(path)
    except OSError as exc:
        raise StoreError(f"cannot create the jobs directory {path}: {exc.strerror or exc}",
                         hint="set REKALL_JOBS_DIR to a directory you can write") from None
    st = inspect_jobs_dir(path)
    if sys.platform == "win32":  # POSIX modes mean nothing there; the profile directory is private
        return None
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
        report = f"tightened the jobs directory {path} from {stat.S_IMODE(st.st_mode):04o} to 0700"
        log.warning(report)
        return report
    return None


class Layout:
    """File names in one jobs directory: the only place they are spelled."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def status(self, thread: str) -> Path:
        return self.root / f"{thread}.json"

    def lock(self, thread: str) -> Path:
        return self.root / f"{thread}.lock"

    def guard(self) -> Path:
        return self.root / GUARD_NAME

    def journal(self, thread: str, job: str) -> Path:
        return self.root / f"{thread}.{job}{JOURNAL_SUFFIX}"

    def handoff(self, thread: str, job: str) -> Path:
        return self.root / f"{thread}.{job}.handoff.json"

    def cancel(self, thread: str, job: str) -> Path:
        return self.root / f"{thread}.{job}.cancel"

    def log(self, thread: str, job: str) -> Path:
        return self.root / f"{thread}.{job}.log"

    def journals(self, thread: str | None = None, job: str | None = None) -> list[tuple[str, str]]:
        """``(thread, job)`` of every journal, optionally only one thread's or one job's."""
        from rekall.ids import is_uuid

        found = []
        for name in os.listdir(self.root):
            if not name.endswith(JOURNAL_SUFFIX):
                continue
            t, _, j = name[: -len(JOURNAL_SUFFIX)].partition(".")
            if not (is_uuid(t) and is_uuid(j)) or (thread and t != thread) or (job and j != job):
                continue
            found.append((t, j))
        return found
