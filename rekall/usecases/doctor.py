"""``rekall doctor``: is this installation able to compact a thread? One row per concern.

Rows, in the order a problem in one makes the next meaningless:

=================  =========================================================================
``sandbox``        not inside Codex's sandbox (:mod:`rekall.kernel.sandbox`), where nothing
                   reaches Codex's sockets and the rows below describe the sandbox
``codex_home``     ``CODEX_HOME`` (default ``~/.codex``): absolute, and a directory
(platforms)        each platform's own rows, in the registry's order (:mod:`rekall.adapters.registry`);
                   the extension's are these five, then the shared app-server's
                   (:mod:`rekall.adapters.app_server.serving_binary`):
``ipc_endpoint``   the router's socket and its directory: uid, mode, no symlink (the checks
                   of :mod:`rekall.transports.endpoint`); a ``REKALL_PIPE`` test endpoint is
                   named as such, with its filesystem checks skipped
``router``         connect (with the peer-uid check) and ``initialize``
``owner``          only when ``CODEX_THREAD_ID`` is set: owner discovery, follow, first snapshot
``codex_binary``   the extension-bundled ``codex`` (:func:`rekall.adapters.extension.discovery.discover_codex_binary`)
``public_schema``  the app-server schema checks, through the same cache as ``schedule``
``session_hook_*`` the plugin's ``SessionStart(compact)`` hook: ``_installed``, ``_enabled``,
                   ``_trusted`` (``hooks/list`` where an app-server answers, else the files:
                   :mod:`rekall.usecases.hook_doctor`)
``jobs_dir``       the jobs directory: a directory, owned by you, writable (probed the way
                   ``schedule`` writes), no group or other access, no symlinks in it
``recorded_jobs_dirs`` the jobs directories recorded for the hook (:mod:`rekall.store.jobs_dirs`);
                   a corrupt list is AMBER and left as it is
``locks``          every ``<thread>.lock`` (in ``~/.rekall/locks``): held by a live worker,
                   stale, or undecidable
``workers``        running ``rekall worker`` processes (Linux) of this jobs
                   directory whose job does not hold its thread's lock
=================  =========================================================================

Each row is GREEN, AMBER (works, but look) or RED (rekall cannot work, or must not), with a
one-line hint whenever it is not GREEN. The rows of a host the user does not have (no VS Code
extension, no shared app-server) are AMBER, never RED. The report leads with its verdict: which
hosts rekall can serve here (a platform whose answering row is GREEN and none of whose rows is
RED), and the one next step (the first RED row's hint, else the first AMBER row's that is not an
absent host's, else how to start a host). ``rekall doctor`` exits 1 on a RED row or when it can
serve no host. This module makes the checks; ``rekall.surfaces.render.print_report`` prints them
for people.

The doctor does not create or tighten the jobs directory and does not reap the locks of jobs it
can still read (``rekall status`` does that). It writes the schema cache that ``probe`` and
``schedule`` also use and a probe file it removes at once, and it cleans what can never be used
again: the locks of dead workers whose jobs directory no longer exists, and such directories in
the recorded list, so that no command notes them again.
"""

from __future__ import annotations

import os
import stat
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from rekall.kernel.settings import INJECT_HANDOFF, SETTINGS, check_settings
from rekall.kernel.environment import codex_home, env_value
from rekall.kernel.errors import RekallError
from rekall.kernel.ids import is_uuid
from rekall.store import JobStore, Liveness, LockBusy, LockHolder, resolve_jobs_dir
from rekall.store.fsread import O_NOFOLLOW
from rekall.store.processes import worker_processes
from rekall.store.clock import Clock
from rekall.store.overdue import overdue_worker
from rekall.store.paths import inspect_jobs_dir, legacy_lock_dirs, resolve_lock_dir
from rekall.adapters.contract import Level, Row

_RANK: dict[str, int] = {"GREEN": 0, "AMBER": 1, "RED": 2}


#: The next step when no host answers and no row says more.
START_A_HOST = ("start `codex` in a terminal (it starts the shared app-server) or open a chat in the Codex VS Code "
                "extension, then run `rekall doctor` again")


@attrs.frozen
class Report:
    rows: tuple[Row, ...]
    #: Each platform's host words and whether it answers, in the registry's order.
    hosts: tuple[tuple[str, bool], ...] = ()
    #: The rows of the hosts that do not answer: their AMBER is the host's absence, not the next step.
    absent_rows: frozenset[str] = frozenset()

    @property
    def verdict(self) -> Level:
        return max((r.level for r in self.rows), key=_RANK.__getitem__, default="GREEN")

    @property
    def served(self) -> tuple[str, ...]:
        return tuple(host for host, answers in self.hosts if answers)

    @property
    def ok(self) -> bool:
        """No RED row, and at least one host rekall can serve: ``rekall doctor`` exits 0."""
        return self.verdict != "RED" and bool(self.served)

    @property
    def answer(self) -> str:
        """The verdict in words: which hosts rekall can serve here."""
        served, every, red = self.served, [host for host, _ in self.hosts], self.first("RED")
        if red is not None:
            return f"rekall cannot work here ({red.name} is RED)"
        if not served:
            return "rekall can serve neither " + " nor ".join(every) + " here yet"
        if len(served) == len(every) > 1:
            return "rekall can serve both " + " and ".join(served)
        return "rekall can serve " + " and ".join(served) + (
            f" (not {' nor '.join(h for h in every if h not in served)})" if len(every) > len(served) else "")

    @property
    def next_step(self) -> str:
        """The one thing to do next: a RED row's hint, else the first AMBER row's that is not an
        absent host's, else what brings a host up; ``nothing`` when all is well."""
        red = self.first("RED")
        if red is not None:
            return str(red.hint)
        amber = next((r for r in self.rows if r.level == "AMBER" and r.name not in self.absent_rows), None)
        if amber is not None:
            return str(amber.hint)
        return START_A_HOST if not self.served else "nothing: rekall is ready"

    def first(self, level: Level) -> Row | None:
        return next((r for r in self.rows if r.level == level), None)

    def to_json(self) -> dict[str, Any]:
        return {"answer": self.answer, "next": self.next_step, "serves": list(self.served), "verdict": self.verdict,
                "rows": [r.to_json() for r in self.rows]}


# --- REKALL_* settings ---------------------------------------------------------------------


def check_settings_row(env: Mapping[str, str]) -> Row:
    try:
        check_settings(env)
    except RekallError as exc:
        return Row.failed("settings", exc)
    shown = ", ".join(f"{s.name}={s.read(env):g}" for s in SETTINGS)
    return Row.green("settings", shown)


def check_delivery_row(env: Mapping[str, str]) -> Row:
    """How the handoff reaches the model where no continuation carries it, on each platform."""
    from rekall.adapters.owners import all_platforms

    try:
        setting = INJECT_HANDOFF.shown(env)
    except RekallError as exc:
        return Row.failed("handoff_delivery", exc)
    if not INJECT_HANDOFF.read(env):
        return Row.green("handoff_delivery", f"{setting}: where no continuation follows a compaction, the handoff "
                                             "is not injected (the job's status says so)")
    ways = [f"{platform.name}: " + ("injected into the thread's context" if platform.injection_limit is None
                                    else f"not delivered, {platform.injection_limit}")
            for platform in all_platforms(env)]
    return Row.green("handoff_delivery", f"{setting}; where no continuation follows a compaction: " + "; ".join(ways))


# --- Codex's sandbox -------------------------------------------------------------------------


def check_sandbox_row() -> Row:
    from rekall.kernel.sandbox import refuses_socket_send, way_out

    if not refuses_socket_send():
        return Row.green("sandbox", "not inside Codex's sandbox: sockets can be reached")
    return Row("sandbox", "RED", "running inside Codex's sandbox (it refuses send() on a socket): nothing here reaches "
               "Codex's sockets or writes outside the workspace, so the rows below describe the sandbox, not "
               "the installation", way_out("rekall doctor"))


# --- CODEX_HOME ---------------------------------------------------------------------------


def check_codex_home(env: Mapping[str, str]) -> Row:
    value = env_value(env, "CODEX_HOME")
    home = codex_home(env)
    shown = f"CODEX_HOME={value}" if value else f"CODEX_HOME not set; default {home}"
    if not home.is_absolute():
        return Row("codex_home", "RED", f"{shown} is not an absolute path",
                   "set CODEX_HOME to an absolute path, or unset it to use ~/.codex")
    if not home.exists():
        return Row("codex_home", "AMBER", f"{shown} does not exist: Codex has not run with this home",
                   "run `codex` once (or open Codex in VS Code), or set CODEX_HOME to the directory Codex uses "
                   "(default ~/.codex)")
    if not home.is_dir():
        return Row("codex_home", "RED", f"{shown} is not a directory", "point CODEX_HOME at Codex's directory")
    return Row.green("codex_home", f"{shown} (a directory)")


# --- the jobs directory, its locks and workers -------------------------------------------


def check_jobs_dir(env: Mapping[str, str]) -> tuple[Row, Path | None]:
    """The jobs directory row, and the directory when its contents may be inspected.

    Read-only: :func:`rekall.store.paths.ensure_private_dir` creates and tightens it when a
    job is scheduled; here we only say what it will find. Writability is checked the way
    ``schedule`` uses the directory: by creating (and removing) a private file in it, or, when
    it does not exist yet, in the folder it would be created in.
    """
    try:
        root = resolve_jobs_dir(env)
    except RekallError as exc:
        return Row.failed("jobs_dir", exc), None
    if not os.path.lexists(root):
        parent = _nearest_existing(root)
        problem = _not_writable(parent)
        if problem:
            return Row("jobs_dir", "RED", f"{root} does not exist, and {parent} cannot be written ({problem})",
                       "set REKALL_JOBS_DIR to a folder you can write"), None
        return Row.green("jobs_dir", f"{root} does not exist yet; it is created 0700 at the first schedule"), None
    try:
        st = inspect_jobs_dir(root)  # the store's own rule
    except RekallError as exc:
        return Row.failed("jobs_dir", exc), None
    problem = _not_writable(root)
    if problem:
        return Row("jobs_dir", "RED", f"{root} cannot be written ({problem}): schedule would fail",
                   "make it writable (or remount its filesystem read-write), or set REKALL_JOBS_DIR to a "
                   "folder you can write"), None
    if sys.platform == "win32":
        return Row.green("jobs_dir", f"{root} (writable; POSIX modes do not apply on Windows)"), root
    mode = stat.S_IMODE(st.st_mode)
    entries = list(_entries(root))
    links = sorted(p.name for p in entries if p.is_symlink())
    exposed = sorted(p.name for p in entries if not p.is_symlink() and _mode_bits(p) & 0o077)
    if links:  # chmod follows symlinks: never advise one on them
        return Row("jobs_dir", "AMBER", f"{root} holds {len(links)} symbolic link(s), which rekall never writes: "
                   f"{', '.join(links[:3])}{' …' if len(links) > 3 else ''}",
                   f"move them out of {root}; do not chmod them (chmod would change what they point to)"), root
    if mode & 0o077:
        return Row("jobs_dir", "AMBER", f"{root} has mode {mode:04o}: group or others can list your jobs",
                   f"run: chmod 700 {root}  (rekall also tightens it the next time it schedules)"), root
    if exposed:
        named = " ".join(str(root / name) for name in exposed[:20])
        return Row("jobs_dir", "AMBER", f"{root} is 0700 but {len(exposed)} file(s) are readable by group or "
                   f"others: {', '.join(exposed[:3])}{' …' if len(exposed) > 3 else ''}",
                   f"run: chmod 600 -- {named}{' …' if len(exposed) > 20 else ''}"), root
    return Row.green("jobs_dir", f"{root}: mode {mode:04o}, owned by you, writable, files private"), root


def _nearest_existing(path: Path) -> Path:
    for candidate in path.parents:
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor)


def _not_writable(directory: Path) -> str | None:
    """Why a private file cannot be created in ``directory`` (as the store creates one), or ``None``.

    The probe file is created with ``O_EXCL`` under a random name and removed at once.
    """
    probe = directory / f".rekall-doctor-{uuid.uuid4().hex}.tmp"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW, 0o600)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(probe)
    return None


def _mode_bits(path: Path) -> int:
    try:
        return stat.S_IMODE(path.lstat().st_mode)
    except OSError:
        return 0  # gone meanwhile (a worker's atomic replace)


def _entries(root: Path) -> Iterator[Path]:
    try:
        yield from root.iterdir()
    except OSError:
        return


def check_locks(root: Path | None, lock_root: Path, legacy: tuple[Path, ...] = ()) -> Row:
    if not os.path.lexists(lock_root) and root is None:
        return Row.green("locks", "no lock directory and no jobs directory yet, so no locks")
    if os.path.lexists(lock_root):
        try:
            inspect_jobs_dir(lock_root, "lock directory")
        except RekallError as exc:
            return Row.failed("locks", exc)
    # not JobStore.open: that would create or tighten the directories
    store = JobStore(root or lock_root, lock_root=lock_root, legacy_lock_roots=legacy)
    # Locks of an earlier rekall: under HOME, and in the jobs directory.
    places = [lock_root, *legacy, *([root] if root is not None else [])]
    threads = sorted({p.name[: -len(".lock")] for place in places for p in _entries(place)
                      if p.name.endswith(".lock") and is_uuid(p.name[: -len(".lock")])})
    live, stale, unknown, unreadable, cleaned = [], [], [], [], []
    for thread in threads:
        try:
            holder = store.lock_holder(thread)
        except LockBusy as exc:
            unreadable.append(exc.message)
            continue
        if holder is None:
            continue  # released meanwhile
        # The same rule `rekall status` applies: the lock's holder or the job's recorded worker.
        verdict = store.lock_liveness(thread)
        if verdict is Liveness.DEAD and _of_a_vanished_jobs_dir(store, thread, holder):
            cleaned.append(thread)
            continue
        who = f"thread {thread} (job {holder.job_id}, pid {holder.pid} on {holder.host or 'an unknown host'})"
        {Liveness.ALIVE: live, Liveness.DEAD: stale}.get(verdict, unknown).append((thread, who))
    removed = (f"; removed {len(cleaned)} stale lock(s) of jobs directories that no longer exist"
               if cleaned else "")
    if not (stale or unknown or unreadable):
        return Row.green("locks", (f"{len(live)} lock(s), each held by a live worker" if live else "no locks")
                         + removed)
    problems = ([f"stale (its worker is gone): {who}" for _, who in stale]
                + [f"undecidable (another host, or no identity): {who}" for _, who in unknown] + unreadable)
    if stale:
        others = " (likewise for the others)" if len(stale) > 1 else ""
        hint = (f"run `rekall status {stale[0][0]}`: it records the job as failed (worker_lost) and removes "
                f"the lock{others}")
    else:
        hint = ("if no rekall worker runs for that thread, inspect `rekall explain JOB` and move the lock aside; "
                "rekall never removes a lock it cannot prove stale")
    return Row("locks", "AMBER", f"{len(threads) - len(cleaned)} lock(s): " + "; ".join(problems) + removed, hint)


def _of_a_vanished_jobs_dir(store: JobStore, thread: str, holder: LockHolder) -> bool:
    """Remove the dead worker's lock when the jobs directory it names is gone (nothing can ever
    read or release it there); ``True`` when it was removed."""
    if holder.jobs_dir is None or os.path.lexists(holder.jobs_dir):
        return False
    with store.locks.guarded():
        found = store.locks.find(thread)
        if found is None or found[1] != holder or store.lock_liveness(thread) is not Liveness.DEAD:
            return False
        store.locks.remove(found[0])
    return True


def check_recorded_jobs_dirs() -> Row:
    """The list the SessionStart hook reads (:mod:`rekall.store.jobs_dirs`), without the
    directories that no longer exist (removed here, so that nothing notes them again)."""
    from rekall.store.jobs_dirs import forget_vanished_jobs_dirs, jobs_dirs_file, read_jobs_dirs

    try:
        gone = forget_vanished_jobs_dirs()
        kept = read_jobs_dirs()
    except RekallError as exc:
        return Row("recorded_jobs_dirs", "AMBER", exc.message, exc.hint or "see the detail")
    except OSError as exc:
        return Row("recorded_jobs_dirs", "AMBER", f"{jobs_dirs_file()} cannot be read or written: "
                   f"{exc.strerror or exc}", "check the file's owner and mode (0600)")
    removed = f"; removed {len(gone)} that no longer exist" if gone else ""
    return Row.green("recorded_jobs_dirs", f"{len(kept)} jobs directory(ies) recorded for the SessionStart hook "
                                           f"in {jobs_dirs_file()}{removed}")


def check_workers(root: Path | None, lock_root: Path, legacy: tuple[Path, ...] = (), clock: Clock | None = None) -> Row:
    if not sys.platform.startswith("linux"):  # the scan runs elsewhere too, but is only tested on Linux
        return Row("workers", "AMBER", f"not checked on {sys.platform}",
                   "look for `rekall worker` processes with ps; each should hold its thread's lock")
    if root is None:
        return Row.green("workers", "no jobs directory yet, so no workers")
    store = JobStore(root, lock_root=lock_root, legacy_lock_roots=legacy, clock=clock)
    ours = [w for w in worker_processes() if w.jobs_dir == root]
    orphans, late = [], []
    for worker in ours:
        try:
            job = store.latest(worker.thread_id)
        except RekallError:
            job = None  # an unreadable journal proves nothing either way
        if job is not None and job.job_id == worker.job_id and (problem := overdue_worker(store, job)):
            late.append(f"thread {worker.thread_id}, job {worker.job_id}: {problem['workerProblem']}")
        try:
            holder = store.lock_holder(worker.thread_id)
        except LockBusy:
            holder = None
        if holder is not None and holder.job_id == worker.job_id:
            continue
        if job is not None and job.job_id == worker.job_id and job.state.terminal:
            continue  # it released the lock after its terminal state and is exiting
        lock_note = f"the lock names job {holder.job_id}" if holder else "the thread has no lock"
        orphans.append((worker, lock_note))
    if late:
        return Row("workers", "AMBER", f"{len(late)} worker(s) past their deadline: " + "; ".join(late),
                   "a stopped worker resumes with `kill -CONT PID` and records timed_out itself; `kill PID` ends one")
    if not orphans:
        return Row.green("workers", f"{len(ours)} worker(s) running, each holding its thread's lock" if ours
                         else "no rekall workers running")
    listed = "; ".join(f"pid {w.pid} (thread {w.thread_id}, job {w.job_id}; {lock_note})" for w, lock_note in orphans)
    return Row("workers", "AMBER", f"{len(orphans)} orphaned worker(s): {listed}",
               f"each stops at its deadline; to stop one now: kill {orphans[0][0].pid}")


# --- the whole report --------------------------------------------------------------------


async def diagnose(env: Mapping[str, str] | None = None) -> Report:
    env = os.environ if env is None else env
    rows = [check_sandbox_row(), check_settings_row(env), check_delivery_row(env), check_codex_home(env)]
    from rekall.adapters.owners import all_platforms

    # Each platform's rows, in the registry's order (the extension's: endpoint, protocol, router,
    # owner, binary, schema; the shared app-server's), each as it reads beside the others'.
    platforms = all_platforms(env)
    by_platform = [await platform.diagnose() for platform in platforms]
    hosts, absent_rows = [], set()
    for index, own in enumerate(by_platform):
        shown = beside_the_others(own, [row for i, other in enumerate(by_platform) if i != index for row in other])
        answers = (any("answers" in row.shows for row in own if row.level == "GREEN")
                   and all(row.level != "RED" for row in shown))
        hosts.append((platforms[index].host, answers))
        if not answers:
            absent_rows.update(row.name for row in shown)
        rows += shown
    from rekall.usecases.hook_doctor import checkpoint_plan_row, hook_rows, managed_row

    rows += [*await hook_rows(env), managed_row(), checkpoint_plan_row(env)]
    jobs_row, root = check_jobs_dir(env)
    if jobs_row.level == "RED":
        rows += [jobs_row, *(Row.not_checked(name, "the jobs directory is unusable", "fix the jobs_dir row first")
                             for name in ("recorded_jobs_dirs", "locks", "workers"))]
    else:
        lock_root = resolve_lock_dir()
        legacy = legacy_lock_dirs(env, lock_root)
        rows += [jobs_row, check_recorded_jobs_dirs(), check_locks(root, lock_root, legacy),
                 check_workers(root, lock_root, legacy)]
    return Report(tuple(rows), tuple(hosts), frozenset(absent_rows))


def beside_the_others(own: list[Row], others: list[Row]) -> list[Row]:
    """A platform's rows, each replaced by what it says it becomes (``Row.unless``) when another
    platform's GREEN rows show that fact (it serves the thread, or it answers)."""
    shown = {fact for row in others if row.level == "GREEN" for fact in row.shows}
    return [next((instead for fact, instead in row.unless.items() if fact in shown), row) for row in own]
