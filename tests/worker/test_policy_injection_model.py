"""The injection's rules under any order of events (hypothesis): at most one injection, never while a
turn runs, and none after an explicit cancel.

The job is in ``injecting``; hypothesis plays the thread (a turn starting and ending, the user's
boundary moving), the worker's timers, the cancel signal, the hook winning the claim first, and the
owner's answer. The test applies the policy's steps as the reactor and the delivery machine do (the
injection's ``idle_stable`` moves the delivery from ``waiting`` to ``sending``, any other Fire ends
the job, an Arm makes a timer that may fire later) and checks each decision against the rules.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from rekall.kernel import events as ev
from rekall.kernel.records import Acted
from rekall.worker.policy import (
    Arm,
    CancelSignalled,
    DeliveryTaken,
    Fire,
    Memo,
    Observed,
    RequestDone,
    TimerFired,
    VerifyHandoff,
    decide,
)
from tests.worker.test_policy import IDLE, SETTINGS, job, seen
from rekall.states import JobState

ACTIONS = st.lists(st.sampled_from(["turn_starts", "turn_ends", "idle_timer", "cancel", "hook_claims",
                                    "answer", "nothing"]), min_size=1, max_size=30)


def busy(turn: int) -> Any:
    return attrs.evolve(IDLE, runtime_status="active", busy_reason="turn_running", user_turn_running=True,
                        boundary_fingerprint=f"turn-{turn}")


@settings(max_examples=300, deadline=None)
@given(actions=ACTIONS, resume=st.booleans())
def test_the_injection_goes_out_at_most_once_only_into_an_idle_thread_and_never_after_an_explicit_cancel(
        actions: list[str], resume: bool) -> None:
    state, memo = JobState.INJECTING, Memo(connected=True, inject=True)
    facts, turns, armed = IDLE, 0, None
    sent, cancelled = 0, False
    for action in actions:
        if state is not JobState.INJECTING:
            break
        match action:
            case "turn_starts":
                turns += 1
                facts = busy(turns)
                event: Any = Observed(ev.ThreadBusy("turn_running", turns))
            case "turn_ends":
                facts = attrs.evolve(IDLE, boundary_fingerprint=facts.boundary_fingerprint)
                event = Observed(ev.ThreadIdle(turns))
            case "idle_timer":
                event = TimerFired("idle", armed if armed is not None else 999)
            case "cancel":
                event = CancelSignalled(True)
            case "hook_claims":
                event = DeliveryTaken("hook", "t.j.delivery") if sent else Observed(ev.Telemetry(1, 2))
            case "answer":
                event = RequestDone("deliver", Acted(), 100) if sent else Observed(ev.Telemetry(1, 2))
            case _:
                event = Observed(ev.Telemetry(1, 2))
        decision = decide(attrs.evolve(job(JobState.INJECTING, resume=resume, sent=bool(sent)), state=state),
                          seen(facts), event, memo, at=0.0, now=0.0)
        memo = decision.memo
        for step in decision.steps:
            if isinstance(step, VerifyHandoff) and isinstance(step.passed, Fire) \
                    and step.passed.trigger == "idle_stable":  # journaled into sending, then sent
                assert step.passed.then == "deliver"
                assert facts.runtime_status == "idle" and not facts.user_turn_running, \
                    "the injection must never go into a running turn"
                assert not cancelled
                sent += 1
            elif isinstance(step, Arm) and step.timer == "idle":
                armed = step.serial
            elif isinstance(step, Fire):
                if step.trigger == "cancel":
                    cancelled = True
                    assert step.evidence["delivery"] == ("unknown" if sent else "not_delivered")
                state = JobState.COMPLETED if step.trigger.startswith("handoff_") else JobState.CANCELLED
    assert sent <= 1
