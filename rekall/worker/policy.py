"""The worker's rules, as a pure function: what to do about one event.

``decide(job, seen, event, memo)`` looks at the job (its state and the status fields the rules
read), the thread's facts as the event reports them, the event, and the worker's small memo
(baseline, timers, whether an outcome is unknown), and returns the steps to take and the memo
after them. It does no I/O and reads no clock: times arrive with the event. The reactor in
:mod:`rekall.worker.reactor` executes the steps; a :class:`Fire` with ``then`` comes back as a
:class:`Fired` event carrying the state the lifecycle chose, so that a rule that depends on a
transition's outcome (send the compact request only if ``idle_stable`` led to ``requesting``)
stays here. A :class:`Fire` is always the last step of a decision.

The policy never assigns a state: it fires triggers with their evidence and the lifecycle
table in :mod:`rekall.states` decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from rekall.kernel import events as ev
from rekall.kernel.settings import WorkerSettings
from rekall.adapters.contract import Acted, Failure, ThreadSnapshot
from rekall.states import REQUEST_SENT_UNOBSERVED, TERMINAL_STATES, JobState
from rekall.states.evidence import EXPLICIT_CANCELLATION, HOOK_DELIVERED
from rekall.states.status import JobStatus, known
from rekall.store.delivery import CANCEL, FOREIGN, HOOK

Timer = Literal["idle", "system_error", "telemetry"]
Then = Literal["send_compact", "send_start_turn", "completion", "consider"]

_WAITING = (JobState.WAITING_FOR_IDLE, JobState.WAITING_FOR_RESUME_IDLE)
#: What a job in each state waits for (a deadline that passes names it).
WAITING_ON = {
    JobState.SCHEDULED: "its worker to claim it",
    JobState.WAITING_FOR_IDLE: "the thread to stay idle for the stable interval before the compaction",
    JobState.REQUESTING: "the owner's answer to the compact request",
    JobState.ACCEPTED: "the compaction to complete (a new completed compaction item)",
    JobState.WAITING_FOR_RESUME_IDLE: "the thread to stay idle for the stable interval before the continuation",
    JobState.RESUMING: "the owner's answer to the continuation request",
    JobState.INJECTING: "the thread to stay idle (no turn running) before the handoff is injected",
}
_REQUESTED = (JobState.REQUESTING, JobState.ACCEPTED)


# --- inputs -----------------------------------------------------------------------------


@attrs.frozen
class Job:
    """What the rules read of the job."""

    state: JobState
    settings: WorkerSettings
    user_fingerprint: Any = None
    resume: bool = False
    tokens_before: Any = None

    @classmethod
    def of(cls, state: JobState, status: JobStatus, settings: WorkerSettings) -> Job:
        return cls(state, settings, known(status.userFingerprint), bool(known(status.resume)),
                   known(status.contextTokensBefore))


@attrs.frozen
class Running:
    """A timer the worker armed: its serial number (counted up per arming, so a stale timer is
    told apart), when the fact that started it arrived, and (for the idle timer, whose length
    depends on it) the state it was started in."""

    serial: int
    since: float
    state: JobState | None = None


@attrs.frozen
class Memo:
    connected: bool = False
    #: Compactions that are not this job's (taken at connect, retaken at the request).
    baseline: frozenset[str] = frozenset()
    #: A request's answer or its connection was lost: once the owner is reachable again,
    #: the settle rule may end the job (see ``outcome_settled`` in the table).
    outcome_unknown: bool = False
    serial: int = 0
    idle: Running | None = None
    system_error: Running | None = None
    telemetry_wait_armed: bool = False
    telemetry_wait_over: bool = False
    #: Whether the handoff is injected where no continuation will carry it (the setting and the
    #: platform's way in), and if not, why; ``None``: not said (nothing is added to the evidence).
    inject: bool | None = None
    injection_limit: str | None = None
    #: The injection was sent (or is about to be, once the handoff is verified): never twice.
    inject_sent: bool = False
    #: The user boundary when the injection was sent: a turn that starts before its answer may hold it.
    inject_boundary: Any = None


# --- events (besides the platform's domain events, which arrive wrapped in Observed) -------


@attrs.frozen
class Observed:
    """A domain event from the platform."""

    event: ev.DomainEvent


@attrs.frozen
class Began:
    """Connected and baselined: decide from the first snapshot."""


@attrs.frozen
class TimerFired:
    timer: Timer
    serial: int


@attrs.frozen
class CancelSignalled:
    marker_exists: bool


@attrs.frozen
class DeadlinePassed:
    pass


Request = Literal["compact", "start_turn", "inject"]
#: The requests that carry the handoff (each must win the job's delivery claim first).
Delivering = Literal["start_turn", "inject"]


@attrs.frozen
class RequestDone:
    kind: Request
    acted: Acted
    #: For ``inject``: the size of the text sent (UTF-8 bytes).
    sent_bytes: int | None = None


@attrs.frozen
class DeliveryTaken:
    """The handoff was about to be sent (``kind``), but another route holds the job's delivery claim
    (:mod:`rekall.store.delivery`): ``holder`` is its route (``unknown`` where the claim cannot be read),
    ``claim`` its file's name. Nothing was sent."""

    kind: Delivering
    holder: str
    claim: str
    #: For a ``foreign`` holder: what is wrong with the claim file.
    why: str | None = None


@attrs.frozen
class ReconnectDone:
    error: str | None = None


@attrs.frozen
class HandoffChecked:
    """The saved handoff failed the reactor's check (a handoff that passes fires the
    :class:`VerifyHandoff` step's ``passed`` at once: its outcome comes back as :class:`Fired`)."""

    problem: str


@attrs.frozen
class Fired:
    """A :class:`Fire` with ``then`` was applied; ``state`` is where the lifecycle went."""

    then: Then
    state: JobState


Event = Observed | Began | TimerFired | CancelSignalled | DeadlinePassed | RequestDone | DeliveryTaken | \
    ReconnectDone | HandoffChecked | Fired


# --- steps ------------------------------------------------------------------------------


@attrs.frozen
class Fire:
    """Fire a lifecycle trigger with its evidence; with ``then``, report the outcome back."""

    trigger: str
    evidence: Mapping[str, Any]
    then: Then | None = None


@attrs.frozen
class Send:
    """Send a request, once. ``start_turn`` and ``inject`` carry the handoff verified just before."""

    kind: Request


@attrs.frozen
class Arm:
    timer: Timer
    delay: float
    serial: int


@attrs.frozen
class Disarm:
    timer: Timer


@attrs.frozen
class Note:
    kind: str
    detail: Mapping[str, Any]


@attrs.frozen
class Reconnect:
    """Start reconnecting (backoff within the reconnect window; no request is resent)."""


@attrs.frozen
class VerifyHandoff:
    """Check the saved handoff; if it passes, take ``passed`` in the same round (no decision
    between the check and the transition or request it allows); if not, :class:`HandoffChecked` says why."""

    passed: Fire | Send


Step = Fire | Send | Arm | Disarm | Note | Reconnect | VerifyHandoff


@attrs.frozen
class Decision:
    steps: tuple[Step, ...]
    memo: Memo


def fail(code: str, message: str, delivery: str | None = None) -> Fire:
    evidence: dict[str, Any] = {"errorCode": code, "error": message}
    if delivery:
        evidence["delivery"] = delivery
    return Fire("fail", evidence)


def decide(job: Job, seen: ThreadSnapshot, event: Event, memo: Memo, *, at: float = 0.0,
           now: float = 0.0) -> Decision:
    """The steps for ``event``. Pure: the same inputs give the same decision.

    ``at`` is when the event's item arrived and ``now`` the time of deciding (monotonic
    seconds): debounces count from the arrival of a fact, not from the worker's work."""
    if job.state in TERMINAL_STATES:
        return Decision((), memo)
    rules = _Rules(job, seen, memo, at, now)
    rules.on(event)
    return Decision(tuple(rules.steps), rules.memo)


class _Rules:
    """One decision being made (a scratchpad: ``decide`` is the pure entry point)."""

    def __init__(self, job: Job, seen: ThreadSnapshot, memo: Memo, at: float, now: float) -> None:
        self.job, self.seen, self.memo, self.at, self.now = job, seen, memo, at, now
        self.steps: list[Step] = []
        self.settings = job.settings

    @property
    def state(self) -> JobState:
        return self.job.state

    @property
    def fired(self) -> bool:
        return bool(self.steps) and isinstance(self.steps[-1], Fire)

    def emit(self, step: Step) -> None:
        self.steps.append(step)

    def remember(self, **changes: Any) -> None:
        self.memo = attrs.evolve(self.memo, **changes)

    def fail(self, code: str, message: str, delivery: str | None = None) -> None:
        self.emit(fail(code, message, delivery))

    # --- events ---------------------------------------------------------------------

    def on(self, event: Event) -> None:
        match event:
            case CancelSignalled(marker_exists=marker):
                if marker:
                    self.emit(Fire("cancel", {"reason": EXPLICIT_CANCELLATION, **self.injection_sent()}))
                return
            case DeadlinePassed():
                self.emit(Fire("deadline", {"deadlineS": self.settings.deadline_s, "waitingOn": WAITING_ON[self.state],
                                            "lastFact": self.last_fact(), **self.injection_sent()}))
                return
            case RequestDone():
                self.on_request_done(event)
            case DeliveryTaken():
                self.on_delivery_taken(event)
            case ReconnectDone(error=error) if error is not None:
                self.fail("connection_lost", f"could not reconnect: {error}",
                          "unknown" if self.state in REQUEST_SENT_UNOBSERVED else None)
                return
            case ReconnectDone():
                self.remember(connected=True)
                self.emit(Note("reconnected", {"ownerId": self.seen.owner_id, "revision": self.seen.revision}))
            case TimerFired(timer="idle", serial=serial):
                if self.memo.idle is not None and self.memo.idle.serial == serial and self.memo.connected:
                    since = self.memo.idle.since
                    self.remember(idle=None)
                    self.on_idle_held(since)
                    return
            case TimerFired(timer="system_error", serial=serial):
                running = self.memo.system_error
                if running is not None and running.serial == serial and self.memo.connected:
                    self.remember(system_error=None)
                    self.on_system_error_held(running.since)
                    return
            case TimerFired(timer="telemetry"):
                self.remember(telemetry_wait_over=True)
            case HandoffChecked(problem=problem):
                # Before an injection, nothing was sent: the job fails as before a continuation.
                self.fail("handoff_changed", f"saved handoff failed verification: {problem}",
                          "not_delivered" if self.state is JobState.INJECTING else None)
                return
            case Fired():
                self.on_fired(event)
                return
            case Observed(event=ev.ConnectionLost(detail=detail)):
                self.on_connection_lost(detail)
                return
            case Observed(event=ev.ProtocolChanged(method=method, version=version, detail=detail)):
                # The detail says which side is behind (rekall.adapters.extension.ipc.behind_text).
                self.fail("protocol_version_unsupported", detail)
                return
            case Observed(event=ev.LayoutIncompatible(detail=detail)):
                self.fail("layout_incompatible", f"unsupported thread state layout: {detail}")
                return
            case Observed(event=ev.Resynced(reason=reason, count=count, revision=revision)):
                self.emit(Note("resynced", {"reason": reason, "count": count, "revision": revision}))
        if not self.fired:
            self.consider()

    def on_fired(self, fired: Fired) -> None:
        if fired.state is JobState.INJECTING:  # whatever led there: the handoff goes in next
            self.consider()
            return
        match fired.then:
            case "send_compact" if fired.state is JobState.REQUESTING:
                self.emit(Send("compact"))
            case "send_start_turn" if fired.state is JobState.RESUMING:
                self.emit(Send("start_turn"))
            case "completion" if fired.state is JobState.ACCEPTED:
                self.look_for_completion()  # the rest of the completion rule, now accepted
            case "consider":
                self.consider()

    def on_request_done(self, done: RequestDone) -> None:
        failure = done.acted.failure
        if done.kind == "compact" and self.state is JobState.REQUESTING:
            if failure is None:
                self.emit(Fire("compaction_accepted", {"ownerId": self.seen.owner_id}, then="consider"))
            elif failure.code == "connection_lost" and failure.delivery == "not_delivered":
                # The link was already gone: provably nothing was sent.
                self.fail(failure.code, failure.message, "not_delivered")
            elif failure.code == "connection_lost":
                # The request may have arrived. Keep watching after reconnecting: a new
                # completed compaction is proof of acceptance; a quiet owner settles it.
                self.remember(outcome_unknown=True)
                self.emit(Note("compact_ack_lost", {"error": failure.message}))
            else:
                self.fail(failure.code, failure.message, failure.delivery)
        elif done.kind == "inject" and self.state is JobState.INJECTING:
            if failure is None and (started := self.turn_started_since_injection()) is not None:
                self.emit(Fire("handoff_not_delivered", {
                    "errorCode": "turn_started_during_injection", "delivery": "unknown",
                    "error": f"the owner acknowledged the injection, but {started} while it was on its way: it may "
                             "have landed inside that turn (whose model then answers again) or before it"}))
            elif failure is None:
                self.emit(Fire("handoff_injected", {"textBytes": done.sent_bytes or 0}))
            else:
                self.emit(Fire("handoff_not_delivered", {"errorCode": failure.code, "error": failure.message,
                                                         "delivery": failure.delivery}))
        elif done.kind == "start_turn" and self.state is JobState.RESUMING:
            if failure is None:
                self.emit(Fire("turn_started", {"turnId": done.acted.turn_id, "turnStatus": done.acted.turn_status},
                               then="consider"))
            else:
                self.fail(failure.code, failure.message, failure.delivery)

    def on_delivery_taken(self, taken: DeliveryTaken) -> None:
        """Another route delivers the handoff. The hook runs only at a turn's start, and the continuation
        was not sent: a hook holding the claim while resuming means the user's turn started and carries
        the handoff, so the job ends completed. Otherwise the request ends as one that was not sent."""
        if taken.holder == CANCEL:  # `rekall cancel` withheld the handoff (its signal may still be on its way)
            self.emit(Fire("cancel", {"reason": EXPLICIT_CANCELLATION, "delivery": "not_delivered"}))  # none sent
            return
        if taken.kind == "start_turn" and self.state is JobState.RESUMING and taken.holder == HOOK:
            self.emit(Fire("resume_overtaken", {"reason": HOOK_DELIVERED}))
            return
        if taken.kind == "inject" and self.state is JobState.INJECTING and taken.holder == HOOK:
            self.emit(Fire("handoff_not_delivered", {
                "errorCode": "handoff_delivered_by_hook", "delivery": "hook",
                "error": "the plugin's SessionStart(compact) hook delivered the handoff at the start of the turn that "
                         "ran after the compaction, before the thread was idle again"}))
            return
        if taken.holder == FOREIGN:
            message = f"not sent: {taken.why}; rekall does not deliver past a claim it did not write"
        else:
            message = (f"not sent: the handoff's delivery was already claimed by the {taken.holder} route "
                       f"({taken.claim}); it is never delivered twice")
        self.on_request_done(RequestDone(taken.kind, Acted(Failure("handoff_claimed", message, "not_delivered"))))

    def on_connection_lost(self, detail: str) -> None:
        if not self.memo.connected:
            return
        self.remember(connected=False)
        self.track_idle(False)
        self.track_system_error(False)
        if self.state is JobState.ACCEPTED:
            self.remember(outcome_unknown=True)  # the compaction may be lost with the owner (a reload)
        self.emit(Note("connection_lost", {"detail": detail}))
        self.emit(Reconnect())

    # --- deciding from the facts -------------------------------------------------------

    def consider(self) -> None:
        """Decide from the thread's current facts what, if anything, to do next."""
        if self.state in TERMINAL_STATES or not self.memo.connected:
            return
        facts = self.seen.facts
        if facts.layout_problem:
            self.fail("layout_incompatible", f"unsupported thread state layout: {facts.layout_problem}")
            return
        if self.state in _REQUESTED:
            self.consider_requested()
            return
        if self.state is JobState.INJECTING:
            # Never into a running turn (the user's, a queued follow-up's, a goal's): Codex would keep the items
            # as that turn's pending input and sample the model again. At the next stable idle instead.
            if not self.memo.inject_sent:
                self.track_idle(facts.idle)
            return
        if self.state is not JobState.RESUMING and (moved := self.user_moved_on()) is not None:
            self.overtaken(moved)
            return
        if self.state is JobState.WAITING_FOR_IDLE and facts.running_compaction_ids:
            self.refuse_second_compaction()
        elif self.state in _WAITING:
            self.track_idle(facts.idle)
            self.track_system_error(stuck_in_system_error(self.seen))

    def consider_requested(self) -> None:
        """Requested: the owner's record decides. A compaction of this job's that completed is
        recorded as completed even when the user's input came after it (no continuation then);
        otherwise new input cancels the job (a compaction still running may yet complete: the
        outcome rule says so)."""
        facts = self.seen.facts
        new = self.new_compactions()
        moved = self.user_moved_on()
        if moved is not None and not new & facts.completed_compaction_ids:
            self.emit(Fire("cancel", {"reason": moved}))
            return
        self.look_for_completion()
        if not self.fired and moved is None and self.memo.outcome_unknown:
            # Quiet: idle, nothing compacting or compacted since the request.
            self.track_idle(facts.idle and not facts.running_compaction_ids and not new)

    def user_moved_on(self) -> str | None:
        """An active goal, new input, steering or a stopped turn: why the job must not go on as
        planned (a thread whose goal is active starts turns by itself: it would not stay idle)."""
        facts = self.seen.facts
        if facts.goal_active:
            return "goal_active"
        if facts.interrupted:
            return "user_turn_stopped"
        if facts.boundary_fingerprint != self.job.user_fingerprint:
            # Where the goal cannot be told, the new turn may be the thread's own: not called input.
            return "new_turn" if facts.goal is None else "new_user_input"
        return None

    def new_compactions(self) -> frozenset[str]:
        """Compactions, running or completed, that the owner shows since the request (the
        baseline is retaken at the moment of the request, in progress ones refused then)."""
        facts = self.seen.facts
        return (facts.completed_compaction_ids | facts.running_compaction_ids) - self.memo.baseline

    def overtaken(self, reason: str) -> None:
        """The user moved on before the continuation was sent: the job is cancelled, unless the
        compaction completed and the handoff can be injected instead (no continuation then)."""
        if self.state is JobState.WAITING_FOR_RESUME_IDLE and self.memo.inject:
            self.emit(Fire("resume_overtaken", {"reason": reason}, then="consider"))
        elif self.state is JobState.WAITING_FOR_RESUME_IDLE:
            self.emit(Fire("cancel", {"reason": reason, **self.delivery_evidence()}))
        else:
            self.emit(Fire("cancel", {"reason": reason}))

    def delivery_evidence(self) -> dict[str, Any]:
        """What a transition after the compaction needs to choose between injecting the handoff and
        saying why it is not (nothing where the worker did not say)."""
        if self.memo.inject is None:
            return {}
        return {"inject": True} if self.memo.inject else {"injectionLimit": self.memo.injection_limit or "unknown"}

    def inject_once(self) -> None:
        """No continuation will carry the handoff and the thread stayed idle: verify it and inject it, once."""
        if self.memo.inject_sent or not self.memo.connected:
            return
        self.remember(inject_sent=True, inject_boundary=self.seen.facts.boundary_fingerprint)
        self.emit(VerifyHandoff(Send("inject")))

    def injection_sent(self) -> dict[str, Any]:
        """For a job ending while it injects: whether the injection was sent (``unknown``) or not."""
        if self.state is not JobState.INJECTING:
            return {}
        return {"delivery": "unknown" if self.memo.inject_sent else "not_delivered"}

    def turn_started_since_injection(self) -> str | None:
        """A turn the owner shows started, or running, since the injection was sent: in words, else ``None``."""
        facts = self.seen.facts
        if facts.boundary_fingerprint != self.memo.inject_boundary:
            return "a new turn started"
        if facts.user_turn_running:
            return "a turn was running"
        return None

    def refuse_second_compaction(self) -> None:
        """A compaction this job did not ask for is running (say, a lost worker's): asking for
        another would compact the thread twice."""
        running = ", ".join(sorted(self.seen.facts.running_compaction_ids))
        self.fail("compaction_in_progress", f"the thread shows a compaction in progress ({running}) that this "
                                            "job did not request; no second compaction was requested")

    def last_fact(self) -> str:
        """What the thread showed last, in words (for a deadline that passed)."""
        if not self.memo.connected:
            return "the connection to the thread's owner was lost and not back"
        facts, revision = self.seen.facts, self.seen.revision
        at = "" if revision is None else f" (revision {revision})"
        if stuck_in_system_error(self.seen):
            since = self.memo.system_error.since if self.memo.system_error is not None else self.at
            return f"the thread's runtime stayed systemError for {self.now - since:.0f} s after the user's turn{at}"
        if facts.running_compaction_ids:
            return f"a compaction was in progress ({', '.join(sorted(facts.running_compaction_ids))}){at}"
        if not facts.idle:
            return f"the thread was busy ({facts.busy_reason}){at}"
        return f"the thread was idle{at}"

    def settling(self) -> bool:
        return self.memo.outcome_unknown and self.state in _REQUESTED

    # --- stable idle ---------------------------------------------------------------------

    def track_idle(self, idle: bool) -> None:
        """Debounce idle: it must hold for the stable interval (the settle window while an
        outcome is unknown, where "idle" also means no compaction in progress). The interval
        counts from when the fact arrived, not from when the worker got to it."""
        running = self.memo.idle
        if running is not None and (not idle or running.state is not self.state):
            # Not idle any more, or a timer started in another state (it has another length).
            self.emit(Disarm("idle"))
            self.remember(idle=None)
            running = None
        if not idle:
            return
        if running is None:
            serial = self.memo.serial + 1
            hold = self.settings.settle_s if self.settling() else self.settings.idle_stable_s
            self.remember(serial=serial, idle=Running(serial, self.at, self.state))
            self.emit(Arm("idle", max(0.0, hold - (self.now - self.at)), serial))

    def on_idle_held(self, since: float) -> None:
        facts = self.seen.facts
        if not facts.idle:
            return
        idle_ms = round((self.now - since) * 1000)
        if self.settling():
            # What was seen goes to the table's settle rule; it decides.
            self.emit(Fire("outcome_settled", {
                "idle": facts.idle, "compactionsInProgress": len(facts.running_compaction_ids), "quietMs": idle_ms,
                "settleWindowS": self.settings.settle_s, "runtimeStatus": facts.runtime_status,
                "ownerId": self.seen.owner_id, "revision": self.seen.revision}))
            return
        common = {"idleMs": idle_ms, "tokens": facts.tokens, "window": facts.window, "revision": self.seen.revision,
                  "boundaryFingerprint": facts.boundary_fingerprint}
        if self.state is JobState.WAITING_FOR_IDLE:
            if facts.running_compaction_ids:  # the request step looks again, whatever event came last
                self.refuse_second_compaction()
                return
            # The baseline is retaken at the moment of the request: any completed compaction
            # that exists now is not ours.
            self.remember(baseline=facts.completed_compaction_ids)
            self.emit(Fire("idle_stable", common, then="send_compact"))
        elif self.state is JobState.WAITING_FOR_RESUME_IDLE:
            self.emit(VerifyHandoff(Fire("idle_stable", {"handoffVerified": True, **common, **self.delivery_evidence()},
                                         then="send_start_turn")))
        elif self.state is JobState.INJECTING:
            self.inject_once()

    # --- a runtime stuck in systemError ----------------------------------------------------

    def track_system_error(self, stuck: bool) -> None:
        """The window starts when the fact arrived, like the idle debounce; any change resets it."""
        if not stuck:
            if self.memo.system_error is not None:
                self.emit(Disarm("system_error"))
                self.remember(system_error=None)
            return
        if self.memo.system_error is None:
            serial = self.memo.serial + 1
            self.remember(serial=serial, system_error=Running(serial, self.at))
            remaining = self.settings.system_error_window_s - (self.now - self.at)
            self.emit(Arm("system_error", max(0.0, remaining), serial))

    def on_system_error_held(self, since: float) -> None:
        if stuck_in_system_error(self.seen):
            self.emit(Fire("system_error_held", {
                "runtimeStatus": self.seen.facts.runtime_status, "heldMs": round((self.now - since) * 1000),
                "windowS": self.settings.system_error_window_s, "revision": self.seen.revision}))

    # --- completion ----------------------------------------------------------------------

    def look_for_completion(self) -> None:
        """Claim the compaction this job's request led to, and only that one: the one compaction
        the owner shows since the request was sent. ``thread/compact/start`` and the extension's
        compact answer name none, so with two or more since the request (another client's, or a
        job of an earlier rekall that the lock could not see) none can be told to be this job's:
        the job claims none and starts no continuation."""
        facts = self.seen.facts
        new = self.new_compactions()
        if len(new) > 1:
            listed = ", ".join(sorted(new))
            self.fail("compaction_not_attributable",
                      f"{len(new)} compactions appeared on the thread after this job's compact request ({listed}); "
                      "the owner's answer names none, so which one is this job's cannot be told. None was claimed "
                      "and no continuation was started; nothing was retried", "unknown")
            return
        done = new & facts.completed_compaction_ids
        if not done:
            return
        (compaction_id,) = done
        if self.state is JobState.REQUESTING:
            # The acknowledgement is late or was lost with the connection, but the owner
            # compacted: the completion proves acceptance, and the answer can change nothing.
            self.emit(Fire("compaction_accepted", {"ownerId": self.seen.owner_id, "inferredFrom": "completion_observed"},
                           then="completion"))
            return
        moved = self.user_moved_on()
        evidence: dict[str, Any] = {"compactionId": compaction_id, "tokens": facts.tokens, "window": facts.window,
                                    "revision": self.seen.revision}
        if facts.tokens_before_compaction is not None:  # the platform's own count from before it
            evidence["tokensBefore"] = facts.tokens_before_compaction
        if moved is not None:  # the user's input came after ours completed: no continuation, no headroom to wait for
            evidence["userMovedOn"] = moved
        elif self.job.resume and not self.telemetry_reflects_compaction():
            if not self.memo.telemetry_wait_armed:
                self.remember(telemetry_wait_armed=True)
                self.emit(Arm("telemetry", self.settings.idle_stable_s, 0))
            if not self.memo.telemetry_wait_over:
                return
        self.emit(Fire("compaction_completed", {**evidence, **self.delivery_evidence()}, then="consider"))

    def telemetry_reflects_compaction(self) -> bool:
        """Token telemetry may trail the completed item by a frame; wait briefly for it."""
        facts = self.seen.facts
        tokens = facts.tokens
        before = self.job.tokens_before if facts.tokens_before_compaction is None else facts.tokens_before_compaction
        return tokens is not None and (before is None or tokens < before)


def stuck_in_system_error(seen: ThreadSnapshot) -> bool:
    """The runtime says systemError and the user's turn is over: nothing will clear it by itself
    (a failed turn leaves it behind, and the thread still accepts new turns)."""
    return seen.facts.runtime_status == "systemError" and not seen.facts.user_turn_running
