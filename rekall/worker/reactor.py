"""The detached worker: carries one job from ``scheduled`` to a terminal state.

The worker is a thin reactor around the pure policy in :mod:`rekall.worker.policy`. Everything that
can happen arrives as an item on one queue: domain events from the platform (the thread went
idle, a compaction completed, the connection dropped), and the worker's own timers and
signals (a timer ran out, the deadline passed, a cancel marker appeared, a request answered).
One consumer handles the items in order, so there are no races between them and no polling
loops: the latency that remains is the debounce we chose.

For each item the reactor asks the policy what to do, given the job, the thread's facts as
the platform reports them now and the policy's memo, and executes the steps it returns
(fire a trigger, send a request, arm or disarm a timer, journal a note, reconnect, verify
the handoff), feeding the outcome of a step back to the policy until no step remains. It
never assigns a state: the lifecycle machine in ``rekall.states`` decides, journaling every
transition before it takes effect. Nothing is ever retried: each request is sent at most
once per job.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rekall.worker import timers
from rekall.kernel.settings import WorkerSettings
from rekall.kernel.errors import IpcError, RekallError
from rekall.adapters.contract import FollowedThread, Platform
from rekall.kernel.records import Acted, Failure
from rekall.adapters.owners import platform_named
from rekall.adapters.resume import ResumeToken

log = logging.getLogger("rekall.worker")

#: `rekall cancel` wakes the worker with a signal; this slow check of the marker covers
#: platforms without SIGUSR1 and a signal lost to a race with start-up.
_CANCEL_SAFETY_POLL_S = 1.0
#: A decision's steps and their outcomes are applied in rounds; a handful suffice (idle held,
#: handoff verified, idle_stable fired, request sent). More means the policy is looping.
MAX_ROUNDS = 16

#: After a request has left, what its steps held back (the status file, the log lines, the
#: handoff validated ahead) waits this long, unless the next item comes first: the owner, woken
#: by the request's bytes, gets the CPU before the worker's own writes (written at once, they
#: compete with the owner's read of the request where cores are few).
HELD_AFTER_REQUEST_S = 0.003

#: The queue item a cancel signal puts (the marker is checked when it is handled).
_CANCEL_SIGNALLED = object()


def _on_first_use(name: str) -> ModuleType:
    """Module ``name``, executed when one of its attributes is first used (importlib's
    ``LazyLoader``); at once if it is already loaded."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# Needed once the thread is followed: its import (attrs classes) is not paid before the follow
# goes out. The store and the lifecycle's states are imported where they are first used, for the
# same reason (see ``Worker.store``); not through ``_on_first_use``, which suits a module but
# not a package whose submodules are imported directly (Python 3.11 would load them twice).
if TYPE_CHECKING:
    from rekall.worker import policy
    from rekall.states import JobState
    from rekall.states.status import JobStatus
    from rekall.store import JobStore
    from rekall.worker.courier import Courier
else:
    policy = _on_first_use("rekall.worker.policy")


class _Seen:
    """A domain event from the platform and when the platform saw it (``None``: not said)."""

    __slots__ = ("event", "at")

    def __init__(self, event: Any, at: float | None) -> None:
        self.event, self.at = event, at


class Worker:
    """One job's reactor. ``run()`` returns the terminal state it reached."""

    def __init__(
        self,
        store: JobStore | None,
        thread_id: str,
        job_id: str,
        *,
        settings: WorkerSettings,
        env: Mapping[str, str] | None = None,
        platform: Platform | None = None,
        scheduled: ResumeToken | None = None,
    ) -> None:
        self._store = store  # ``None``: opened on first use (see ``store``)
        self.thread_id = thread_id
        self.job_id = job_id
        self.settings = settings
        self.env = os.environ if env is None else env
        self.lifecycle: Any = None  # opened by the claim in ``run``
        #: The platform the job was scheduled on (read from the job when it is claimed).
        self.platform: Platform | None = platform
        self._given_platform = platform
        #: Where schedule found the thread, as its command line said (``None``: it did not say),
        #: with the first follow made before the event loop, if any: the platform goes on from it.
        #: The claim checks it against the journal.
        self.scheduled = scheduled
        #: The journal contradicted the command line: what was followed on its word is closed once claimed.
        self._journal_disagreed = False
        self.thread: FollowedThread | None = None  # followed once connected
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.memo: policy.Memo | None = None  # set from the first snapshot
        self._item_at = self._decided_at = time.monotonic()
        self._timers: dict[str, timers.Timer] = {}
        self.courier: Courier | None = None  # the handoff's, from the claim on
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handles: list[timers.Timer | asyncio.TimerHandle] = []
        self._requested = False  # a request was sent by the steps being executed (see ``_apply``)
        #: Log lines of the transitions made by the steps being executed (``None`` outside ``_apply``).
        self._held_log: list[tuple[str, JobState, JobState]] | None = None
        #: What a request's steps held back, and the timer that writes it (see ``_apply``).
        self._held_after_request: tuple[asyncio.TimerHandle, list[tuple[str, JobState, JobState]]] | None = None
        self._job: policy.Job | None = None  # what the rules read of the job, while its fields stand
        self._job_status: JobStatus | None = None

    # --- small helpers ---------------------------------------------------------------

    @property
    def store(self) -> JobStore:
        """The job store, opened on first use: a worker started with what schedule journaled
        follows the thread before it loads the store (its modules replay journals and build the
        lifecycle's records)."""
        if self._store is None:
            from rekall.store import JobStore

            self._store = JobStore.open(self.env)
        return self._store

    @property
    def state(self) -> JobState:
        return self.lifecycle.state

    @property
    def connected(self) -> bool:
        return self.memo is not None and self.memo.connected

    @property
    def done(self) -> bool:
        return self.lifecycle is not None and self.state.terminal

    def _fire(self, trigger: str, **evidence: Any) -> JobState:
        before = self.state
        after = self.lifecycle.fire(trigger, **evidence)
        if self._held_log is not None:  # the journal has it; the log line can follow the request
            self._held_log.append((trigger, before, after))
        else:
            log.info("%s: %s -> %s", trigger, before.value, after.value)
        return after

    def _fail(self, code: str, message: str, delivery: str | None = None) -> None:
        if not self.done:
            step = policy.fail(code, message, delivery)
            self._fire(step.trigger, **step.evidence)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _later(self, delay: float, item: Any) -> timers.Timer:
        return self._at(time.monotonic() + delay, item)

    def _at(self, when: float, item: Any) -> timers.Timer:
        handle = timers.call_at(when, self.queue.put_nowait, item)  # a debounce ends when due
        self._handles.append(handle)
        return handle

    # --- run -------------------------------------------------------------------------

    def _claim(self, me: int, started: str | None) -> None:
        """Take the job, once. Under the store's guard and from a fresh read of the journal,
        so that a second worker started for the same job (or a worker restarted for it)
        refuses instead of running it too; only the winner opens the journal for writing."""
        from rekall.states import JobState

        with self.store.guarded():  # not reentrant: no guarded store call inside
            job = self.store.load(self.thread_id, self.job_id)  # read-only: another worker may be writing
            if job.view.status.jobId != self.job_id:
                raise RekallError("job identity mismatch: the journal names another job",
                                  code="job_identity_mismatch",
                                  hint="inspect the thread with `rekall status`; this worker does nothing")
            if job.state is not JobState.SCHEDULED:
                raise RekallError(f"job {self.job_id} is {job.state.value}, not scheduled; only its own worker "
                                  "runs it, once", code="job_already_started", hint="inspect it with `rekall explain`")
            recorded = ResumeToken.recorded(job.view.status)
            if self.scheduled is not None and not self.scheduled.says_same_as(recorded):  # the journal decides
                log.warning("the command line said the job was scheduled on %s, its journal says %s: "
                            "following the thread again, on what the journal says", self.scheduled.to_argument(),
                            recorded.to_argument())
                self.platform, self._journal_disagreed = self._given_platform, True
            if self.platform is None:  # the one schedule found; never guessed again here
                self.platform = platform_named(recorded.platform, self.env, resume=recorded)
            self.lifecycle = self.store.open_lifecycle(self.thread_id, self.job_id)
            from rekall.worker.courier import Courier

            self.courier = Courier(self.store, self.lifecycle, self.thread_id, self.job_id)
            if self.store.cancel_requested(self.thread_id, self.job_id):
                self._fire("cancel", reason="explicit_cancellation")  # cancelled before we started
                return
            self._fire("worker_started", jobId=self.job_id, pid=me, host=socket.gethostname(),
                       processStartTime=started, platform=self.platform.name, deadlineS=self.settings.deadline_s)

    async def run(self) -> JobState:
        me = os.getpid()
        # Where following only reads the thread, it goes out before the claim: the owner sends
        # the snapshot while the rest of the worker loads and the claim is journaled. Nothing
        # that acts on the thread is sent before the journal says that this worker has claimed the job.
        unfollowed = await self._follow_first()
        try:
            # Handlers before the claim: `rekall cancel` signals a job once it is past `scheduled`.
            self._install_cancel_watch()
            from rekall.store import process_start_time

            started = process_start_time(me)
            self._claim(me, started)
        except BaseException:  # refused (the job and its lock belong to another worker), or no store
            await self._stop_watching()
            await self._unfollow()
            raise
        if self.done:  # cancelled before it started: the lock goes with the job
            self.store.release_lock(self.thread_id, self.job_id)
            await self._stop_watching()
            await self._unfollow()
            return self.state
        # The scheduler names us in the lock too, but it may die before it gets there.
        self.store.set_lock_holder(self.thread_id, self.job_id, me, started)
        self._later(self.settings.deadline_s, policy.DeadlinePassed())
        try:
            if self._journal_disagreed:  # the claim found that the journal says otherwise
                await self._unfollow()
                self.thread, unfollowed = None, None
            if unfollowed is not None:  # the follow failed before the claim: the job fails with its error
                raise unfollowed
            if self.thread is None:
                await self._connect()
            assert self.thread is not None
            first = self.thread.snapshot()
            from rekall.worker.courier import injection_limit

            limit = injection_limit(self.settings, self.platform)
            self.memo = policy.Memo(connected=True, baseline=first.facts.completed_compaction_ids,
                                    inject=limit is None, injection_limit=limit)
            self.lifecycle.note("connected", **self.thread.connection_note(), baselineCompactions=len(self.memo.baseline),
                                revision=first.revision)
            self._spawn(self._pump())
            self._item_at = time.monotonic()  # the first snapshot is the first observation
            self._apply(policy.Began())
            while not self.done:
                self._handle(await self.queue.get())
        except RekallError as exc:
            # The journal keeps the message; the log also keeps its cause (an errno, a transport error).
            log.warning("the job fails: %s", exc.message, exc_info=exc.__cause__ is not None)
            self._fail(exc.code, exc.message, getattr(exc, "delivery", None))
        except Exception as exc:  # a bug: record it honestly rather than leave the job hanging
            log.exception("worker error")
            from rekall.states import REQUEST_SENT_UNOBSERVED

            self._fail("worker_error", f"{type(exc).__name__}: {exc}",
                       "unknown" if self.state in REQUEST_SENT_UNOBSERVED else None)
        finally:
            await self._shutdown()
        return self.state

    async def _follow_first(self) -> Exception | None:
        """Follow the thread now, before the claim, if following only reads it on the job's
        platform. That platform is what schedule journaled: as its command line said, before
        the store is even loaded (the claim checks it against the journal, under the store's
        guard); without that, as the job reads now, and not for a job the claim will refuse or
        cancel (started, cancelled, unreadable). The follow's failure is returned, to fail the
        job with once it is claimed."""
        try:
            said = self.scheduled
            if said is None:  # started without it (by an older rekall's schedule): read the job
                from rekall.states import JobState

                job = self.store.load(self.thread_id, self.job_id)
                if (job.view.status.jobId != self.job_id or job.state is not JobState.SCHEDULED
                        or self.store.cancel_requested(self.thread_id, self.job_id)):
                    return None
                said = ResumeToken.recorded(job.view.status)
            if self.platform is None:  # the one schedule found; never guessed
                self.platform = platform_named(said.platform, self.env, resume=said)
        except RekallError:
            return None  # the claim reads the job again and says why
        if not self.platform.follow_only_reads:
            return None  # followed once the job is claimed
        try:
            await self._connect()
        except Exception as exc:  # noqa: BLE001 - handled as before, once the job is claimed
            return exc
        return None

    async def _connect(self) -> None:
        assert self.platform is not None  # set when the job was claimed
        self.thread = await self.platform.follow(self.thread_id, request_timeout_s=self.settings.request_timeout_s)

    async def _pump(self) -> None:
        """Forward the platform's domain events onto the queue, with when the platform saw them."""
        async for event in self.thread.events():
            # When the platform knew the fact (the extension: when the frame that showed it arrived), if it says.
            self.queue.put_nowait(_Seen(event, self.thread.seen_at))

    async def _shutdown(self) -> None:
        self._release_held()
        self.lifecycle.save_status()  # a deferred write (see ``_apply``) lands before the lock goes
        # The lock goes first: once the outcome is journaled, a new job may be scheduled.
        self.store.release_lock(self.thread_id, self.job_id)
        await self._stop_watching()
        await self._unfollow()

    async def _unfollow(self) -> None:
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
            loop.add_signal_handler(signal.SIGUSR1, self.queue.put_nowait, _CANCEL_SIGNALLED)
        self._spawn(self._cancel_safety_poll())
        if self.store.cancel_requested(self.thread_id, self.job_id):
            self.queue.put_nowait(_CANCEL_SIGNALLED)

    async def _cancel_safety_poll(self) -> None:
        while True:
            await asyncio.sleep(_CANCEL_SAFETY_POLL_S)
            if self.store.cancel_requested(self.thread_id, self.job_id):
                self.queue.put_nowait(_CANCEL_SIGNALLED)
                return

    # --- the reactor -------------------------------------------------------------------

    def _handle(self, item: Any) -> None:
        self._item_at = time.monotonic()  # debounces count from when a fact arrived, not from our work
        if isinstance(item, _Seen):
            if item.at is not None:  # the platform saw it before the queue brought it here
                self._item_at = min(item.at, self._item_at)
            item = policy.Observed(item.event)
        elif item is _CANCEL_SIGNALLED:  # the event carries what it reports: is the marker there?
            item = policy.CancelSignalled(self.store.cancel_requested(self.thread_id, self.job_id))
        self._apply(item)

    def _apply(self, event: policy.Event) -> None:
        """Ask the policy, execute its steps, feed their outcomes back, until none remain.

        The status file and the transitions' log lines wait until the steps are done: when a
        request was sent, :data:`HELD_AFTER_REQUEST_S` more, or until the next item is handled,
        whichever comes first, so that they are always written in order. Only the journal
        record (appended and fsynced by ``fire``) has to precede a request."""
        self._release_held()
        self.lifecycle.hold_status = True
        self._requested = False
        self._held_log = []
        try:
            self._decide_and_execute(event)
        except BaseException:
            self._requested = False  # the job fails next: what was held is written first, in order
            raise
        finally:
            self.lifecycle.hold_status = False
            if self._requested:
                loop = asyncio.get_running_loop()
                self._held_after_request = (loop.call_later(HELD_AFTER_REQUEST_S, self._release_held), self._held_log)
                self._handles.append(loop.call_later(HELD_AFTER_REQUEST_S, self.courier.validate_ahead))
            else:
                self._catch_up(self._held_log)
            self._held_log = None

    def _release_held(self) -> None:
        """Write what a request's steps held back, if it is still waiting."""
        if self._held_after_request is not None:
            timer, held_log = self._held_after_request
            self._held_after_request = None
            timer.cancel()
            self._catch_up(held_log)

    def _catch_up(self, held_log: list[tuple[str, JobState, JobState]]) -> None:
        """What the steps held back: the status file, then their transitions' log lines."""
        self.lifecycle.save_status()
        for trigger, before, after in held_log:
            log.info("%s: %s -> %s", trigger, before.value, after.value)

    def _decide_and_execute(self, event: policy.Event) -> None:
        pending = [event]
        for _ in range(MAX_ROUNDS):
            if not pending:
                return
            assert self.thread is not None and self.memo is not None
            self._decided_at = time.monotonic()  # a timer's delay counts from here, not from when it is armed
            decision = policy.decide(self._job_now(), self.thread.snapshot(), pending.pop(0), self.memo,
                                     at=self._item_at, now=self._decided_at)
            self.memo = decision.memo
            for step in decision.steps:
                if (outcome := self._execute(step)) is not None:
                    pending.append(outcome)
        if pending:
            raise RuntimeError(f"the worker policy did not settle within {MAX_ROUNDS} rounds")

    def _job_now(self) -> policy.Job:
        """What the rules read of the job; read again only when a transition changed its fields."""
        status = self.lifecycle.job_status
        if self._job is None or self._job_status is not status:
            self._job, self._job_status = policy.Job.of(self.lifecycle.view, self.settings), status
        return self._job

    def _execute(self, step: policy.Step) -> policy.Event | None:
        thread = self.thread
        assert thread is not None  # steps are taken only once the thread is followed
        match step:
            case policy.Fire(trigger=trigger, evidence=evidence, then=then):
                state = self._fire(trigger, **evidence)
                return None if then is None else policy.Fired(then, state)
            case policy.Send(kind="compact"):
                self._send(thread.compact, "compact")
            case policy.Send(kind="deliver"):
                from rekall.worker.courier import Outgoing

                assert self.courier is not None  # made by the claim
                outgoing = self.courier.prepare(thread)
                if not isinstance(outgoing, Outgoing):
                    return outgoing  # nothing leaves: why comes back to the policy
                self._send(outgoing.request, "deliver", outgoing.sent_bytes)
            case policy.Arm(timer=timer, delay=delay, serial=serial):
                self._disarm(timer)
                self._timers[timer] = self._at(self._decided_at + delay, policy.TimerFired(timer, serial))
            case policy.Disarm(timer=timer):
                self._disarm(timer)
            case policy.Note(kind=kind, detail=detail):
                self.lifecycle.note(kind, **detail)
            case policy.Reconnect():
                self._spawn(self._reconnect())
            case policy.VerifyHandoff(passed=passed):
                assert self.courier is not None  # made by the claim
                if (problem := self.courier.verify()) is not None:
                    return policy.HandoffChecked(problem)
                return self._execute(passed)
        return None

    def _disarm(self, timer: str) -> None:
        if (handle := self._timers.pop(timer, None)) is not None:
            handle.cancel()

    def _send(self, request: Callable[[], Awaitable[Acted]], kind: policy.Request,
              sent_bytes: int | None = None) -> None:
        """Send a request in this step (a platform that can writes it before ``request()`` returns,
        with no task switch before its bytes leave); its answer comes back as ``RequestDone``."""
        def unexpected(exc: Exception) -> Acted:  # a bug below us; the request may have gone out
            log.exception("%s request failed unexpectedly", kind)
            return Acted(Failure("worker_error", f"{type(exc).__name__}: {exc}", "unknown"))

        self._requested = True
        try:
            answer = request()
        except Exception as exc:
            self.queue.put_nowait(policy.RequestDone(kind, unexpected(exc), sent_bytes))
            return

        async def run() -> None:
            try:
                acted = await answer
            except Exception as exc:
                acted = unexpected(exc)
            self.queue.put_nowait(policy.RequestDone(kind, acted, sent_bytes))

        self._spawn(run())

    # --- connection loss ---------------------------------------------------------------

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
            self.queue.put_nowait(policy.ReconnectDone())
            return
        detail = error.message if error is not None else "no attempt fitted in the window"
        log.warning("reconnecting gave up after %d attempts: %s", attempt - 1, detail,
                    exc_info=error if error is not None and error.__cause__ is not None else None)
        self.queue.put_nowait(policy.ReconnectDone(
            f"{attempt - 1} attempts in {self.settings.reconnect_window_s:g} s, last: {detail}"))
