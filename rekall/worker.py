"""The detached worker: carries one job from ``scheduled`` to a terminal state.

The worker is a small reactor. Everything that can happen arrives as an item on one
queue: domain events from the adapter (the thread went idle, a compaction completed, the
connection dropped), and the worker's own timers and signals (stable idle held, the
deadline passed, a cancel marker appeared, a request answered). One consumer handles the
items in order, so there are no races between them and no polling loops: the latency that
remains is the debounce we chose.

After each item the worker looks at the thread's derived facts (kept up to date
incrementally by the platform's thread model) and decides which lifecycle trigger, if any, the
facts justify. It never assigns a state: it fires triggers with their evidence, and the
lifecycle machine in ``rekall.states`` decides, journaling every transition before it takes
effect. Nothing is ever retried: each request is sent at most once per job.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from rekall import events as ev
from rekall.config import WorkerSettings
from rekall.continuation import continuation_text
from rekall.errors import IpcError, RekallError
from rekall.platform import Acted, Failure, FollowedThread, Platform, ThreadSnapshot, platform_for
from rekall.states import REQUEST_SENT_UNOBSERVED, SUCCESSFUL_END_STATES, TERMINAL_STATES, JobState
from rekall.store import JobStore, process_start_time

log = logging.getLogger("rekall.worker")

#: `rekall cancel` wakes the worker with a signal; this slow check of the marker covers
#: platforms without SIGUSR1 and a signal lost to a race with start-up.
_CANCEL_SAFETY_POLL_S = 1.0


# --- the worker's own queue items ------------------------------------------------------


@attrs.frozen
class _IdleHeld:
    generation: int


@attrs.frozen
class _SystemErrorHeld:
    generation: int


@attrs.frozen
class _TelemetryWaitOver:
    pass


@attrs.frozen
class _CancelSignalled:
    pass


@attrs.frozen
class _DeadlinePassed:
    pass


@attrs.frozen
class _RequestDone:
    kind: str  # "compact" or "start_turn"
    acted: Acted


@attrs.frozen
class _ReconnectDone:
    error: RekallError | None = None


class Worker:
    """One job's reactor. ``run()`` returns the terminal state it reached."""

    def __init__(
        self,
        store: JobStore,
        thread_id: str,
        job_id: str,
        *,
        settings: WorkerSettings,
        env: Mapping[str, str] | None = None,
        platform: Platform | None = None,
    ) -> None:
        self.store = store
        self.thread_id = thread_id
        self.job_id = job_id
        self.settings = settings
        self.env = os.environ if env is None else env
        self.lifecycle: Any = None  # opened by the claim in ``run``
        self.platform: Platform = platform_for(self.env) if platform is None else platform
        self.thread: FollowedThread | None = None  # followed once connected
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.baseline: frozenset[str] = frozenset()
        self.completion_order: list[str] = []
        self.connected = False
        self._idle_generation = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        #: The state the running idle timer was started in (its length depends on it).
        self._idle_timer_state: JobState | None = None
        #: A request's answer or its connection was lost: once the owner is reachable again,
        #: the settle rule may end the job (see ``outcome_settled`` in the table).
        self._outcome_unknown = False
        self._idle_since: float | None = None
        self._system_error_generation = 0
        self._system_error_timer: asyncio.TimerHandle | None = None
        self._system_error_since = 0.0
        self._item_at = time.monotonic()
        self._telemetry_wait: asyncio.TimerHandle | None = None
        self._telemetry_wait_over = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handles: list[asyncio.TimerHandle] = []

    # --- small helpers ---------------------------------------------------------------

    @property
    def state(self) -> JobState:
        return self.lifecycle.state

    @property
    def status(self) -> Mapping[str, Any]:
        return self.lifecycle.status

    @property
    def done(self) -> bool:
        return self.lifecycle is not None and self.state in TERMINAL_STATES

    def _fire(self, trigger: str, **evidence: Any) -> JobState:
        before = self.state
        after = self.lifecycle.fire(trigger, **evidence)
        log.info("%s: %s -> %s", trigger, before.value, after.value)
        return after

    def _fail(self, code: str, message: str, delivery: str | None = None) -> None:
        if self.done:
            return
        evidence: dict[str, Any] = {"errorCode": code, "error": message}
        if delivery:
            evidence["delivery"] = delivery
        self._fire("fail", **evidence)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _later(self, delay: float, item: Any) -> asyncio.TimerHandle:
        handle = asyncio.get_running_loop().call_later(delay, self.queue.put_nowait, item)
        self._handles.append(handle)
        return handle

    # --- run -------------------------------------------------------------------------

    def _claim(self, me: int, started: str | None) -> None:
        """Take the job, once. Under the store's guard and from a fresh read of the journal,
        so that a second worker started for the same job (or a worker restarted for it)
        refuses instead of running it too; only the winner opens the journal for writing."""
        with self.store.guarded():  # not reentrant: no guarded store call inside
            job = self.store.load(self.thread_id, self.job_id)  # read-only: another worker may be writing
            if job.view.fields.get("jobId") != self.job_id:
                raise RekallError("job identity mismatch: the journal names another job",
                                  code="job_identity_mismatch",
                                  hint="inspect the thread with `rekall status`; this worker does nothing")
            if job.state is not JobState.SCHEDULED:
                raise RekallError(f"job {self.job_id} is {job.state.value}, not scheduled; only its own worker "
                                  "runs it, once", code="job_already_started", hint="inspect it with `rekall explain`")
            self.lifecycle = self.store.open_lifecycle(self.thread_id, self.job_id)
            if self.store.cancel_path(self.thread_id, self.job_id).exists():
                self._fire("cancel", reason="explicit_cancellation")  # cancelled before we started
                return
            self._fire("worker_started", jobId=self.job_id, pid=me, host=socket.gethostname(),
                       processStartTime=started, platform=self.platform.name)

    async def run(self) -> JobState:
        me, started = os.getpid(), process_start_time(os.getpid())
        # Handlers first: `rekall cancel` signals a job once it is past `scheduled`.
        self._install_cancel_watch()
        try:
            self._claim(me, started)
        except BaseException:  # refused: the job and its lock belong to another worker
            await self._stop_watching()
            raise
        if self.done:  # cancelled before it started: the lock goes with the job
            self.store.release_lock(self.thread_id, self.job_id)
            await self._stop_watching()
            return self.state
        # The scheduler names us in the lock too, but it may die before it gets there.
        self.store.set_lock_owner(self.thread_id, self.job_id, me, started)
        self._later(self.settings.deadline_s, _DeadlinePassed())
        try:
            await self._connect()
            self.baseline = frozenset(self.thread.snapshot().facts.completed_compaction_ids)
            self.lifecycle.note("connected", **self.thread.evidence(), baselineCompactions=len(self.baseline),
                                revision=self.thread.snapshot().revision)
            self._spawn(self._pump())
            self._item_at = time.monotonic()  # the first snapshot is the first observation
            self._consider()
            while not self.done:
                await self._handle(await self.queue.get())
        except RekallError as exc:
            self._fail(exc.code, exc.message, getattr(exc, "delivery", None))
        except Exception as exc:  # a bug: record it honestly rather than leave the job hanging
            log.exception("worker error")
            self._fail("worker_error", f"{type(exc).__name__}: {exc}",
                       "unknown" if self._request_sent_unobserved() else None)
        finally:
            await self._shutdown()
        return self.state

    async def _connect(self) -> None:
        self.thread = await self.platform.follow(self.thread_id, request_timeout_s=self.settings.request_timeout_s)
        self.connected = True

    async def _pump(self) -> None:
        """Forward the platform's domain events onto the queue."""
        async for event in self.thread.events():
            self.queue.put_nowait(event)

    async def _shutdown(self) -> None:
        # The lock goes first: once the outcome is journaled, a new job may be scheduled.
        self.store.release_lock(self.thread_id, self.job_id)
        await self._stop_watching()
        if self.thread is not None:
            try:
                await self.thread.aclose()
            except Exception:  # closing is best effort; the job's outcome is already recorded
                log.exception("closing the followed thread failed")

    async def _stop_watching(self) -> None:
        if hasattr(signal, "SIGUSR1"):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)
        for handle in self._handles:
            handle.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- cancellation ------------------------------------------------------------------

    def _install_cancel_watch(self) -> None:
        """`rekall cancel` writes a marker and signals us (SIGUSR1 where it exists)."""
        loop = asyncio.get_running_loop()
        if hasattr(signal, "SIGUSR1"):
            loop.add_signal_handler(signal.SIGUSR1, self.queue.put_nowait, _CancelSignalled())
        self._spawn(self._cancel_safety_poll())
        if self.store.cancel_path(self.thread_id, self.job_id).exists():
            self.queue.put_nowait(_CancelSignalled())

    async def _cancel_safety_poll(self) -> None:
        marker = self.store.cancel_path(self.thread_id, self.job_id)
        while True:
            await asyncio.sleep(_CANCEL_SAFETY_POLL_S)
            if marker.exists():
                self.queue.put_nowait(_CancelSignalled())
                return

    # --- the reactor -------------------------------------------------------------------

    async def _handle(self, item: Any) -> None:
        self._item_at = time.monotonic()  # debounces count from when a fact arrived, not from our work
        if isinstance(item, _CancelSignalled):
            if self.store.cancel_path(self.thread_id, self.job_id).exists():
                self._fire("cancel", reason="explicit_cancellation")
            return
        if isinstance(item, _DeadlinePassed):
            self._fire("deadline", deadlineS=self.settings.deadline_s)
            return
        if isinstance(item, _RequestDone):
            self._on_request_done(item)
        elif isinstance(item, _ReconnectDone):
            if item.error is not None:
                self._fail("connection_lost", f"could not reconnect: {item.error.message}",
                           "unknown" if self._request_sent_unobserved() else None)
                return
            self.connected = True
            self.lifecycle.note("reconnected", ownerId=self.thread.snapshot().owner_id,
                                revision=self.thread.snapshot().revision)
        elif isinstance(item, _IdleHeld):
            if item.generation == self._idle_generation and self.connected:
                self._idle_timer = None
                self._on_idle_held()
                return
        elif isinstance(item, _SystemErrorHeld):
            if item.generation == self._system_error_generation and self.connected:
                self._system_error_timer = None
                self._on_system_error_held()
                return
        elif isinstance(item, _TelemetryWaitOver):
            self._telemetry_wait_over = True
        elif isinstance(item, ev.ConnectionLost):
            self._on_connection_lost(item)
            return
        elif isinstance(item, ev.ProtocolChanged):
            self._fail("protocol_version_unsupported",
                       f"extension protocol changed: {item.method} v{item.version} seen, no adapter "
                       f"({item.detail})")
            return
        elif isinstance(item, ev.LayoutIncompatible):
            self._fail("layout_incompatible", f"unsupported extension state layout: {item.detail}")
            return
        elif isinstance(item, ev.Resynced):
            self.lifecycle.note("resynced", reason=item.reason, count=item.count, revision=item.revision)
        elif isinstance(item, ev.CompactionCompleted):
            self.completion_order.append(item.compaction_id)
        if not self.done:
            self._consider()

    def _consider(self) -> None:
        """Decide from the thread's current facts what, if anything, to do next."""
        if self.done or not self.connected:
            return
        seen = self.thread.snapshot()
        if seen.facts.layout_problem:
            self._fail("layout_incompatible", f"unsupported extension state layout: {seen.facts.layout_problem}")
            return
        state = self.state
        if state is not JobState.RESUMING and self._user_moved_on(seen):
            return
        if state is JobState.WAITING_FOR_IDLE and seen.facts.running_compaction_ids:
            self._refuse_second_compaction(seen)
        elif state in (JobState.WAITING_FOR_IDLE, JobState.WAITING_FOR_RESUME_IDLE):
            self._track_idle(seen.facts.idle)
            self._track_system_error(_stuck_in_system_error(seen))
        elif state in (JobState.REQUESTING, JobState.ACCEPTED):
            self._look_for_completion(seen)
            if self.state is state and self._outcome_unknown:  # quiet: idle, nothing compacting or compacted
                new = set(seen.facts.completed_compaction_ids) - self.baseline
                self._track_idle(seen.facts.idle and not seen.facts.running_compaction_ids and not new)

    def _user_moved_on(self, seen: ThreadSnapshot) -> bool:
        """New input, steering or a stopped turn cancels the job (before the resume is sent)."""
        if seen.facts.interrupted:
            self._fire("cancel", reason="user_turn_stopped")
            return True
        if seen.facts.boundary_fingerprint != self.status.get("userFingerprint"):
            self._fire("cancel", reason="new_user_input")
            return True
        return False

    def _refuse_second_compaction(self, seen: ThreadSnapshot) -> None:
        """A compaction this job did not ask for is running (say, a lost worker's): asking for
        another would compact the thread twice."""
        running = ", ".join(sorted(seen.facts.running_compaction_ids))
        self._fail("compaction_in_progress", f"the thread shows a compaction in progress ({running}) that this "
                                             "job did not request; no second compaction was requested")

    # --- stable idle -------------------------------------------------------------------

    def _track_idle(self, idle: bool) -> None:
        """Debounce idle: it must hold for the stable interval (the settle window while an
        outcome is unknown, where "idle" also means no compaction in progress)."""
        if self._idle_timer is not None and self._idle_timer_state is not self.state:
            self._track_idle(False)  # a timer started in another state has another length
        if not idle:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
                self._idle_generation += 1
            self._idle_since = None
            return
        # Idle is tracked only in the waiting states, where no request that matters is in
        # flight (a late answer to the compact request changes nothing once it completed).
        if self._idle_timer is None:
            self._idle_generation += 1
            self._idle_since = self._item_at
            self._idle_timer_state = self.state
            hold = self.settings.settle_s if self._settling() else self.settings.idle_stable_s
            remaining = hold - (time.monotonic() - self._item_at)
            self._idle_timer = self._later(max(0.0, remaining), _IdleHeld(self._idle_generation))

    def _settling(self) -> bool:
        return self._outcome_unknown and self.state in (JobState.REQUESTING, JobState.ACCEPTED)

    def _on_idle_held(self) -> None:
        seen = self.thread.snapshot()
        if not seen.facts.idle:
            return
        idle_ms = round((time.monotonic() - (self._idle_since or time.monotonic())) * 1000)
        if self._settling():
            # What was seen goes to the table's settle rule; it decides.
            self._fire("outcome_settled", idle=seen.facts.idle, compactionsInProgress=len(seen.facts.running_compaction_ids),
                       quietMs=idle_ms, settleWindowS=self.settings.settle_s, runtimeStatus=seen.facts.runtime_status,
                       ownerId=seen.owner_id, revision=seen.revision)
            return
        common = dict(idleMs=idle_ms, tokens=seen.facts.tokens, window=seen.facts.window, revision=seen.revision,
                      boundaryFingerprint=seen.facts.boundary_fingerprint)
        if self.state is JobState.WAITING_FOR_IDLE:
            if seen.facts.running_compaction_ids:  # the request step looks again, whatever event came last
                self._refuse_second_compaction(seen)
                return
            # The baseline is retaken at the moment of the request: any completed compaction
            # that exists now is not ours.
            self.baseline = frozenset(seen.facts.completed_compaction_ids)
            if self._fire("idle_stable", **common) is JobState.REQUESTING:
                self._send(lambda: self.thread.compact(), "compact")
        elif self.state is JobState.WAITING_FOR_RESUME_IDLE:
            record = self._verified_handoff()
            if record is None:
                return
            if self._fire("idle_stable", handoffVerified=True, **common) is JobState.RESUMING:
                text = continuation_text(record, str(self.store.handoff_path(self.thread_id, self.job_id)))
                self._send(lambda: self.thread.start_turn(text, self.job_id), "start_turn")

    # --- a runtime stuck in systemError ----------------------------------------------

    def _track_system_error(self, stuck: bool) -> None:
        """The window starts when the fact arrived, like the idle debounce; any change resets it."""
        if not stuck:
            if self._system_error_timer is not None:
                self._system_error_timer.cancel()
                self._system_error_timer = None
                self._system_error_generation += 1
            return
        if self._system_error_timer is None:
            self._system_error_generation += 1
            self._system_error_since = self._item_at
            remaining = self.settings.system_error_window_s - (time.monotonic() - self._item_at)
            self._system_error_timer = self._later(max(0.0, remaining),
                                                   _SystemErrorHeld(self._system_error_generation))

    def _on_system_error_held(self) -> None:
        seen = self.thread.snapshot()
        if _stuck_in_system_error(seen):
            held_ms = round((time.monotonic() - self._system_error_since) * 1000)
            self._fire("system_error_held", runtimeStatus=seen.facts.runtime_status, heldMs=held_ms,
                       windowS=self.settings.system_error_window_s, revision=seen.revision)

    def _verified_handoff(self) -> Mapping[str, Any] | None:
        try:
            return self.store.verify_handoff(self.thread_id, self.job_id, self.status.get("handoffSha256"))
        except RekallError as exc:
            self._fail("handoff_changed", f"saved handoff failed verification: {exc.message}")
            return None

    # --- requests ----------------------------------------------------------------------

    def _send(self, request: Callable[[], Awaitable[Acted]], kind: str) -> None:
        async def run() -> None:
            try:
                acted = await request()
            except Exception as exc:  # a bug below us; the request may have gone out
                log.exception("%s request failed unexpectedly", kind)
                acted = Acted(Failure("worker_error", f"{type(exc).__name__}: {exc}", "unknown"))
            self.queue.put_nowait(_RequestDone(kind, acted))

        self._spawn(run())

    def _on_request_done(self, done: _RequestDone) -> None:
        if self.done:
            return
        failure = done.acted.failure
        if done.kind == "compact" and self.state is JobState.REQUESTING:
            if failure is None:
                self._fire("compaction_accepted", ownerId=self.thread.snapshot().owner_id)
            elif failure.code == "connection_lost" and failure.delivery == "not_delivered":
                # The link was already gone: provably nothing was sent.
                self._fail(failure.code, failure.message, "not_delivered")
            elif failure.code == "connection_lost":
                # The request may have arrived. Keep watching after reconnecting: a new
                # completed compaction is proof of acceptance; a quiet owner settles it.
                self._outcome_unknown = True
                self.lifecycle.note("compact_ack_lost", error=failure.message)
            else:
                self._fail(failure.code, failure.message, failure.delivery)
        elif done.kind == "start_turn" and self.state is JobState.RESUMING:
            if failure is None:
                self._fire("turn_started", turnId=done.acted.turn_id, turnStatus=done.acted.turn_status)
            else:
                self._fail(failure.code, failure.message, failure.delivery)

    # --- completion --------------------------------------------------------------------

    def _look_for_completion(self, seen: ThreadSnapshot) -> None:
        new = set(seen.facts.completed_compaction_ids) - self.baseline
        if not new:
            return
        ordered = [cid for cid in self.completion_order if cid in new] or sorted(new)
        compaction_id = ordered[-1]
        if self.state is JobState.REQUESTING:
            # The acknowledgement is late or was lost with the connection, but the owner
            # compacted: the completion proves acceptance, and the answer can change nothing.
            self._fire("compaction_accepted", ownerId=seen.owner_id, inferredFrom="completion_observed")
        if self.status.get("resume") and not self._telemetry_reflects_compaction(seen):
            if self._telemetry_wait is None:
                self._telemetry_wait = self._later(self.settings.idle_stable_s, _TelemetryWaitOver())
            if not self._telemetry_wait_over:
                return
        self._fire("compaction_completed", compactionId=compaction_id, tokens=seen.facts.tokens,
                   window=seen.facts.window, revision=seen.revision)
        self._consider()

    def _telemetry_reflects_compaction(self, seen: ThreadSnapshot) -> bool:
        """Token telemetry may trail the completed item by a frame; wait briefly for it."""
        before = self.status.get("contextTokensBefore")
        return seen.facts.tokens is not None and (before is None or seen.facts.tokens < before)

    # --- connection loss ---------------------------------------------------------------

    def _request_sent_unobserved(self) -> bool:
        return self.state in REQUEST_SENT_UNOBSERVED

    def _on_connection_lost(self, lost: ev.ConnectionLost) -> None:
        if self.done or not self.connected:
            return
        self.connected = False
        self._track_idle(False)
        self._track_system_error(False)
        if self.state is JobState.ACCEPTED:
            self._outcome_unknown = True  # the compaction may be lost with the owner (a reload)
        self.lifecycle.note("connection_lost", detail=lost.detail)
        self._spawn(self._reconnect())

    async def _reconnect(self) -> None:
        """Backoff for the reconnect window; each attempt rediscovers the owner and resyncs
        the thread model. Only the connection is retried: no request is ever sent again."""
        delays = self.settings.reconnect_delays_s
        give_up_at = time.monotonic() + self.settings.reconnect_window_s
        error: RekallError | None = None
        attempt = 0
        while True:
            delay = delays[min(attempt, len(delays) - 1)]
            attempt += 1
            if time.monotonic() + delay > give_up_at:
                break
            await asyncio.sleep(delay)
            try:
                await self.thread.reconnect()
            except IpcError as exc:
                error = exc
                continue
            self.queue.put_nowait(_ReconnectDone())
            return
        detail = error.message if error is not None else "no attempt fitted in the window"
        self.queue.put_nowait(_ReconnectDone(error=IpcError(
            f"{attempt - 1} attempts in {self.settings.reconnect_window_s:g} s, last: {detail}")))


def _stuck_in_system_error(seen: ThreadSnapshot) -> bool:
    """The runtime says systemError and the user's turn is over: nothing will clear it by itself
    (a failed turn leaves it behind, and the thread still accepts new turns)."""
    return seen.facts.runtime_status == "systemError" and not seen.facts.user_turn_running


def _configure_logging(path: os.PathLike[str] | str) -> None:
    from rekall.store.fsio import open_private_append

    fd = open_private_append(path)  # never through a symlink planted at the log's name
    handler = logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8", buffering=1))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("rekall")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def run_worker(thread_id: str, job_id: str, env: Mapping[str, str] | None = None) -> int:
    """Entry point of ``rekall worker THREAD JOB``: exit 0 on success, 1 otherwise."""
    from rekall.ids import job_id as valid_job, thread_id as valid_thread

    env = os.environ if env is None else env
    thread_id, job_id = valid_thread(thread_id), valid_job(job_id)
    store = JobStore.open(env)
    _configure_logging(store.log_path(thread_id, job_id))
    log.info("worker %s starting for thread %s", job_id, thread_id)
    try:
        worker = Worker(store, thread_id, job_id, settings=WorkerSettings.from_env(env), env=env)
        final = asyncio.run(worker.run())
    except RekallError as exc:
        log.error("worker stopped: %s", exc)
        sys.stderr.write(f"rekall worker: {exc}\n")
        return 1
    log.info("worker finished: %s", final.value)
    return 0 if final in SUCCESSFUL_END_STATES else 1
