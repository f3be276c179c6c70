"""A small, independent reference model of the lifecycle's two machines, for the stateful tests.

Written by hand from the issues' rules (not from the tables), so a mistake in one is caught by the
other. Headroom uses exact integer arithmetic instead of a division. The stateful tests
(``tests/states/test_machine.py``, ``tests/store/test_lifecycle.py``) hold both machines' states and
the route to it at every step, and that the handoff is delivered at most once, never after an
explicit cancel; that no injection goes into a running turn is the policy's rule, held by
``tests/worker/test_policy_injection_model.py``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

import attrs

from rekall.states import DeliveryState, JobState

S, D = JobState, DeliveryState
ILLEGAL, REFUSED = "illegal", "refused"
TRIGGERS = ("worker_started", "idle_stable", "compaction_accepted", "compaction_completed", "route_chosen",
            "system_error_held", "outcome_settled", "cancel", "deadline", "fail", "rerouted", "handoff_delivered",
            "handoff_not_delivered")
_ENDS = {"cancel": S.CANCELLED, "deadline": S.TIMED_OUT, "fail": S.FAILED}


def _count(value: Any) -> bool:
    return type(value) is int


def has_room(tokens: Any, window: Any, before: Any) -> bool:
    if not (_count(tokens) and _count(window) and tokens >= 0 and window > 0):
        return False
    if _count(before) and tokens >= before:
        return False
    return tokens * 10 <= window * 6


@attrs.frozen
class Reference:
    """Both machines as the rules say they move, and the job's state as the design card names it.

    ``skipped``: the continuation was refused for headroom; ``delivered``: how many times a route's
    request was acknowledged; ``withheld``: an explicit cancel ended the job."""

    job_id: str
    resume: bool
    fingerprint: str = "fp-1"
    compaction: JobState = S.SCHEDULED
    delivery: DeliveryState = D.PENDING
    route: str | None = None
    skipped: bool = False
    before: Any = None
    delivered: int = 0
    withheld: bool = False

    @property
    def state(self) -> JobState:
        if self.compaction is not S.COMPACTED or self.delivery is D.PENDING:
            return self.compaction
        continuation = self.route == "continuation"
        if self.delivery is D.WAITING:
            return S.WAITING_FOR_RESUME_IDLE if continuation else S.INJECTING
        if self.delivery is D.SENDING:
            return S.RESUMING if continuation else S.INJECTING
        if self.delivery is D.DELIVERED and continuation:
            return S.RESUMED
        return S.SKIPPED if self.skipped else S.COMPLETED

    @property
    def progress(self) -> str:
        """The trigger that moves the job forward from here (the stateful tests favour it)."""
        if self.delivery is D.SENDING:
            return "handoff_delivered"
        return {S.SCHEDULED: "worker_started", S.REQUESTING: "compaction_accepted",
                S.ACCEPTED: "compaction_completed"}.get(self.compaction, "idle_stable")

    def after(self, trigger: str, ev: dict[str, Any]) -> Reference | str:
        """The model after ``trigger``, or ``ILLEGAL`` (no row) or ``REFUSED`` (every guard said no)."""
        if self.state.terminal:
            return ILLEGAL
        if trigger in _ENDS:
            return attrs.evolve(self, compaction=_ENDS[trigger],
                                withheld=ev.get("reason") == "explicit_cancellation")
        if trigger == "system_error_held":
            if self.compaction is S.WAITING_FOR_IDLE or self.delivery is D.WAITING:
                return attrs.evolve(self, compaction=S.FAILED)
            return REFUSED if self.compaction is S.COMPACTED else ILLEGAL
        if self.compaction is S.COMPACTED:
            return self._delivering(trigger, ev)
        return self._compacting(trigger, ev)

    def _compacting(self, trigger: str, ev: dict[str, Any]) -> Reference | str:
        same_boundary = ev.get("boundaryFingerprint") == self.fingerprint
        match (self.compaction, trigger):
            case (S.SCHEDULED, "worker_started"):
                return attrs.evolve(self, compaction=S.WAITING_FOR_IDLE) if ev["jobId"] == self.job_id else REFUSED
            case (S.WAITING_FOR_IDLE, "idle_stable"):
                return attrs.evolve(self, compaction=S.REQUESTING, before=ev["tokens"]) if same_boundary else REFUSED
            case (S.REQUESTING, "compaction_accepted"):
                return attrs.evolve(self, compaction=S.ACCEPTED)
            case (S.ACCEPTED, "compaction_completed"):
                return self._route_chosen(ev)
            case (S.REQUESTING | S.ACCEPTED, "outcome_settled"):
                quiet = ev["idle"] and ev["compactionsInProgress"] == 0 and ev["quietMs"] >= 1000 * ev["settleWindowS"]
                return attrs.evolve(self, compaction=S.FAILED) if quiet else REFUSED
        return ILLEGAL

    def _route_chosen(self, ev: dict[str, Any]) -> Reference:
        moved = bool(ev.get("userMovedOn"))
        room = has_room(ev["tokens"], ev["window"], self.before)
        compacted = attrs.evolve(self, compaction=S.COMPACTED, skipped=self.resume and not moved and not room)
        if self.resume and room and not moved:
            return attrs.evolve(compacted, delivery=D.WAITING, route="continuation")
        if ev.get("inject") is True:
            return attrs.evolve(compacted, delivery=D.WAITING, route="injection")
        return attrs.evolve(compacted, delivery=D.SETTLED)

    def _delivering(self, trigger: str, ev: dict[str, Any]) -> Reference | str:
        continuation = self.route == "continuation"
        match (self.delivery, trigger):
            case (D.WAITING, "idle_stable") if not continuation:
                return attrs.evolve(self, delivery=D.SENDING) if ev.get("handoffVerified") is True else REFUSED
            case (D.WAITING, "idle_stable"):
                if not (ev.get("handoffVerified") is True and ev.get("boundaryFingerprint") == self.fingerprint):
                    return REFUSED
                if has_room(ev["tokens"], ev["window"], self.before):
                    return attrs.evolve(self, delivery=D.SENDING)
                if ev.get("inject") is True:
                    return attrs.evolve(self, route="injection", skipped=True)
                return attrs.evolve(self, delivery=D.SETTLED, skipped=True)
            case (D.WAITING, "rerouted"):
                return attrs.evolve(self, route="injection") if continuation else REFUSED
            case (D.SENDING, "handoff_delivered"):
                if ("turnId" if continuation else "textBytes") not in ev:
                    return REFUSED
                return attrs.evolve(self, delivery=D.DELIVERED, delivered=self.delivered + 1)
            case (D.WAITING | D.SENDING, "handoff_not_delivered"):
                if continuation and ev["delivery"] != "hook":
                    return REFUSED  # a continuation that fails ends the job (fail)
                return attrs.evolve(self, delivery=D.SETTLED)
        return ILLEGAL


# Boundary values (exactly 60%, equal to before) are drawn often, and small counts so that
# continuations with headroom are common enough to reach ``resuming`` and ``resumed``.
_likely = st.sampled_from([1_000, 20_000, 30_000])
_tokens = st.one_of(_likely, _likely, st.sampled_from([60_000, 60_001, 90_000]), st.none(), st.integers(0, 200_000))
_window = st.one_of(st.just(100_000), st.just(100_000), st.just(100_000), st.none(), st.just(0),
                    st.integers(50_000, 200_000))


def evidence_for(trigger: str, job_id: str) -> st.SearchStrategy[dict[str, Any]]:
    """Valid evidence (it passes validation) whose values may or may not satisfy the guards."""
    idle = {"idleMs": st.integers(0, 5_000), "tokens": _tokens, "window": _window,
            "revision": st.one_of(st.none(), st.integers(0, 50)),
            "boundaryFingerprint": st.sampled_from(["fp-1", "fp-1", "fp-1", "fp-2"])}
    delivery = {"delivery": st.sampled_from(["not_delivered", "unknown"])}
    inject = {"inject": st.booleans()}
    shapes: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "worker_started": ({"jobId": st.sampled_from([job_id, job_id, "00000000-0000-4000-8000-000000000000"]),
                            "pid": st.integers(1, 99_999), "host": st.just("h"),
                            "processStartTime": st.none()}, {}),
        "idle_stable": (idle, {"handoffVerified": st.sampled_from([True, True, True, False]), **inject}),
        "compaction_accepted": ({"ownerId": st.sampled_from(["o1", None])}, {}),
        "compaction_completed": ({"compactionId": st.just("c1"), "tokens": _tokens, "window": _window,
                                  "revision": st.none()},
                                 {**inject, "userMovedOn": st.sampled_from(["new_user_input", "user_turn_stopped"])}),
        "route_chosen": ({"tokens": _tokens, "window": _window}, inject),
        "rerouted": ({"reason": st.sampled_from(["new_user_input", "user_turn_stopped"])}, {}),
        "handoff_delivered": ({}, {"turnId": st.just("turn-1"), "textBytes": st.integers(1, 40_000)}),
        "handoff_not_delivered": ({"errorCode": st.just("request_timeout"), "error": st.just("no answer"),
                                   "delivery": st.sampled_from(["not_delivered", "unknown", "hook"])}, {}),
        "outcome_settled": ({"idle": st.sampled_from([True, True, False]),
                             "compactionsInProgress": st.sampled_from([0, 0, 1]),
                             "quietMs": st.sampled_from([0, 59_999, 60_000, 90_000]), "settleWindowS": st.just(60),
                             "runtimeStatus": st.sampled_from(["idle", None]), "ownerId": st.just("o1"),
                             "revision": st.none()}, {}),
        "cancel": ({"reason": st.sampled_from(["explicit_cancellation", "new_user_input", "user_turn_stopped"])},
                   delivery),
        "system_error_held": ({"runtimeStatus": st.just("systemError"), "heldMs": st.integers(0, 90_000),
                               "windowS": st.sampled_from([0.5, 60]), "revision": st.none()}, {}),
        "deadline": ({"deadlineS": st.integers(1, 900)}, {}),
        "fail": ({"errorCode": st.just("boom"), "error": st.just("it broke")}, delivery),
    }
    required, optional = shapes[trigger]
    return st.fixed_dictionaries(required, optional=optional)
