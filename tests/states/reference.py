"""A small, independent reference model of the lifecycle, for the stateful tests.

Written by hand from the issue's rules (not from ``TRANSITIONS``), so a mistake in one is
caught by the other. Headroom uses exact integer arithmetic instead of a division.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from rekall.states import TERMINAL_STATES, JobState

S = JobState
ILLEGAL, REFUSED = "illegal", "refused"
TRIGGERS = ("worker_started", "idle_stable", "compaction_accepted", "compaction_completed", "turn_started",
            "system_error_held", "outcome_settled", "cancel", "deadline", "fail", "resume_overtaken",
            "handoff_injected", "handoff_not_delivered")
#: The trigger that moves each non-terminal state forward (the stateful tests favour it).
PROGRESS = {S.SCHEDULED: "worker_started", S.WAITING_FOR_IDLE: "idle_stable", S.REQUESTING: "compaction_accepted",
            S.ACCEPTED: "compaction_completed", S.WAITING_FOR_RESUME_IDLE: "idle_stable",
            S.RESUMING: "turn_started", S.INJECTING: "handoff_injected"}


def _count(value: Any) -> bool:
    return type(value) is int


def has_room(tokens: Any, window: Any, before: Any) -> bool:
    if not (_count(tokens) and _count(window) and tokens >= 0 and window > 0):
        return False
    if _count(before) and tokens >= before:
        return False
    return tokens * 10 <= window * 6


def expected(state: JobState, trigger: str, ev: dict[str, Any], *, job_id: str, resume: bool,
             fingerprint: str, before: Any, skipped: bool = False) -> JobState | str:
    """Where ``trigger`` takes a job in ``state``; ``skipped``: its continuation was refused for
    headroom on the way to injecting."""
    if state in TERMINAL_STATES:
        return ILLEGAL
    terminal = {"cancel": S.CANCELLED, "deadline": S.TIMED_OUT, "fail": S.FAILED}
    if trigger in terminal:
        return terminal[trigger]
    same_boundary = ev.get("boundaryFingerprint") == fingerprint
    inject = ev.get("inject") is True
    match (state, trigger):
        case (S.SCHEDULED, "worker_started"):
            return S.WAITING_FOR_IDLE if ev["jobId"] == job_id else REFUSED
        case (S.WAITING_FOR_IDLE, "idle_stable"):
            return S.REQUESTING if same_boundary else REFUSED
        case (S.REQUESTING, "compaction_accepted"):
            return S.ACCEPTED
        case (S.ACCEPTED, "compaction_completed"):
            if not resume:
                return S.INJECTING if inject else S.COMPLETED
            if has_room(ev["tokens"], ev["window"], before):
                return S.WAITING_FOR_RESUME_IDLE
            return S.INJECTING if inject else S.SKIPPED
        case (S.WAITING_FOR_RESUME_IDLE, "idle_stable"):
            if not (ev.get("handoffVerified") is True and same_boundary):
                return REFUSED
            if has_room(ev["tokens"], ev["window"], before):
                return S.RESUMING
            return S.INJECTING if inject else S.SKIPPED
        case (S.WAITING_FOR_RESUME_IDLE, "resume_overtaken"):
            return REFUSED if ev["reason"] == "handoff_delivered_by_hook" else S.INJECTING
        case (S.RESUMING, "resume_overtaken"):
            # The hook won the delivery claim just before the continuation was sent: nothing is sent.
            return S.COMPLETED if ev["reason"] == "handoff_delivered_by_hook" else REFUSED
        case (S.INJECTING, "handoff_injected" | "handoff_not_delivered"):
            return S.SKIPPED if skipped else S.COMPLETED
        case (S.RESUMING, "turn_started"):
            return S.RESUMED
        case (S.WAITING_FOR_IDLE | S.WAITING_FOR_RESUME_IDLE, "system_error_held"):
            return S.FAILED
        case (S.REQUESTING | S.ACCEPTED, "outcome_settled"):
            quiet = ev["idle"] and ev["compactionsInProgress"] == 0 and ev["quietMs"] >= 1000 * ev["settleWindowS"]
            return S.FAILED if quiet else REFUSED
    return ILLEGAL


def skipped_into_injecting(resume: bool, trigger: str) -> bool:
    """Whether a job that ``trigger`` took to ``injecting`` had its continuation refused for headroom
    (with a continuation asked for, only headroom or the user's input leads there)."""
    return resume and trigger != "resume_overtaken"


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
                                  "revision": st.none()}, inject),
        "resume_overtaken": ({"reason": st.sampled_from(["new_user_input", "user_turn_stopped",
                                                         "handoff_delivered_by_hook"])}, {}),
        "handoff_injected": ({"textBytes": st.integers(1, 40_000)}, {}),
        "handoff_not_delivered": ({"errorCode": st.just("request_timeout"), "error": st.just("no answer"),
                                   "delivery": st.sampled_from(["not_delivered", "unknown"])}, {}),
        "turn_started": ({"turnId": st.just("turn-1")}, {}),
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
