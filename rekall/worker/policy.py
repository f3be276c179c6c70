"""The worker's rules, as a pure function: what to do about one event.

``decide(job, seen, event, memo)`` looks at the job (its state and the status fields the rules
read), the thread's facts as the event reports them, the event, and the worker's small memo
(baseline, timers, whether an outcome is unknown), and returns the steps to take and the memo
after them. It does no I/O and reads no clock: times arrive with the event. The reactor in
:mod:`rekall.worker.reactor` executes the steps; a :class:`Fire` with ``then`` comes back as a
:class:`Fired` event carrying the state the lifecycle chose, so that a rule that depends on a
transition's outcome (send the compact request only if ``idle_stable`` led to ``requesting``)
stays here. A :class:`Fire` is always the last step of a decision.

The policy never assigns a state: it fires triggers with their evidence and the two machines'
tables in :mod:`rekall.states` decide. Once the compaction completed, what to do next depends on
where the delivery machine is and by which route: those rules are
:class:`rekall.worker.delivering.DeliveryRules`, which the rules here mix in. The records the rules
read and return are in :mod:`rekall.worker.decisions` (named here too, for the reactor).
"""

from __future__ import annotations

from typing import Any

import attrs

from rekall.kernel import events as ev
from rekall.adapters.contract import ThreadSnapshot
from rekall.states import REQUEST_SENT_UNOBSERVED, TERMINAL_STATES, DeliveryState, JobState
from rekall.states.evidence import EXPLICIT_CANCELLATION
from rekall.worker.decisions import (
    Arm,
    Began,
    CancelSignalled,
    DeadlinePassed,
    Decision,
    DeliveryTaken,
    Disarm,
    Event,
    Fire,
    Fired,
    HandoffChecked,
    Job,
    Memo,
    Note,
    Observed,
    Reconnect,
    ReconnectDone,
    Request,
    RequestDone,
    Running,
    Send,
    Step,
    Then,
    Timer,
    TimerFired,
    VerifyHandoff,
    fail,
    stuck_in_system_error,
)
from rekall.worker.delivering import DeliveryRules

__all__ = ["WAITING_ON", "Arm", "Began", "CancelSignalled", "DeadlinePassed", "Decision", "DeliveryTaken", "Disarm",
           "Event", "Fire", "Fired", "HandoffChecked", "Job", "Memo", "Note", "Observed", "Reconnect", "ReconnectDone",
           "Request", "RequestDone", "Running", "Send", "Step", "Then", "Timer", "TimerFired", "VerifyHandoff", "decide",
           "fail", "stuck_in_system_error"]

#: What a job in each state waits for (a deadline that passes names it).
WAITING_ON = {
    JobState.SCHEDULED: "its worker to claim it",
    JobState.WAITING_FOR_IDLE: "the thread to stay idle for the stable interval before the compaction",
    JobState.REQUESTING: "the owner's answer to the compact request",
    JobState.ACCEPTED: "the compaction to complete (a new completed compaction item)",
    JobState.COMPACTED: "the delivery's route to be journaled",
    JobState.WAITING_FOR_RESUME_IDLE: "the thread to stay idle for the stable interval before the continuation",
    JobState.RESUMING: "the owner's answer to the continuation request",
    JobState.INJECTING: "the thread to stay idle (no turn running) before the handoff is injected",
}
_REQUESTED = (JobState.REQUESTING, JobState.ACCEPTED)


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


class _Rules(DeliveryRules):
    """One decision being made (a scratchpad: ``decide`` is the pure entry point); the delivery's rules
    are :class:`DeliveryRules`."""

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
                    self.emit(Fire("cancel", {"reason": EXPLICIT_CANCELLATION, **self.what_was_sent()}))
                return
            case DeadlinePassed():
                self.emit(Fire("deadline", {"deadlineS": self.settings.deadline_s, "waitingOn": WAITING_ON[self.state],
                                            "lastFact": self.last_fact(), **self.what_was_sent()}))
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
        if fired.then == "deliver" and self.job.delivery is DeliveryState.SENDING:
            self.emit(Send("deliver"))
        elif fired.then == "send_compact" and fired.state is JobState.REQUESTING:
            self.emit(Send("compact"))
        elif fired.then == "completion" and fired.state is JobState.ACCEPTED:
            self.look_for_completion()  # the rest of the completion rule, now accepted
        elif fired.then == "consider" or fired.state is JobState.INJECTING:  # whatever led there: it goes in next
            self.consider()

    def on_request_done(self, done: RequestDone) -> None:
        failure = done.acted.failure
        if done.kind == "deliver" and self.job.delivery is DeliveryState.SENDING:
            self.on_delivery_answered(done)
        elif done.kind == "compact" and self.state is JobState.REQUESTING:
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
        if self.job.delivery is not DeliveryState.PENDING:
            self.consider_delivery()
            return
        if (moved := self.user_moved_on()) is not None:
            self.emit(Fire("cancel", {"reason": moved}))
        elif self.state is JobState.WAITING_FOR_IDLE and facts.running_compaction_ids:
            self.refuse_second_compaction()
        elif self.state is JobState.WAITING_FOR_IDLE:
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
        else:
            self.deliver_at_idle(common)

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

