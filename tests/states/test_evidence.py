from __future__ import annotations

import pytest

from rekall.states import InvalidEvidence, UnknownTrigger, validate_evidence


def test_declared_evidence_is_returned_unchanged():
    evidence = {"compactionId": "c", "tokens": None, "window": 10, "revision": 3}
    assert validate_evidence("compaction_completed", evidence) == evidence


def test_an_unknown_key_is_rejected_by_name():
    with pytest.raises(InvalidEvidence) as caught:
        validate_evidence("compaction_accepted", {"ownerId": "o", "ownerID": "typo"})
    assert caught.value.field == "ownerID"
    assert "ownerID" in caught.value.message


def test_a_missing_required_key_is_rejected_by_name():
    with pytest.raises(InvalidEvidence) as caught:
        validate_evidence("fail", {"errorCode": "x"})
    assert caught.value.field == "error"


@pytest.mark.parametrize(("trigger", "evidence", "field"), [
    ("worker_started", {"jobId": "j", "pid": True, "host": "h", "processStartTime": None}, "pid"),
    ("cancel", {"reason": "bored"}, "reason"),
    ("fail", {"errorCode": "x", "error": "y", "delivery": "maybe"}, "delivery"),
    ("deadline", {"deadlineS": float("inf")}, "deadlineS"),
    ("handoff_delivered", {"turnId": "  "}, "turnId"),
])
def test_a_value_of_the_wrong_kind_is_rejected_by_name(trigger, evidence, field):
    with pytest.raises(InvalidEvidence) as caught:
        validate_evidence(trigger, evidence)
    assert caught.value.field == field


def test_an_undeclared_trigger_is_rejected():
    with pytest.raises(UnknownTrigger, match="headroom_lost"):
        validate_evidence("headroom_lost", {})
