"""Real jobs under faults: ``service.schedule`` (what the MCP tool calls), the detached worker
process it spawns, and the simulated owner on a real Unix socket, one of each per job.

``ChaosJob`` drives one job and can hurt it (kill the worker, script owner faults through
``job.sim``); ``audit`` then checks what the job left behind against what the owner really
did. Every wait is bounded. Waiting for the worker's state polls ``service.status_reply`` (the
worker is another process and the status is the only thing it tells the world); waiting for
the worker to end uses a pidfd where the OS has one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from rekall.usecases import service
from rekall.kernel.errors import RekallError
from rekall.usecases.spawn import spawn_worker
from rekall.surfaces.explain import build_explanation
from rekall.sim import protocol as sim_protocol
from rekall.sim import start_sim_in_thread
from rekall.sim.threaded import SimHandle
from rekall.states import SCHEDULE, TERMINAL_STATES, JobState, table_named
from rekall.store.wire import state_named
from rekall.store import JobStore
from rekall.store.journal import scan_journal
from tests.mcpkit import HANDOFF, job_env

COMPACT = "thread-follower-compact-thread"
START_TURN = "thread-follower-start-turn"
TERMINAL = frozenset(state.value for state in TERMINAL_STATES)
#: A state version newer than any build the simulator plays (never a hard-coded number).
NEWER_STATE = max(table[sim_protocol.STATE_CHANGED] for table in sim_protocol.TABLES.values()) + 1
#: The router's errors and those that prove non-delivery, stated from the design on purpose
#: (not imported from the adapter), so that a wrong constant there fails here.
ROUTER_ERRORS = ("no-client-found", "request-version-mismatch", "no-handler-for-request",
                 "client-disconnected", "request-timeout")
NOT_DELIVERED = frozenset(ROUTER_ERRORS[:3])
#: The states in which a request may be in flight: a job ending there early (a crash, a
#: cancel) has outcomeMayBeUnknown, unless non-delivery was proven.
UNKNOWN_AFTER = frozenset({"requesting", "accepted", "resuming"})

#: Short timers so that a stuck job ends quickly: the debounce, the worker's deadline, its
#: request timeout, the settle window for unknown outcomes and the reconnect window.
FAST = {"REKALL_IDLE_STABLE_MS": "60", "REKALL_DEADLINE_S": "8", "REKALL_REQUEST_TIMEOUT_S": "1",
        "REKALL_SETTLE_S": "1", "REKALL_RECONNECT_WINDOW_S": "2"}
POLL_S = 0.02


def wait_for_exit(pid: int, timeout: float) -> bool:
    """True once ``pid`` has exited (a zombie counts), False if it still runs after ``timeout``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):  # no pidfd here: look at the process table instead
        end = time.monotonic() + timeout
        while _running(pid):
            if time.monotonic() > end:
                return False
            time.sleep(POLL_S)
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return True


def spawn_placeholder(thread_id: str, job_id: str, **_: Any) -> int:
    """A spawn that starts a process which never runs the job (it just sleeps, detached)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _reap_in_background(child)
    return child.pid


def spawn_driver(code: str, *args: str) -> Callable[..., int]:
    """A spawn that runs ``code`` (a test's worker driver) with ``THREAD JOB *args`` as argv (not
    SCHEDULED: a driver runs the worker as one started without it)."""
    def spawn(thread_id: str, job_id: str, *, log_path: Path, env: Mapping[str, str], **_: Any) -> int:
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            child = subprocess.Popen([sys.executable, "-c", code, thread_id, job_id, *args], env=dict(env),
                                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=log, cwd=Path(__file__).resolve().parents[2])
        finally:
            os.close(log)
        _reap_in_background(child)
        return child.pid
    return spawn


def spawn_two_workers(thread_id: str, job_id: str, **kwargs: Any) -> tuple[int, int]:
    """Start two workers for one job at once (a scheduler that spawned twice); both pids."""
    return spawn_worker(thread_id, job_id, **kwargs), spawn_worker(thread_id, job_id, **kwargs)


def _reap_in_background(child: subprocess.Popen[Any]) -> None:
    threading.Thread(target=child.wait, daemon=True).start()


class ChaosJob:
    """One thread on its own simulated owner, one jobs directory, at most a few jobs."""

    def __init__(self, workdir: Path, *, env: Mapping[str, str] | None = None, **sim_options: Any) -> None:
        self.sim: SimHandle = start_sim_in_thread(**sim_options)
        self.thread_id = self.sim.thread_id
        self.jobs_dir = workdir / "jobs"
        # The simulator's own variables win (a codex_home simulator names its CODEX_HOME).
        sim_env = self.sim.env
        self.env = job_env(sim_env, self.jobs_dir, **{**FAST, **sim_env, **(env or {})})
        self.store = JobStore.open(self.env)
        self.job_id: str | None = None
        self.pid: int | None = None
        #: Every worker process started for the current job (the first is ``pid``).
        self.pids: list[int] = []
        #: The test killed a worker on purpose: its lock is then the reaper's to remove.
        self.killed = False
        #: Whether the thread's lock was still there once every worker had exited (before any reaping).
        self.lock_left: bool | None = None
        self.handoff: dict[str, Any] | None = None
        #: The owner's request counts and compactions when the current job was scheduled.
        self.baseline: tuple[int, int, frozenset[str]] = (0, 0, frozenset())

    def __enter__(self) -> ChaosJob:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for pid in self.pids:
            if not wait_for_exit(pid, 0):
                os.kill(pid, signal.SIGKILL)  # never leave a worker behind a failed test
        self.sim.stop()

    # --- driving -------------------------------------------------------------------------

    def schedule(self, handoff: Mapping[str, Any] | None = HANDOFF, *,
                 spawn: Callable[..., int] | None = None, two_workers: bool = False) -> dict[str, Any]:
        before = self.owner_baseline()
        second: list[int] = []
        if two_workers:
            def spawn(thread_id: str, job_id: str, **kwargs: Any) -> int:
                first, other = spawn_two_workers(thread_id, job_id, **kwargs)
                second.append(other)
                return first
        result = asyncio.run(service.schedule(self.thread_id, handoff, env=self.env, spawn=spawn))
        if not result.get("alreadyScheduled"):
            self.track(result, handoff, before)
            self.pids += second
        return result

    def owner_baseline(self) -> tuple[int, int, frozenset[str]]:
        return (*self.counts(), self.baseline[2] | frozenset(self.owner_effects("")[0]))

    def track(self, scheduled: Mapping[str, Any], handoff: Mapping[str, Any] | None,
              baseline: tuple[int, int, frozenset[str]]) -> None:
        """Follow the job ``scheduled`` describes (a schedule answer made elsewhere, say by a CLI)."""
        self.job_id, self.pid, self.baseline = scheduled["jobId"], scheduled["pid"], baseline
        self.pids, self.killed, self.lock_left = [scheduled["pid"]], False, None
        self.handoff = None if handoff is None else dict(handoff)

    def status(self) -> dict[str, Any]:
        return service.status_reply(self.thread_id, env=self.env)

    def cancel(self) -> dict[str, Any]:
        assert self.job_id is not None
        return service.cancel(self.thread_id, self.job_id, env=self.env)

    def wait_state(self, states: Iterable[str], timeout: float = 15.0) -> dict[str, Any]:
        """Poll the status until the job is in one of ``states`` (AssertionError if it ends elsewhere)."""
        wanted = set(states)
        end = time.monotonic() + timeout
        while True:
            current = self.status()
            if current["state"] in wanted:
                return current
            if current["state"] in TERMINAL:
                raise AssertionError(f"job ended {current['state']} while waiting for {sorted(wanted)}: {current}")
            if time.monotonic() > end:
                raise TimeoutError(f"job still {current['state']} after {timeout:g} s, waiting for {sorted(wanted)}")
            time.sleep(POLL_S)

    def wait_followed(self, follows_before: int, timeout: float = 15.0) -> None:
        """Wait until the worker follows the thread (the schedule call followed once already) and
        has claimed its job: on the extension it follows first, then journals ``worker_started``."""
        self.sim.wait_until(lambda owner: owner.follow_count >= follows_before + 2, timeout=timeout)
        self.wait_state({s.value for s in JobState} - {JobState.SCHEDULED.value}, timeout)

    def wait_sent(self, method: str, count: int = 1, timeout: float = 15.0) -> None:
        """Wait until the owner has received ``count`` requests of ``method`` in all."""
        self.sim.wait_until(lambda owner: len(owner.requests_for(method)) >= count, timeout=timeout)

    def kill_worker(self) -> None:
        assert self.pid is not None
        self.killed = True
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            assert wait_for_exit(pid, 10), f"worker {pid} survived SIGKILL"

    def restart_worker(self) -> int:
        """Kill the job's worker and start another for the same job, as a person might."""
        assert self.job_id is not None
        self.kill_worker()
        pid = spawn_worker(self.thread_id, self.job_id, log_path=self.store.log_path(self.thread_id, self.job_id),
                           env=self.env)
        self.pids.append(pid)
        return pid

    def live(self) -> bool:
        """A worker of the current job runs and the job has not ended: a fault now meets a live job."""
        if self.job_id is None or all(wait_for_exit(pid, 0) for pid in self.pids):
            return False
        try:
            return not self.store.load(self.thread_id, self.job_id).state.terminal
        except RekallError:
            return False

    def finish(self, timeout: float = 30.0) -> dict[str, Any]:
        """Wait for every worker to exit, note whether the lock outlived them, then read the
        status (which reaps a dead worker's job)."""
        assert self.pid is not None
        end = time.monotonic() + timeout
        for pid in self.pids:
            if not wait_for_exit(pid, max(0.0, end - time.monotonic())):
                for other in self.pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(other, signal.SIGKILL)
                raise AssertionError(f"a worker of job {self.job_id} still ran after {timeout:g} s: {self.status()}")
        self.lock_left = self.store.lock_path(self.thread_id).exists()
        return self.status()

    def counts(self) -> tuple[int, int]:
        """Compact and start-turn requests that reached the router, refused ones included."""
        return self.sim.call(lambda owner: (len(owner.routed_for(COMPACT)), len(owner.routed_for(START_TURN))))

    def job_counts(self) -> tuple[int, int]:
        """Compact and start-turn requests since the current job was scheduled."""
        compacts, turns = self.counts()
        return compacts - self.baseline[0], turns - self.baseline[1]

    def owner_effects(self, job_id: str) -> tuple[list[str], list[str], list[str]]:
        """What the owner really did since the current job was scheduled: compactions started,
        compactions completed, and the turns started for ``job_id`` (its clientUserMessageId)."""
        earlier = self.baseline[2]
        def read(owner: Any) -> tuple[list[str], list[str], list[str]]:
            started, completed, turns = [], [], []
            for turn in owner.backend.state["turns"]:
                for item in turn.get("items", []):
                    if item.get("type") == "contextCompaction" and item.get("id") not in ("old", *earlier):
                        started.append(item["id"])
                        if item.get("completed") is True:
                            completed.append(item["id"])
                if turn.get("params", {}).get("clientUserMessageId") == job_id:
                    turns.append(turn["turnId"])
            return started, completed, turns
        return self.sim.call(read)

    def log_text(self) -> str:
        assert self.job_id is not None
        path = self.store.log_path(self.thread_id, self.job_id)
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


# --- the audit -----------------------------------------------------------------------------


@attrs.frozen
class Audit:
    """What one finished job left behind, and every rule it broke (``problems``)."""

    state: str
    error_code: str | None
    outcome_may_be_unknown: bool | None
    path: tuple[str, ...]
    compact_requests: int
    start_turn_requests: int
    data_lost: tuple[str, ...]
    problems: tuple[str, ...]

    @property
    def duplicates(self) -> int:
        return max(0, self.compact_requests - 1) + max(0, self.start_turn_requests - 1)

    @property
    def outcome(self) -> str:
        return self.state if self.error_code is None else f"{self.state} ({self.error_code})"


def audit(job: ChaosJob) -> Audit:
    """Check a finished job: terminal, a legal path, an intact journal and handoff, at most one
    request of each kind, no lock left, and a status that does not contradict the owner."""
    assert job.job_id is not None
    problems: list[str] = []
    lost: list[str] = []
    if job.lock_left is None and not job.live():  # before the status call below reaps anything
        job.lock_left = job.store.lock_path(job.thread_id).exists()
    status = job.status()
    try:
        explanation = build_explanation(job.store, job.job_id)
    except RekallError as exc:
        lost.append(f"explain failed: [{exc.code}] {exc.message}")
        explanation = {"timeline": [], "path": [], "state": None}
    path = tuple(explanation["path"])
    problems += _path_problems(explanation["timeline"])
    if explanation["state"] != status.get("state") or status.get("jobId") != job.job_id:
        lost.append(f"status says {status.get('state')} of job {status.get('jobId')}, the journal "
                    f"{explanation['state']} of job {job.job_id}")
    lost += _journal_problems(job)
    if job.handoff is not None:
        try:
            job.store.verify_handoff(job.thread_id, job.job_id, status.get("handoffSha256"))
        except RekallError as exc:
            lost.append(f"handoff does not verify: [{exc.code}] {exc.message}")
    if status.get("state") not in TERMINAL:
        problems.append(f"not terminal: {status.get('state')}")
    if job.lock_left and not job.killed:
        problems.append("the worker ended and left the thread's lock behind")
    if job.store.lock_path(job.thread_id).exists():
        problems.append("the thread's lock is still there after the worker ended and the status reaped")
    compacts, turns = job.job_counts()
    if compacts > 1 or turns > 1:
        problems.append(f"duplicate requests: {compacts} compact, {turns} start-turn")
    problems += _truth_problems(status, path, job.owner_effects(job.job_id), job)
    return Audit(state=str(status.get("state")), error_code=status.get("errorCode"),
                 outcome_may_be_unknown=status.get("outcomeMayBeUnknown"), path=path, compact_requests=compacts,
                 start_turn_requests=turns, data_lost=tuple(lost), problems=tuple(problems))


def _path_problems(timeline: list[dict[str, Any]]) -> list[str]:
    """Every step must be a row of its machine's table, starting from the schedule record."""
    if not timeline:
        return ["empty journal"]
    first = timeline[0]
    problems = [] if (first["trigger"], first["to"]) == (SCHEDULE, "scheduled") else [f"odd first record {first}"]
    for row in timeline[1:]:
        if row["from"] in TERMINAL:
            problems.append(f"a transition after the terminal state {row['from']}: {row['trigger']}")
        elif table_named(row["machine"]).find_row(state_named(row["from"]), row["trigger"],
                                                  state_named(row["to"])) is None:
            problems.append(f"no table row {row['from']} --{row['trigger']}--> {row['to']}")
    return problems


def _journal_problems(job: ChaosJob) -> list[str]:
    assert job.job_id is not None
    try:
        scan = scan_journal(job.store.journal_path(job.thread_id, job.job_id))
    except (RekallError, OSError) as exc:
        return [f"journal unreadable: {exc}"]
    return [f"{scan.torn_bytes} torn bytes left at the journal's end"] if scan.torn_bytes else []


def _truth_problems(status: Mapping[str, Any], path: tuple[str, ...],
                    effects: tuple[list[str], list[str], list[str]], job: ChaosJob) -> list[str]:
    """The status may say "unknown"; it may never say something the owner contradicts."""
    started, completed, turns = effects
    state, unknown = status.get("state"), status.get("outcomeMayBeUnknown")
    problems = []
    if "compactionId" in status and status["compactionId"] not in completed:
        problems.append(f"compaction {status['compactionId']} was reported but the owner completed {completed}")
    if state == "resumed" and turns != [status.get("resumeTurnId")]:
        problems.append(f"resumed with turn {status.get('resumeTurnId')} but the owner started {turns}")
    if len(turns) > 1 or len(started) > 1:
        problems.append(f"the owner acted twice: compactions {started}, turns {turns}")
    if unknown is False and state in ("cancelled", "failed", "timed_out"):
        if "accepted" not in path and started:
            problems.append(f"{state} with a known outcome before acceptance, but the owner compacted {started}")
        if "resuming" not in path and turns:
            problems.append(f"{state} with a known outcome before resuming, but the owner started {turns}")
        if "resuming" in path and turns:
            problems.append(f"{state} with a known outcome after resuming, but the owner started {turns}")
    if state == "cancelled" and status.get("reason") == "explicit_cancellation":
        assert job.job_id is not None
        if not job.store.cancel_path(job.thread_id, job.job_id).exists():
            problems.append("cancelled on request, but no cancel marker was ever written")
    return problems
