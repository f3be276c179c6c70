from __future__ import annotations

import pytest

from rekall.states import JobState, check_headroom, outcome_may_be_unknown


def test_exactly_sixty_percent_of_the_window_passes():
    assert check_headroom(60_000, 100_000, 90_000).safe


def test_just_over_sixty_percent_is_unsafe_with_the_fraction_recorded():
    headroom = check_headroom(60_001, 100_000, 90_000)
    assert (headroom.safe, headroom.reason, headroom.used_fraction) == (False, "more_than_60_percent_used", 0.60001)


@pytest.mark.parametrize(("tokens", "window"), [
    (None, 100_000), (-1, 100_000), (True, 100_000), (1.5, 100_000), ("10", 100_000),
    (10, None), (10, 0), (10, -5), (10, False),
])
def test_missing_or_malformed_telemetry_is_unsafe(tokens, window):
    assert check_headroom(tokens, window, 90_000).reason == "missing_token_telemetry"


@pytest.mark.parametrize("tokens", [90_000, 95_000])
def test_telemetry_that_shows_no_fewer_tokens_than_before_is_stale(tokens):
    assert check_headroom(tokens, 1_000_000, 90_000).reason == "stale_or_unreclaimed_token_telemetry"


def test_the_stale_check_is_skipped_when_the_tokens_before_are_unknown():
    assert check_headroom(50_000, 100_000, None).safe


@pytest.mark.parametrize(("state", "delivery", "unknown"), [
    (JobState.SCHEDULED, None, False),
    (JobState.WAITING_FOR_IDLE, "unknown", False),
    (JobState.REQUESTING, None, True),
    (JobState.REQUESTING, "unknown", True),
    (JobState.REQUESTING, "not_delivered", False),
    (JobState.ACCEPTED, "not_delivered", True),
    (JobState.WAITING_FOR_RESUME_IDLE, None, False),
    (JobState.RESUMING, None, True),
    (JobState.RESUMING, "not_delivered", False),
])
def test_outcome_may_be_unknown_follows_what_may_have_been_delivered(state, delivery, unknown):
    evidence = {} if delivery is None else {"delivery": delivery}
    assert outcome_may_be_unknown(state, evidence) is unknown
