"""How the handoff reaches the model after the compaction, as the delivery machine records it."""

from __future__ import annotations

from typing import Any

import pytest

import attrs

from rekall.states import DeliveryState, JobMachine, JobState, JobView
from rekall.states.machine import IllegalTransition, TransitionRefused
from rekall.testing import FakeClock

S = JobState
JOB = "11111111-1111-4111-8111-111111111111"
COMPLETED = {"compactionId": "c1", "tokens": 30_000, "window": 200_000, "revision": 3}
FULL = {**COMPLETED, "tokens": 150_000}  # more than 60% of the window: no headroom
IDLE = {"idleMs": 800, "tokens": 150_000, "window": 200_000, "revision": 4, "boundaryFingerprint": "fp-1",
        "handoffVerified": True}
CLOCK = FakeClock()


def accepted(resume: bool) -> JobMachine:
    fields = {"resume": resume, "userFingerprint": "fp-1", "contextTokensBefore": 190_000}
    return JobMachine(JobView(JOB, "t", S.ACCEPTED, fields, {S.REQUESTING: 0, S.ACCEPTED: 10}))


def fire(machine: JobMachine, trigger: str, evidence: dict[str, Any], after_ms: int = 0) -> JobState:
    CLOCK.advance(after_ms)
    machine.fire(trigger, evidence, CLOCK.now(), lambda step: None)
    return machine.state


def inject(machine: JobMachine, text_bytes: int = 900, after_ms: int = 0) -> JobState:
    """The thread stayed idle: the injection is journaled, sent, and acknowledged."""
    assert fire(machine, "idle_stable", IDLE, after_ms=after_ms) is S.INJECTING
    assert machine.view.delivery is DeliveryState.SENDING
    return fire(machine, "handoff_delivered", {"textBytes": text_bytes})


def fields(machine: JobMachine) -> dict[str, Any]:
    return dict(machine.view.fields)


def test_without_a_continuation_the_job_injects_and_records_the_acknowledged_injection():
    machine = accepted(resume=False)
    assert fire(machine, "compaction_completed", {**COMPLETED, "inject": True}) is S.INJECTING
    assert "completedAt" not in fields(machine) and "handoffDelivery" not in fields(machine)
    assert inject(machine, after_ms=40) is S.COMPLETED
    f = fields(machine)
    assert (f["handoffDelivery"], f["injectedBytes"], f["injectDelayMs"]) == ("injected", 900, 40)
    assert f["outcomeMayBeUnknown"] is False and f["handoffInjectedAt"] == f["completedAt"]


def test_a_continuation_skipped_for_headroom_injects_and_ends_skipped():
    machine = accepted(resume=True)
    assert fire(machine, "compaction_completed", {**FULL, "inject": True}) is S.INJECTING
    assert fields(machine)["resumeSkipped"] == "insufficient_headroom"
    assert inject(machine) is S.SKIPPED
    assert fields(machine)["handoffDelivery"] == "injected"


def test_headroom_lost_at_the_resume_check_injects_and_ends_skipped():
    machine = accepted(resume=True)
    assert fire(machine, "compaction_completed", {**COMPLETED, "inject": True}) is S.WAITING_FOR_RESUME_IDLE
    assert fire(machine, "idle_stable", {**IDLE, "inject": True}, after_ms=900) is S.INJECTING
    assert inject(machine, after_ms=30) is S.SKIPPED
    assert fields(machine)["injectDelayMs"] == 930  # from the completion, not from the resume check


def test_a_continuation_overtaken_by_the_user_injects_and_ends_completed_with_the_reason():
    machine = accepted(resume=True)
    fire(machine, "compaction_completed", {**COMPLETED, "inject": True})
    assert fire(machine, "rerouted", {"reason": "new_user_input"}) is S.INJECTING
    assert inject(machine) is S.COMPLETED
    f = fields(machine)
    assert (f["resumeSkipped"], f["handoffDelivery"]) == ("new_user_input", "injected")
    assert "resumeTurnId" not in f


def test_a_continuation_overtaken_before_the_completion_was_recorded_injects_and_ends_completed():
    machine = accepted(resume=True)
    moved = {**COMPLETED, "userMovedOn": "user_turn_stopped", "inject": True}
    assert fire(machine, "compaction_completed", moved) is S.INJECTING
    f = fields(machine)
    assert f["resumeSkipped"] == "user_turn_stopped" and "stopped their turn" in f["resumeSkipReason"]
    assert "completedAt" not in f and "handoffDelivery" not in f
    assert inject(machine, after_ms=20) is S.COMPLETED
    f = fields(machine)
    assert (f["handoffDelivery"], f["injectDelayMs"], f["resumeSkipped"]) == ("injected", 20, "user_turn_stopped")
    assert "resumeTurnId" not in f


def test_a_continuation_overtaken_before_the_completion_was_recorded_says_why_nothing_was_injected():
    machine = accepted(resume=True)
    moved = {**COMPLETED, "userMovedOn": "new_user_input", "injectionLimit": "no way in"}
    assert fire(machine, "compaction_completed", moved) is S.COMPLETED
    f = fields(machine)
    assert (f["resumeSkipped"], f["handoffDelivery"], f["handoffDeliveryNote"]) == (
        "new_user_input", "not_delivered", "no way in")


def test_an_injection_whose_answer_was_lost_is_unknown_and_the_outcome_may_be_unknown():
    machine = accepted(resume=False)
    fire(machine, "compaction_completed", {**COMPLETED, "inject": True})
    assert fire(machine, "handoff_not_delivered", {"errorCode": "request_timeout", "error": "no answer in 10 s",
                                                   "delivery": "unknown"}) is S.COMPLETED
    f = fields(machine)
    assert f["handoffDelivery"] == "unknown" and f["outcomeMayBeUnknown"] is True
    assert "never sent again" in f["handoffDeliveryNote"] and "no answer in 10 s" in f["handoffDeliveryNote"]


def test_a_refused_injection_is_not_delivered_and_says_why():
    machine = accepted(resume=False)
    fire(machine, "compaction_completed", {**COMPLETED, "inject": True})
    fire(machine, "handoff_not_delivered", {"errorCode": "request_failed", "error": "rejected", "delivery":
                                            "not_delivered"})
    f = fields(machine)
    assert (f["handoffDelivery"], f["handoffDeliveryNote"], f["outcomeMayBeUnknown"]) == (
        "not_delivered", "request_failed: rejected", False)


def test_a_job_ending_while_it_injects_leaves_the_delivery_unknown_unless_nothing_was_sent():
    for evidence, delivery in (({}, "unknown"), ({"delivery": "not_delivered"}, "not_delivered")):
        machine = accepted(resume=False)
        fire(machine, "compaction_completed", {**COMPLETED, "inject": True})
        assert fire(machine, "fail", {"errorCode": "worker_lost", "error": "gone", **evidence}) is S.FAILED
        assert fields(machine)["handoffDelivery"] == delivery


def test_where_the_handoff_cannot_be_injected_the_job_says_why_it_was_not_delivered():
    machine = accepted(resume=False)
    assert fire(machine, "compaction_completed", {**COMPLETED, "injectionLimit": "no way in"}) is S.COMPLETED
    assert (fields(machine)["handoffDelivery"], fields(machine)["handoffDeliveryNote"]) == ("not_delivered",
                                                                                           "no way in")
    machine = accepted(resume=True)
    fire(machine, "compaction_completed", {**COMPLETED, "injectionLimit": "no way in"})
    assert fire(machine, "cancel", {"reason": "new_user_input", "injectionLimit": "no way in"}) is S.CANCELLED
    assert fields(machine)["handoffDelivery"] == "not_delivered"


def test_an_older_journal_without_delivery_evidence_replays_as_before():
    machine = accepted(resume=False)
    assert fire(machine, "compaction_completed", COMPLETED) is S.COMPLETED
    assert "handoffDelivery" not in fields(machine)


def test_the_continuation_records_that_it_carried_the_handoff():
    machine = accepted(resume=True)
    fire(machine, "compaction_completed", {**COMPLETED, "inject": True})
    fire(machine, "idle_stable", {**IDLE, "tokens": 30_000, "inject": True})
    assert fire(machine, "handoff_delivered", {"turnId": "turn-9"}) is S.RESUMED
    assert fields(machine)["handoffDelivery"] == "continuation"


def resuming() -> JobMachine:
    machine = accepted(resume=True)
    fire(machine, "compaction_completed", {**COMPLETED, "inject": True})
    assert fire(machine, "idle_stable", {**IDLE, "tokens": 30_000, "inject": True}) is S.RESUMING
    return machine


def test_a_continuation_the_plugins_hook_delivered_first_ends_completed_with_the_outcome_known():
    machine = resuming()
    assert fire(machine, "handoff_not_delivered", {"errorCode": "handoff_delivered_by_hook", "error": "the hook",
                                                   "delivery": "hook"}) is S.COMPLETED
    f = fields(machine)
    assert (f["resumeSkipped"], f["outcomeMayBeUnknown"]) == ("handoff_delivered_by_hook", False)
    assert "hook delivered the handoff at its start" in f["resumeSkipReason"] and "completedAt" in f
    assert "handoffDelivery" not in f and "resumeTurnId" not in f and "errorCode" not in f  # the claim says hook


def test_a_continuation_is_rerouted_only_while_it_waits_and_leaves_without_delivery_only_for_the_hook():
    machine = resuming()
    with pytest.raises(IllegalTransition):
        fire(machine, "rerouted", {"reason": "new_user_input"})  # while resuming the user is not watched
    with pytest.raises(TransitionRefused, match="not_delivered_by_the_route \\(to settled\\) said no"):
        fire(machine, "handoff_not_delivered", {"errorCode": "request_failed", "error": "no", "delivery": "unknown"})
    with pytest.raises(TransitionRefused, match="answers_the_route"):
        fire(machine, "handoff_delivered", {"textBytes": 900})  # a continuation's answer is a started turn
    assert machine.state is S.RESUMING


def test_an_explicit_cancel_withholds_the_handoff_unless_a_continuation_may_be_on_its_way():
    def with_handoff(machine: JobMachine) -> JobMachine:
        view = machine.view
        return JobMachine(attrs.evolve(view, fields={**view.fields, "handoffSha256": "a" * 64}))

    waiting = accepted(resume=True)
    fire(waiting, "compaction_completed", {**COMPLETED, "inject": True})
    waiting = with_handoff(waiting)
    assert fire(waiting, "cancel", {"reason": "explicit_cancellation"}) is S.CANCELLED
    assert fields(waiting)["handoffDelivery"] == "not_delivered"
    assert "cancelled explicitly" in fields(waiting)["handoffDeliveryNote"]
    # Resuming, the claim the cancel holds proves the continuation was never sent.
    lost_claim = with_handoff(resuming())
    fire(lost_claim, "cancel", {"reason": "explicit_cancellation", "delivery": "not_delivered"})
    f = fields(lost_claim)
    assert (f["handoffDelivery"], f["outcomeMayBeUnknown"]) == ("not_delivered", False)
    # Resuming, a continuation that may have been sent is not said to be withheld.
    in_flight = with_handoff(resuming())
    fire(in_flight, "cancel", {"reason": "explicit_cancellation"})
    assert "handoffDelivery" not in fields(in_flight) and fields(in_flight)["outcomeMayBeUnknown"] is True
