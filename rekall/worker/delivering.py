"""The worker's delivery rules: once the compaction completed, what the delivery machine asks for next.

The delivery machine (:mod:`rekall.states.delivery`) says where the handoff's delivery is and by
which route. ``waiting``: the thread must stay idle for the stable interval, then the handoff is
verified and the route's request journaled (``idle_stable`` into ``sending``) and sent; a user who
moves on before a continuation reroutes it to the injection (or, without injection, cancels the
job). ``sending``: the answer decides (``handoff_delivered`` or ``handoff_not_delivered``), and so
does a delivery claim that another route holds. The rules are part of the policy's pure decision
(:mod:`rekall.worker.policy` mixes them into its rules): they do no I/O and read no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rekall.adapters.contract import Acted, Failure, ThreadSnapshot
from rekall.states import DeliveryState
from rekall.states.evidence import EXPLICIT_CANCELLATION
from rekall.kernel.jobstate import CONTINUATION, INJECTION
from rekall.store.delivery import CANCEL, FOREIGN, HOOK
from rekall.worker.decisions import DeliveryTaken, Fire, Job, Memo, RequestDone, Step, VerifyHandoff, \
    stuck_in_system_error

D = DeliveryState


class DeliveryRules:
    """The delivery's part of one decision (mixed into the policy's rules, which provide what is below)."""

    if TYPE_CHECKING:
        job: Job
        seen: ThreadSnapshot
        memo: Memo

        def emit(self, step: Step) -> None: ...
        def remember(self, **changes: Any) -> None: ...
        def fail(self, code: str, message: str, delivery: str | None = None) -> None: ...
        def track_idle(self, idle: bool) -> None: ...
        def track_system_error(self, stuck: bool) -> None: ...
        def user_moved_on(self) -> str | None: ...

    def consider_delivery(self) -> None:
        """Waiting, the route's moment is a stable idle, and a continuation gives way to a user who moved on.
        Sending, the answer decides."""
        if self.job.delivery is not D.WAITING:
            return
        if self.job.route != CONTINUATION:
            # Never into a running turn (the user's, a queued follow-up's, a goal's): Codex would keep the items
            # as that turn's pending input and sample the model again. At the next stable idle instead.
            self.track_idle(self.seen.facts.idle)
            return
        if (moved := self.user_moved_on()) is not None:
            self.overtaken(moved)
            return
        self.track_idle(self.seen.facts.idle)
        self.track_system_error(stuck_in_system_error(self.seen))

    def overtaken(self, reason: str) -> None:
        """The user moved on before the continuation was sent: the handoff is injected instead, or, without
        injection, the job is cancelled."""
        if self.memo.inject:
            self.emit(Fire("rerouted", {"reason": reason}, then="consider"))
        else:
            self.emit(Fire("cancel", {"reason": reason, **self.delivery_evidence()}))

    def delivery_evidence(self) -> dict[str, Any]:
        """What the delivery machine needs to choose between injecting the handoff and saying why it is not
        (nothing where the worker did not say)."""
        if self.memo.inject is None:
            return {}
        return {"inject": True} if self.memo.inject else {"injectionLimit": self.memo.injection_limit or "unknown"}

    def deliver_at_idle(self, idle: dict[str, Any]) -> None:
        """The thread stayed idle: verify the handoff, journal the route's request (or what the re-check
        decided instead), then send it, once."""
        if self.job.delivery is not D.WAITING:
            return
        self.remember(sent_at_boundary=self.seen.facts.boundary_fingerprint)
        self.emit(VerifyHandoff(Fire("idle_stable", {"handoffVerified": True, **idle, **self.delivery_evidence()},
                                     then="deliver")))

    def what_was_sent(self) -> dict[str, Any]:
        """For a job ending while the handoff is injected: whether the injection was sent (``unknown``) or not."""
        if self.job.route != INJECTION or self.job.delivery not in (D.WAITING, D.SENDING):
            return {}
        return {"delivery": "unknown" if self.job.delivery is D.SENDING else "not_delivered"}

    def on_delivery_answered(self, done: RequestDone) -> None:
        failure = done.acted.failure
        if self.job.route == CONTINUATION:
            if failure is None:
                self.emit(Fire("handoff_delivered", {"turnId": done.acted.turn_id,
                                                     "turnStatus": done.acted.turn_status}))
            else:  # the continuation's failure ends the job
                self.fail(failure.code, failure.message, failure.delivery)
        elif failure is None and (started := self.turn_started_since_sent()) is not None:
            self.emit(Fire("handoff_not_delivered", {
                "errorCode": "turn_started_during_injection", "delivery": "unknown",
                "error": f"the owner acknowledged the injection, but {started} while it was on its way: it may "
                         "have landed inside that turn (whose model then answers again) or before it"}))
        elif failure is None:
            self.emit(Fire("handoff_delivered", {"textBytes": done.sent_bytes or 0}))
        else:
            self.emit(Fire("handoff_not_delivered", {"errorCode": failure.code, "error": failure.message,
                                                     "delivery": failure.delivery}))

    def on_delivery_taken(self, taken: DeliveryTaken) -> None:
        """Another route holds the delivery claim; nothing was sent. The hook runs only at a turn's start, so a
        hook holding it means the user's turn carries the handoff: the job ends completed. An explicit cancel
        withheld it (its signal may still be on its way). Otherwise the request ends as one not sent."""
        if taken.holder == CANCEL:
            self.emit(Fire("cancel", {"reason": EXPLICIT_CANCELLATION, "delivery": "not_delivered"}))
            return
        if taken.holder == HOOK:
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
        self.on_delivery_answered(RequestDone("deliver", Acted(Failure("handoff_claimed", message, "not_delivered"))))

    def turn_started_since_sent(self) -> str | None:
        """A turn the owner shows started, or running, since the handoff was sent: in words, else ``None``."""
        facts = self.seen.facts
        if facts.boundary_fingerprint != self.memo.sent_at_boundary:
            return "a new turn started"
        if facts.user_turn_running:
            return "a turn was running"
        return None
