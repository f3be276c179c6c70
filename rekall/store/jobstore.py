"""The job store: one private directory holding every job's journal, handoff, lock and status.

Scheduling and take-over follow one protocol, always under the store's guard (a kernel
lock, see ``rekall.store.guard``), so that two processes never judge the same lock:

The lock lives in the user's lock directory (``~/.rekall/locks``, see ``rekall.store.paths``),
not in the jobs directory, so that two processes resolving different jobs directories still
share one lock per thread; it names the jobs directory of its job.

1. Read ``<thread>.lock``. If its job is still run by a live process, the thread is
   already scheduled: return that job. If the owner is provably dead (same host; PID gone
   or reused), the job becomes ``failed`` with ``errorCode`` ``worker_lost`` (its
   ``outcomeMayBeUnknown`` per the outcome rule) and the lock is removed. If liveness
   cannot be proven either way (another host, a lock without a PID), refuse: a lock is
   never removed on a guess.
2. Create the lock (complete, exclusively), the handoff record (exclusively), then the
   journal's first record. If any of these fails, everything created so far is removed,
   so there is never a lock without a job.

The journal is the truth; the status file is rebuilt from it whenever it is missing,
stale or unreadable.

Readers (``JobStore.open_reader``: status, history, explain) never create or chmod a
folder. Inside an existing jobs directory they record a provably dead worker first (the
``worker_lost`` rule), so every reader tells the truth; when even that record cannot be
written (a full disk), they report the job from what can be proven, without crashing.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from rekall.errors import InvalidInput, StoreError
from rekall.ids import job_id as valid_job, thread_id as valid_thread
from rekall.states import SCHEDULE, JobState
from rekall.states.rules import outcome_may_be_unknown
from rekall.store.clock import Clock, SystemClock
from rekall.store.errors import JournalCorrupt, LockBusy, StatusCorrupt, UnknownJob
from rekall.store.fsio import LOCK_LIMIT, STATUS_LIMIT, FileOps, TooLarge, read_private
from rekall.store.guard import guarded
from rekall.store.handoff import record_bytes, sha256_hex, validate_handoff, verify_record
from rekall.store.journal import JournalWriter, first_record, scan_journal
from rekall.store.lifecycle import Lifecycle
from rekall.store.node import refuse_if_node_job_runs
from rekall.store.owner import Liveness, LockOwner, liveness, process_start_time, this_host
from rekall.store.paths import (
    Layout,
    LockLayout,
    ensure_private_dir,
    inspect_jobs_dir,
    node_jobs_dirs,
    resolve_jobs_dir,
    resolve_lock_dir,
)
from rekall.store.replay import HISTORY_LIMIT, Replay, derive_status, history_before, replay_file, replay_scan
from rekall.store.wire import TransitionRecord, decode_lock, encode_lock, encode_record

log = logging.getLogger("rekall.store")

#: Status fields the store owns; ``extra`` may not overwrite them.
_RESERVED = frozenset({
    "jobId", "threadId", "status", "state", "createdAt", "jobNumber", "userFingerprint", "resume", "handoffPath",
    "handoffSha256", "errorCode", "outcomeMayBeUnknown", "updatedAt", "journalSeq", "journalPath", "logPath",
    "history",
})


@attrs.frozen
class CreatedJob:
    job_id: str
    status: dict[str, Any]
    #: True when a live job already held the thread: ``job_id`` and ``status`` are that job's.
    already_scheduled: bool


def _checked_extra(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    if extra is None:
        return {}
    clash = sorted(set(extra) & _RESERVED)
    if clash:
        raise InvalidInput(f"extra status field {clash[0]} is reserved by the store", field=clash[0],
                           hint="rename the field")
    try:
        return json.loads(json.dumps(dict(extra), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"extra status fields must be JSON: {exc}", field="extra", hint="fix the caller") from None


class JobStore:
    def __init__(self, root: Path, *, lock_root: Path | None = None, clock: Clock | None = None,
                 fs: FileOps | None = None, permission_report: str | None = None,
                 node_dirs: tuple[Path, ...] = ()) -> None:
        self.root = root
        self.layout = Layout(root)
        self.lock_root = lock_root if lock_root is not None else resolve_lock_dir(os.environ)
        self.locks = LockLayout(self.lock_root)
        self.clock: Clock = clock or SystemClock()
        self.fs = fs or FileOps()
        self.host = this_host()
        #: Set when opening had to tighten the directory's permissions (see ``ensure_private_dir``).
        self.permission_report = permission_report
        #: The Node version's jobs directories, read only (``rekall.store.node``).
        self.node_dirs = node_dirs
        #: Jobs whose dead worker could not be recorded (the journal refused the write): why.
        self._unrecorded: dict[str, str] = {}

    @classmethod
    def open(cls, env: Mapping[str, str] | None = None, *, clock: Clock | None = None,
             fs: FileOps | None = None) -> JobStore:
        """The store for scheduling and driving jobs: the jobs and lock directories, created 0700 if needed."""
        env = os.environ if env is None else env
        root, lock_root = resolve_jobs_dir(env), resolve_lock_dir(env)
        reports = [r for r in (ensure_private_dir(root), ensure_private_dir(lock_root, "lock directory")) if r]
        return cls(root, lock_root=lock_root, clock=clock, fs=fs, permission_report="; ".join(reports) or None,
                   node_dirs=tuple(node_jobs_dirs(env, root)))

    @classmethod
    def open_reader(cls, env: Mapping[str, str] | None = None, *, clock: Clock | None = None,
                    fs: FileOps | None = None) -> JobStore:
        """The store for reading (status, history, explain): creates and chmods nothing.

        A jobs directory that does not exist reads as empty; an existing one must pass the
        same checks as for writing (not a symlink, yours).
        """
        env = os.environ if env is None else env
        root, lock_root = resolve_jobs_dir(env), resolve_lock_dir(env)
        for path, what in ((root, "jobs directory"), (lock_root, "lock directory")):
            if os.path.lexists(path):
                inspect_jobs_dir(path, what)
        return cls(root, lock_root=lock_root, clock=clock, fs=fs, node_dirs=tuple(node_jobs_dirs(env, root)))

    # --- paths -------------------------------------------------------------------------

    def status_path(self, thread_id: str) -> Path:
        return self.layout.status(valid_thread(thread_id))

    def lock_path(self, thread_id: str) -> Path:
        return self.locks.lock(valid_thread(thread_id))

    def journal_path(self, thread_id: str, job_id: str) -> Path:
        return self.layout.journal(valid_thread(thread_id), valid_job(job_id))

    def handoff_path(self, thread_id: str, job_id: str) -> Path:
        return self.layout.handoff(valid_thread(thread_id), valid_job(job_id))

    def cancel_path(self, thread_id: str, job_id: str) -> Path:
        return self.layout.cancel(valid_thread(thread_id), valid_job(job_id))

    def log_path(self, thread_id: str, job_id: str) -> Path:
        return self.layout.log(valid_thread(thread_id), valid_job(job_id))

    # --- reading jobs ------------------------------------------------------------------

    def load(self, thread_id: str, job_id: str) -> Replay:
        """One job, read-only, from its journal."""
        thread, job = valid_thread(thread_id), valid_job(job_id)
        try:
            return replay_file(self.layout.journal(thread, job), thread, job)
        except FileNotFoundError:
            raise UnknownJob(f"no job {job} for thread {thread} in {self.root}",
                             hint="check the ids with `rekall history`") from None

    def _load_if_exists(self, thread: str, job: str) -> Replay | None:
        try:
            return self.load(thread, job)
        except UnknownJob:
            return None

    def _ordered(self, thread: str) -> list[tuple[int, str, str]]:
        """``(job number, created at, job id)`` of the thread's jobs, oldest first, from first records only."""
        order = []
        for _, job in self.layout.journals(thread=thread):
            try:
                first = first_record(self.layout.journal(thread, job))
            except FileNotFoundError:
                continue  # pruned meanwhile
            number = first.fields.get("jobNumber") if isinstance(first, TransitionRecord) else None
            if not isinstance(number, int):
                raise JournalCorrupt(f"{self.layout.journal(thread, job)} does not start by scheduling a job",
                                     hint="move it aside; nothing was changed")
            order.append((number, first.at, job))
        return sorted(order)

    def thread_jobs(self, thread_id: str, *, before: int | None = None, last: int | None = None) -> list[Replay]:
        """The thread's jobs, oldest first: optionally only those numbered below ``before``, and the
        ``last`` few of them (only those are replayed)."""
        thread = valid_thread(thread_id)
        order = [entry for entry in self._ordered(thread) if before is None or entry[0] < before]
        return [self.load(thread, job) for _, _, job in order[-last if last else 0:]]

    def latest(self, thread_id: str) -> Replay | None:
        jobs = self.thread_jobs(thread_id, last=1)
        return jobs[0] if jobs else None

    def _next_job_number(self, thread: str) -> int:
        order = self._ordered(thread)
        return order[-1][0] + 1 if order else 1

    def _earlier(self, job: Replay) -> list[Replay]:
        """The jobs a status's history summarises: the last few before ``job``."""
        return self.thread_jobs(job.thread_id, before=job.job_number, last=HISTORY_LIMIT)

    def all_jobs(self) -> list[tuple[str, str]]:
        """``(thread, job)`` of every journal in the store."""
        return self.layout.journals()

    def find(self, job_or_thread: str) -> Replay:
        """A job by its id, or a thread's latest job by the thread id."""
        wanted = valid_job(job_or_thread)
        matches = self.layout.journals(job=wanted)
        if matches:
            return self.load(*matches[0])
        latest = self.latest(wanted)
        if latest is not None:
            return latest
        raise UnknownJob(f"no job or thread {wanted} in {self.root}",
                         hint="list jobs with `rekall history`; check REKALL_JOBS_DIR")

    def status_of(self, job: Replay) -> dict[str, Any]:
        """The derived status of ``job``, with the summaries of the thread's earlier jobs."""
        status = derive_status(job.view, job.transitions[-1], job.path, self.layout.log(job.thread_id, job.job_id),
                               history_before(job, self._earlier(job)))
        problem = self._unrecorded.get(job.job_id)
        if problem is not None and not job.state.terminal:
            status.update(self.unrecorded_loss(job, problem))
        return status

    def current_fields(self, job: Replay) -> dict[str, Any]:
        """The job's fields and state, as :meth:`status_of` reports them, without the thread's history."""
        fields = {**job.view.fields, "state": job.state.value}
        problem = self._unrecorded.get(job.job_id)
        if problem is not None and not job.state.terminal:
            fields.update(self.unrecorded_loss(job, problem))
        return fields

    def unrecorded_loss(self, job: Replay, problem: str) -> dict[str, Any]:
        """What can be proven of a job whose worker is gone when the journal cannot take the record:
        it failed (``worker_lost``), and the outcome rule of its last journaled state."""
        state = job.state.value
        may_have = {"requesting": "the compaction request may have reached the extension",
                    "accepted": "the compaction may still complete",
                    "resuming": "a continuation may have started"}.get(state, "nothing was sent after it")
        return {"status": "failed", "state": "failed", "errorCode": "worker_lost",
                "error": f"the worker process is gone and the journal could not be written after `{state}` "
                         f"({problem}); {may_have}",
                "outcomeMayBeUnknown": outcome_may_be_unknown(job.state, {"delivery": "unknown"}),
                "lastJournaledState": state, "journalUnwritable": problem}

    # --- status ------------------------------------------------------------------------

    def read_status(self, thread_id: str) -> dict[str, Any]:
        """The thread's latest job, derived from its journal.

        A status file that is missing, stale or unreadable is reported under
        ``statusFileProblem`` and rewritten, unless a live worker owns the thread (its next
        transition rewrites it). Without any job: ``{threadId, status/state: not_scheduled}``.
        """
        thread = valid_thread(thread_id)
        latest = self.latest(thread)
        on_disk, problem = self._read_status_file(thread)
        if latest is None:
            return self._status_without_journal(thread, on_disk, problem)
        status = self.status_of(latest)
        if problem is None and on_disk != status:
            if _behind(on_disk, status) and self.lock_liveness(thread) is Liveness.ALIVE:
                return status  # the worker journaled a transition and is about to rewrite the file
            problem = "stale: it differs from the journal"
        if problem is not None:
            log.warning("status file of thread %s is %s; rebuilt from the journal", thread, problem)
            if self.lock_liveness(thread) is not Liveness.ALIVE and latest.job_id not in self._unrecorded:
                self._save_status_quietly(thread, status)  # a reader never fails on a derived view
            status["statusFileProblem"] = f"{problem}; rebuilt from the journal"
        return status

    def _read_status_file(self, thread: str) -> tuple[dict[str, Any] | None, str | None]:
        try:
            raw = read_private(self.layout.status(thread), limit=STATUS_LIMIT)
        except FileNotFoundError:
            return None, "missing"
        except TooLarge as exc:
            return None, f"too large ({exc.strerror}; not read)"
        except OSError as exc:
            return None, f"unreadable ({exc.strerror or exc})"
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return None, f"corrupt ({exc})"
        if not isinstance(value, dict):
            return None, "corrupt (not a JSON object)"
        return value, None

    def _status_without_journal(self, thread: str, on_disk: dict[str, Any] | None,
                                problem: str | None) -> dict[str, Any]:
        if on_disk is not None:  # written by the Node version, or by hand: shown, not trusted
            return {**on_disk, "statusFileProblem": "no journal backs this status file; shown as found"}
        if problem is not None and problem != "missing":
            raise StatusCorrupt(f"the status file {self.layout.status(thread)} is {problem} and no journal "
                                "exists to rebuild it from",
                                hint="move the file aside; nothing else refers to it")
        return {"threadId": thread, "status": "not_scheduled", "state": "not_scheduled"}

    def _save_status(self, thread: str, status: dict[str, Any]) -> None:
        data = (json.dumps(status, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        self.fs.atomic_replace(self.layout.status(thread), data)

    def _save_status_quietly(self, thread: str, status: dict[str, Any]) -> None:
        try:
            self._save_status(thread, status)
        except OSError as exc:
            log.warning("status file of thread %s not written (%s); the journal holds the job", thread, exc)

    # --- the lock ----------------------------------------------------------------------

    @contextmanager
    def guarded(self) -> Iterator[None]:
        """Serialise with every process that inspects or takes locks (see ``rekall.store.guard``)."""
        with self._guarded():
            yield

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        # The lock directory is ours to create (0700) as soon as something must be serialised:
        # for a reader, only when it records a provably dead worker.
        ensure_private_dir(self.lock_root, "lock directory")
        with guarded(self.locks.guard()):
            yield

    def lock_owner(self, thread_id: str) -> LockOwner | None:
        """Who holds the thread's lock, or ``None`` when it is free."""
        found = self._find_lock(valid_thread(thread_id))
        return None if found is None else found[1]

    def _find_lock(self, thread: str) -> tuple[Path, LockOwner] | None:
        """The thread's lock and where it is: the lock directory, else (written by an earlier
        rekall, whose worker may still run) the jobs directory."""
        for path in (self.locks.lock(thread), self.layout.legacy_lock(thread)):
            owner = self._read_lock(path)
            if owner is not None:
                return path, owner
        return None

    def _read_lock(self, path: Path) -> LockOwner | None:
        try:
            raw = read_private(path, limit=LOCK_LIMIT)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LockBusy(f"the lock {path} cannot be read: {exc.strerror or exc}",
                           hint="check its permissions; it was not changed") from None
        try:
            return decode_lock(raw)
        except ValueError as exc:
            raise LockBusy(f"the lock {path} is unreadable ({exc})",
                           hint="if no rekall worker runs for this thread, move the lock aside") from None

    def owner_liveness(self, owner: LockOwner) -> Liveness:
        return liveness(owner, host=self.host)

    def is_owner_alive(self, owner: LockOwner) -> bool:
        """True only when the owner is proven alive. False does not prove death: see ``owner_liveness``."""
        return self.owner_liveness(owner) is Liveness.ALIVE

    def lock_liveness(self, thread_id: str) -> Liveness | None:
        """ALIVE, DEAD or UNKNOWN for the thread's lock (the rule ``reap_if_dead`` applies); None when free."""
        thread = valid_thread(thread_id)
        try:
            owner = self.lock_owner(thread)
        except LockBusy:
            return Liveness.UNKNOWN
        if owner is None:
            return None
        home = self._home_of(owner)
        return self._job_liveness(owner, None if home is None else home._load_if_exists(thread, owner.job_id))

    def _job_liveness(self, owner: LockOwner | None, job: Replay | None) -> Liveness:
        """Alive if any known process of the job is; dead only if every one is provably dead.

        The identities are the lock's owner and the worker recorded by ``worker_started``
        (the lock may still name the scheduler if it died before handing the lock over).
        """
        identities = [] if owner is None else [owner]
        started = next((t for t in (job.transitions if job else ()) if t.trigger == "worker_started"), None)
        if started is not None and job is not None:
            ev = started.evidence
            identities.append(LockOwner(job_id=job.job_id, thread_id=job.thread_id, pid=ev["pid"],
                                        process_start_time=ev.get("processStartTime"), host=ev["host"]))
        verdicts = {self.owner_liveness(identity) for identity in identities}
        if Liveness.ALIVE in verdicts:
            return Liveness.ALIVE
        if Liveness.UNKNOWN in verdicts:
            return Liveness.UNKNOWN
        return Liveness.DEAD

    def set_lock_owner(self, thread_id: str, job_id: str, pid: int, process_start_time: str | None) -> bool:
        """Name the worker process in the lock (compare-and-set on the job id).

        False, and nothing changed, when the lock no longer names ``job_id``: its worker has
        already finished and released it (a fast job can end before its scheduler gets here).
        """
        thread, job = valid_thread(thread_id), valid_job(job_id)
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise InvalidInput(f"pid must be a positive integer; got {pid!r:.40}", field="pid", hint="fix the caller")
        with self._guarded():
            found = self._find_lock(thread)
            if found is None or found[1].job_id != job:
                return False
            path, owner = found
            updated = attrs.evolve(owner, pid=pid, process_start_time=process_start_time, host=self.host)
            self.fs.atomic_replace(path, encode_lock(updated))
            return True

    def release_lock(self, thread_id: str, job_id: str) -> bool:
        """Remove the thread's lock if it names ``job_id``; True when it did."""
        thread, job = valid_thread(thread_id), valid_job(job_id)
        with self._guarded():
            try:
                found = self._find_lock(thread)
            except LockBusy as exc:
                log.warning("not releasing the lock of thread %s: %s", thread, exc.message)
                return False
            if found is None or found[1].job_id != job:
                return False
            self._remove_lock(found[0])
            return True

    def _remove_lock(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self.fs.fsync_dir(path.parent)

    # --- reaping -----------------------------------------------------------------------

    def reap_if_dead(self, thread_id: str) -> dict[str, Any] | None:
        """Apply the ``worker_lost`` rule to the thread if its job's process is provably gone.

        Returns what was done (``jobId``, ``reaped``, ``lockRemoved``, ``state``) or ``None``
        when there was nothing to do. A lock whose owner cannot be judged is left alone. Never
        raises for a write that fails: the job is then reported from what can be proven
        (see :meth:`unrecorded_loss`).
        """
        thread = valid_thread(thread_id)
        if not self._may_need_reaping(thread):
            return None  # the common case takes no guard, so a reader creates nothing
        with self._guarded():
            try:
                found = self._find_lock(thread)
            except LockBusy as exc:
                log.warning("cannot judge the lock of thread %s: %s", thread, exc.message)
                return None
            if found is not None:
                return self._reap_lock_if_dead(thread, *found)
            return self._reap_orphan_if_dead(thread)

    def reap_all(self) -> list[dict[str, Any]]:
        """``reap_if_dead`` for every thread that has a job here or a lock naming this jobs directory."""
        threads = {thread for thread, _ in self.layout.journals()}
        done = []
        for thread in sorted(threads):
            try:
                result = self.reap_if_dead(thread)
            except StoreError as exc:  # one unreadable journal must not hide the others
                log.warning("cannot judge thread %s: %s", thread, exc.message)
                continue
            if result is not None:
                done.append(result)
        return done

    def _may_need_reaping(self, thread: str) -> bool:
        if any(os.path.lexists(p) for p in (self.locks.lock(thread), self.layout.legacy_lock(thread))):
            return True
        try:
            latest = self.latest(thread)
        except StoreError:
            return False  # an unreadable journal proves nothing; readers report it
        return latest is not None and not latest.state.terminal and latest.job_id not in self._unrecorded

    def _reap_lock_if_dead(self, thread: str, path: Path, owner: LockOwner) -> dict[str, Any] | None:
        home = self._home_of(owner)
        job = home._load_if_exists(thread, owner.job_id) if home is not None else None
        if self._job_liveness(owner, job) is not Liveness.DEAD:
            return None
        reaped = job is not None and not job.state.terminal
        if reaped:
            assert job is not None and home is not None
            job = home._mark_worker_lost(job)
            self._unrecorded.update(home._unrecorded)
        if job is not None and job.job_id in self._unrecorded:
            return {"jobId": owner.job_id, "reaped": False, "lockRemoved": False, "state": job.state.value,
                    "journalUnwritable": self._unrecorded[job.job_id]}
        self._remove_lock(path)
        log.warning("removed the stale lock of thread %s (job %s, pid %s)", thread, owner.job_id, owner.pid)
        return {"jobId": owner.job_id, "reaped": reaped, "lockRemoved": True,
                "state": None if job is None else job.state.value}

    def _home_of(self, owner: LockOwner) -> JobStore | None:
        """The store holding the lock's job: this one, or the jobs directory the lock names
        (another ``CODEX_HOME``); ``None`` when that directory cannot be used."""
        if owner.jobs_dir is None or Path(owner.jobs_dir) == self.root:
            return self
        other = Path(owner.jobs_dir)
        try:
            inspect_jobs_dir(other)
        except StoreError as exc:
            log.warning("the lock of job %s names the jobs directory %s: %s", owner.job_id, other, exc.message)
            return None
        return JobStore(other, lock_root=self.lock_root, clock=self.clock, fs=self.fs)

    def _reap_orphan_if_dead(self, thread: str) -> dict[str, Any] | None:
        """A job that is not over but has no lock: reap it if its worker is gone."""
        latest = self.latest(thread)
        if latest is None or latest.state.terminal or self._job_liveness(None, latest) is not Liveness.DEAD:
            return None
        job = self._mark_worker_lost(latest)
        return {"jobId": job.job_id, "reaped": job.job_id not in self._unrecorded, "lockRemoved": False,
                "state": job.state.value}

    def _mark_worker_lost(self, job: Replay) -> Replay:
        """Journal ``fail`` (``worker_lost``), saying what the dead worker had already done.

        When the journal cannot be written (a full disk), nothing changes on disk, the job is
        remembered in ``_unrecorded`` and returned as it was: readers report it without crashing.
        """
        before = job.state
        try:
            with self.open_lifecycle(job.thread_id, job.job_id) as lifecycle:
                lifecycle.fire("fail", errorCode="worker_lost", error=_lost_words(before), delivery="unknown")
        except (OSError, StoreError) as exc:
            problem = exc.message if isinstance(exc, StoreError) else f"{exc.strerror or exc}"
            log.error("job %s: its worker is gone, and this could not be journaled: %s", job.job_id, problem)
            self._unrecorded[job.job_id] = problem
            return job
        return self.load(job.thread_id, job.job_id)

    # --- scheduling --------------------------------------------------------------------

    def create_job(self, thread_id: str, *, handoff: Mapping[str, Any] | None, user_fingerprint: str | None,
                   extra: Mapping[str, Any] | None = None) -> CreatedJob:
        """Schedule a job for the thread, or return the live job that already holds it."""
        thread = valid_thread(thread_id)
        clean = None if handoff is None else validate_handoff(handoff)
        if user_fingerprint is not None and not isinstance(user_fingerprint, str):
            raise InvalidInput("user_fingerprint must be a string or None", field="userFingerprint",
                               hint="fix the caller")
        fields = _checked_extra(extra)
        with self._guarded():
            found = self._find_lock(thread)
            if found is not None:
                existing = self._settle_lock(thread, *found)
                if existing is not None:
                    return existing
            refuse_if_node_job_runs(self.node_dirs, thread)
            latest = self.latest(thread)
            if latest is not None and not latest.state.terminal:
                self._settle_orphan(latest)
            return self._create(thread, str(uuid.uuid4()), clean, user_fingerprint, fields)

    def _settle_lock(self, thread: str, path: Path, owner: LockOwner) -> CreatedJob | None:
        home = self._home_of(owner)
        job = home._load_if_exists(thread, owner.job_id) if home is not None else None
        alive = self._job_liveness(owner, job)
        if alive is Liveness.DEAD:
            reaped = self._reap_lock_if_dead(thread, path, owner)
            if reaped is not None and "journalUnwritable" in reaped:
                raise StoreError(f"the worker of job {owner.job_id} is gone, but its journal cannot be written "
                                 f"({reaped['journalUnwritable']}); nothing was scheduled",
                                 code="journal_unusable", hint="free disk space, then schedule again")
            return None
        where = f"job {owner.job_id} (pid {owner.pid} on {owner.host or 'an unknown host'})"
        if alive is Liveness.UNKNOWN:
            raise LockBusy(f"thread {thread} is locked by {where}, and whether that process still runs cannot "
                           "be told from here", hint=f"if no rekall worker runs for this thread, inspect "
                           f"`rekall explain {owner.job_id}` and move {path} aside; rekall "
                           "never removes a lock it cannot prove stale")
        if job is not None and not job.state.terminal:
            assert home is not None
            status = home.status_of(job)
            if home is not self:  # scheduled through another CODEX_HOME: still this thread's one job
                status["jobsDir"] = str(home.root)
            return CreatedJob(job.job_id, status, already_scheduled=True)
        state = "has no journal" if job is None else f"already ended ({job.state.value})"
        raise LockBusy(f"thread {thread} is locked by {where}, which {state} while its process still runs",
                       hint="its worker is finishing; schedule again in a moment")

    def _settle_orphan(self, job: Replay) -> None:
        if self._job_liveness(None, job) is not Liveness.DEAD:
            raise LockBusy(f"job {job.job_id} is {job.state.value} without its lock and its worker may still run",
                           hint=f"inspect `rekall explain {job.job_id}`; schedule again once it has ended")
        self._mark_worker_lost(job)
        if job.job_id in self._unrecorded:
            raise StoreError(f"the worker of job {job.job_id} is gone, but its journal cannot be written "
                             f"({self._unrecorded[job.job_id]}); nothing was scheduled",
                             code="journal_unusable", hint="free disk space, then schedule again")

    def _create(self, thread: str, job: str, handoff: dict[str, Any] | None,
                fingerprint: str | None, extra: dict[str, Any]) -> CreatedJob:
        now = self.clock.now()
        pid = os.getpid()
        me = LockOwner(job_id=job, thread_id=thread, pid=pid, process_start_time=process_start_time(pid),
                       host=self.host, created_at=now.iso, jobs_dir=str(self.root))
        lock, journal = self.locks.lock(thread), self.layout.journal(thread, job)
        handoff_path = self.layout.handoff(thread, job)
        fields: dict[str, Any] = {
            "jobId": job, "threadId": thread, "createdAt": now.iso,
            "jobNumber": self._next_job_number(thread),
            "userFingerprint": fingerprint, "resume": bool(handoff and handoff["resume"]),
            "errorCode": None, "outcomeMayBeUnknown": False,
        }
        mine = encode_lock(me)
        try:
            self.fs.create_exclusive(lock, mine)
        except FileExistsError:  # only a process ignoring the guard gets here
            raise LockBusy(f"the lock of thread {thread} appeared while it was being taken",
                           hint="another program writes the jobs directory; nothing was scheduled") from None
        except BaseException:  # the link may have happened before the failure: take back only ours
            if lock.exists() and read_private(lock, limit=LOCK_LIMIT) == mine:
                lock.unlink()
            raise
        try:
            if handoff is not None:
                data = record_bytes(thread, job, handoff)
                self.fs.create_exclusive(handoff_path, data)
                fields.update(handoffPath=str(handoff_path), handoffSha256=sha256_hex(data))
            fields.update(extra)
            first = TransitionRecord(seq=0, at=now.iso, mono_ms=now.mono_ms, trigger=SCHEDULE, source=None,
                                     dest=JobState.SCHEDULED, fields=fields,
                                     evidence={"pid": me.pid, "host": me.host,
                                               "processStartTime": me.process_start_time})
            self.fs.create_exclusive(journal, encode_record(first))
        except BaseException:
            for path in (journal, handoff_path, lock):  # never a lock without a job
                path.unlink(missing_ok=True)
            raise
        created = self.load(thread, job)
        status = self.status_of(created)
        self._save_status_quietly(thread, status)
        return CreatedJob(job, status, already_scheduled=False)

    def fail_unstarted(self, thread_id: str, job_id: str, error: str) -> dict[str, Any]:
        """The worker could not be started: fail the job with the cause and release its lock.

        Nothing was sent to the extension, so the outcome is known. The journal is kept.
        """
        thread, job = valid_thread(thread_id), valid_job(job_id)
        with self.open_lifecycle(thread, job) as lifecycle:
            if not lifecycle.state.terminal:
                lifecycle.fire("fail", errorCode="spawn_failed", error=error, delivery="not_delivered")
            status = lifecycle.status
        self.release_lock(thread, job)
        return status

    # --- driving and inspecting one job ------------------------------------------------

    def open_lifecycle(self, thread_id: str, job_id: str) -> Lifecycle:
        """Open a job for driving (cuts a torn journal tail). Only the lock's owner may do this."""
        thread, job = valid_thread(thread_id), valid_job(job_id)
        path = self.layout.journal(thread, job)
        try:
            scan = scan_journal(path)
        except FileNotFoundError:
            raise UnknownJob(f"no job {job} for thread {thread} in {self.root}",
                             hint="check the ids with `rekall status`") from None
        replay = replay_scan(path, scan, thread, job)
        writer = JournalWriter.open(path, scan, self.fs)
        return Lifecycle(replay, writer, clock=self.clock, log_path=self.layout.log(thread, job),
                         history=history_before(replay, self._earlier(replay)),
                         write_status=lambda status: self._save_status(thread, status))

    def request_cancel(self, thread_id: str, job_id: str) -> dict[str, Any]:
        """Write the job's cancel marker, if it is the thread's current job and not over."""
        thread, job = valid_thread(thread_id), valid_job(job_id)
        current = self.latest(thread)
        if current is None or current.job_id != job:
            if self.layout.journal(thread, job).exists():
                raise StoreError(f"job {job} is not the current job of thread {thread}",
                                 code="job_identity_mismatch", hint="inspect the thread with `rekall status`")
            raise UnknownJob(f"no job {job} for thread {thread}", hint="check the ids with `rekall status`")
        answer: dict[str, Any] = {"threadId": thread, "jobId": job, "state": current.state.value}
        if current.state.terminal:
            return {**answer, "cancellationRequested": False}
        try:
            self.fs.create_exclusive(self.layout.cancel(thread, job), b"cancel\n")
        except FileExistsError:
            pass  # asked before: the marker is already there
        return {**answer, "cancellationRequested": True}

    def verify_handoff(self, thread_id: str, job_id: str, expected_sha256: str | None) -> dict[str, Any]:
        """The saved handoff record, if unchanged and bound to this thread and job."""
        thread, job = valid_thread(thread_id), valid_job(job_id)
        return verify_record(self.layout.handoff(thread, job), thread, job, expected_sha256)


def _lost_words(state: JobState) -> str:
    """What a dead worker had done, in the words its ``worker_lost`` record keeps."""
    done = {
        JobState.ACCEPTED: ", after the extension accepted the compaction request; the compaction may still "
                           "complete",
        JobState.WAITING_FOR_RESUME_IDLE: ", after the compaction completed: the thread was compacted, and the "
                                          "continuation did not run",
        JobState.RESUMING: ", after the compaction completed: the thread was compacted, and a continuation may "
                           "have started",
    }.get(state, "")
    return f"the worker process ended while the job was {state.value}{done}; nothing is retried automatically"


def _behind(on_disk: dict[str, Any] | None, status: dict[str, Any]) -> bool:
    """The file shows an earlier point of the same job's journal."""
    if on_disk is None or on_disk.get("jobId") != status.get("jobId"):
        return False
    seq = on_disk.get("journalSeq")
    return isinstance(seq, int) and seq < status["journalSeq"]
