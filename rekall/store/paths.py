"""Where the store keeps things: the jobs directory, the lock directory, and every file name.

Jobs directory, per thread: ``<thread>.json`` (status, a derived view); per job:
``<thread>.<job>.journal.jsonl`` (the source of truth), ``.handoff.json`` (the immutable
handoff record), ``.delivery`` (who delivers the handoff), ``.cancel`` (the cancel marker), ``.log`` (the worker's log). Per
thread's checkpoint (:mod:`rekall.store.checkpoint`): ``<thread>.checkpoints.jsonl`` (its history, the
source of truth), ``<thread>.checkpoint.<sha256>.json`` (each sealed record), and
``<thread>.compaction-<digest>.delivery`` (who delivered it after one compaction). For all jobs:
``.history-rows`` (the history rows of ended jobs, a derived view).

Lock directory, per thread: ``<thread>.lock`` (one job per thread), and ``.guard``, which
serialises short critical sections (lock inspection, take-over) between processes. The lock
directory is derived from the account alone, ``.rekall/locks`` in the home directory the password
database records (:func:`rekall.kernel.environment.account_home`), never from ``HOME``, ``CODEX_HOME``,
``TMPDIR`` or ``XDG_*``: Codex starts MCP servers with few variables, and a terminal, a script
or a service may set ``HOME`` differently, so two processes can resolve different jobs
directories and homes, and a lock kept under either would let one thread get two jobs. The
folder earlier rekall releases used, ``$HOME/.rekall/locks``, is still read: a lock found there
is honoured and released, never created.

Ids are validated UUIDs before they reach a file name.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from rekall.kernel.errors import StoreError
from rekall.kernel.environment import absolute_codex_home, absolute_path, account_home, env_value, expand_home
from rekall.kernel.ids import UUID_PATTERN

JOURNAL_SUFFIX = ".journal.jsonl"
#: The job's delivery claim (:mod:`rekall.store.delivery`), next to its journal.
DELIVERY_SUFFIX = ".delivery"
#: A thread's checkpoint history (:mod:`rekall.store.checkpoint`).
CHECKPOINT_LOG_SUFFIX = ".checkpoints.jsonl"
_JOURNAL_NAME = re.compile(rf"({UUID_PATTERN})\.({UUID_PATTERN}){re.escape(JOURNAL_SUFFIX)}", re.IGNORECASE)
_CHECKPOINT_FILE = re.compile(rf"{UUID_PATTERN}(?:{re.escape(CHECKPOINT_LOG_SUFFIX)}|\.checkpoint\.[0-9a-f]{{64}}\.json"
                              rf"|\.compaction-[0-9a-f]{{64}}{re.escape(DELIVERY_SUFFIX)})", re.IGNORECASE)
GUARD_NAME = ".guard"


def resolve_jobs_dir(env: Mapping[str, str]) -> Path:
    """``REKALL_JOBS_DIR``, else ``$CODEX_HOME/tools/rekall/jobs`` (``CODEX_HOME`` defaults to ``~/.codex``).

    rekall writes only to its own directory: the Node version's (``CONTEXT_COMPACT_JOBS_DIR``,
    ``$CODEX_HOME/tools/context-compact/jobs``) is only read, see :func:`node_jobs_dirs`. An
    empty variable counts as unset; a relative path is refused.
    """
    explicit = env_value(env, "REKALL_JOBS_DIR")
    if explicit is not None:
        return absolute_path(env, "REKALL_JOBS_DIR", expand_home(explicit, env))
    home = absolute_codex_home(env)
    if home.exists() and not home.is_dir():  # the fix is CODEX_HOME, not a jobs directory elsewhere
        raise StoreError(f"Codex's folder {home} (CODEX_HOME) is not a directory, so it cannot hold the jobs",
                         hint="point CODEX_HOME at the folder the Codex extension uses, or unset it for ~/.codex")
    return home / "tools" / "rekall" / "jobs"


def node_jobs_dirs(env: Mapping[str, str], own: Path) -> list[Path]:
    """The Node version's jobs directories that exist (its variable, then its default), not ``own``."""
    candidates = []
    explicit = env_value(env, "CONTEXT_COMPACT_JOBS_DIR")
    if explicit is not None and os.path.isabs(expand_home(explicit, env)):
        candidates.append(expand_home(explicit, env))
    candidates.append(absolute_codex_home(env) / "tools" / "context-compact" / "jobs")
    found: list[Path] = []
    for path in candidates:
        if path != own and path not in found and path.is_dir() and not path.is_symlink():
            found.append(path)
    return found


_LOCKS = Path(".rekall") / "locks"


def resolve_lock_dir() -> Path:
    """``<account home>/.rekall/locks``: the same folder for every process of this account,
    whatever its environment (see the module doc)."""
    return account_home() / _LOCKS


def legacy_lock_dirs(env: Mapping[str, str], lock_root: Path) -> tuple[Path, ...]:
    """Where earlier releases kept the locks, ``$HOME/.rekall/locks``, when that is another folder
    than ``lock_root``: read, honoured and released there, never created."""
    home = env_value(env, "HOME")
    if home is None or not os.path.isabs(home):
        return ()
    legacy = Path(home) / _LOCKS
    return () if legacy == lock_root else (legacy,)


def reader_dirs(env: Mapping[str, str]) -> tuple[Path, Path, list[Path]]:
    """The jobs directory, the lock directory and the Node version's, as a reader takes them:
    created and chmodded never, and each one that exists checked (:func:`inspect_jobs_dir`)."""
    root, lock_root = resolve_jobs_dir(env), resolve_lock_dir()
    for path, what in ((root, "jobs directory"), (lock_root, "lock directory")):
        if os.path.lexists(path):
            inspect_jobs_dir(path, what)
    return root, lock_root, node_jobs_dirs(env, root)


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


def inspect_jobs_dir(path: Path, what: str = "jobs directory") -> os.stat_result:
    """Refuse an existing directory that is a symlink, not a directory, or someone else's.

    Changes nothing, so readers and `rekall doctor` apply the same rule. Group and other bits
    are not refused here: :func:`ensure_private_dir` tightens them when a job is scheduled.
    """
    fix = "set REKALL_JOBS_DIR to a private directory of your own" if what == "jobs directory" \
        else f"move {path} aside; rekall recreates it 0700"
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise StoreError(f"cannot inspect the {what} {path}: {exc.strerror or exc}", hint=fix) from exc
    if stat.S_ISLNK(st.st_mode):
        raise StoreError(f"the {what} {path} is a symbolic link; refusing to follow it", hint=fix)
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"the {what} {path} is not a directory", hint=fix)
    if sys.platform != "win32" and st.st_uid != os.geteuid():
        raise StoreError(f"the {what} {path} belongs to uid {st.st_uid}, not to you; refusing to use it", hint=fix)
    return st


def ensure_private_dir(path: Path, what: str = "jobs directory") -> str | None:
    """Create ``path`` 0700, or check an existing one. Returns a report when it fixed something.

    A directory owned by someone else is refused. One of ours that group or others can
    reach (the Node version created its directory with default permissions) is tightened to
    0700 and reported, since refusing would strand existing jobs.
    """
    try:
        _make_private_dirs(path)
    except OSError as exc:
        raise StoreError(f"cannot create the {what} {path}: {exc.strerror or exc}",
                         hint="set REKALL_JOBS_DIR to a directory you can write" if what == "jobs directory"
                         else f"make {path.parent} writable") from exc
    st = inspect_jobs_dir(path, what)
    if sys.platform == "win32":  # POSIX modes mean nothing there; the profile directory is private
        return None
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
        report = f"tightened the {what} {path} from {stat.S_IMODE(st.st_mode):04o} to 0700"
        import logging  # here, not at the top: the fast read paths import this module

        logging.getLogger("rekall.store").warning(report)
        return report
    return None


class JobPaths:
    """File names in one jobs directory: the only place they are spelled."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def status_file(self, thread: str) -> Path:
        return self.root / f"{thread}.json"

    def history_rows(self) -> Path:
        """The cached ``rekall history`` rows of ended jobs (a derived view: :mod:`rekall.store.views`)."""
        return self.root / ".history-rows"

    def legacy_lock(self, thread: str) -> Path:
        """Where rekall before the lock directory kept the lock: still honoured, never created."""
        return self.root / f"{thread}.lock"

    def journal(self, thread: str, job: str) -> Path:
        return self.root / f"{thread}.{job}{JOURNAL_SUFFIX}"

    def handoff(self, thread: str, job: str) -> Path:
        return self.root / f"{thread}.{job}.handoff.json"

    def delivery(self, thread: str, job: str) -> Path:
        """Who delivers the job's handoff after its compaction (created once, exclusively)."""
        return self.root / f"{thread}.{job}{DELIVERY_SUFFIX}"

    def compaction_delivery(self, thread: str, compaction: str) -> Path:
        """Who delivers the thread's checkpoint after one compaction (``compaction``: a hex digest naming it)."""
        return self.root / f"{thread}.compaction-{compaction}{DELIVERY_SUFFIX}"

    def checkpoint_log(self, thread: str) -> Path:
        """The thread's checkpoint history: one line per save or clear, appended."""
        return self.root / f"{thread}{CHECKPOINT_LOG_SUFFIX}"

    def checkpoint(self, thread: str, sha256: str) -> Path:
        """One sealed checkpoint record of the thread, named by the SHA-256 of its bytes."""
        return self.root / f"{thread}.checkpoint.{sha256}.json"

    def checkpoint_files(self, thread: str) -> list[Path]:
        """Every checkpoint file of the thread: its history, its records and its compactions' claims."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return sorted(self.root / name for name in names if _CHECKPOINT_FILE.fullmatch(name)
                      and name.startswith(thread))

    def checkpoint_threads(self) -> list[str]:
        """The threads that have a checkpoint history here."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return sorted(name.removesuffix(CHECKPOINT_LOG_SUFFIX) for name in names
                      if name.endswith(CHECKPOINT_LOG_SUFFIX) and _CHECKPOINT_FILE.fullmatch(name))

    def cancel(self, thread: str, job: str) -> Path:
        return self.root / f"{thread}.{job}.cancel"

    def log(self, thread: str, job: str) -> Path:
        return self.root / f"{thread}.{job}.log"

    def journals(self, thread: str | None = None, job: str | None = None) -> list[tuple[str, str]]:
        """``(thread, job)`` of every journal, optionally only one thread's or one job's."""
        return [(t, j) for t, j, _ in self.journal_entries(thread, job)]

    def journal_entries(self, thread: str | None = None,
                        job: str | None = None) -> Iterator[tuple[str, str, os.DirEntry[str]]]:
        """:meth:`journals`, each with its directory entry (whose ``stat`` readers use), in the
        directory's order."""
        try:
            entries = os.scandir(self.root)
        except FileNotFoundError:
            return  # no jobs directory yet: a reader never creates it
        with entries:
            for entry in entries:
                name = entry.name
                if (thread and not name.startswith(thread)) or (job and job not in name):
                    continue  # the cheap comparisons first: a thread's jobs are looked up among many
                found = _JOURNAL_NAME.fullmatch(name)
                if found and (not thread or found[1] == thread) and (not job or found[2] == job):
                    yield found[1], found[2], entry


class LockPaths:
    """File names in the lock directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def lock(self, thread: str) -> Path:
        return self.root / f"{thread}.lock"

    def guard(self) -> Path:
        return self.root / GUARD_NAME


def lock_places(lock_root: Path, legacy_roots: tuple[Path, ...], jobs: JobPaths, thread: str) -> tuple[Path, ...]:
    """Where the thread's lock may be: the lock directory, then (written by an earlier rekall,
    whose worker may still run) the earlier lock directories and the jobs directory."""
    return (LockPaths(lock_root).lock(thread), *(LockPaths(d).lock(thread) for d in legacy_roots),
            jobs.legacy_lock(thread))
