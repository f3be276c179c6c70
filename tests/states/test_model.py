from __future__ import annotations

from datetime import datetime, timezone

from rekall.states import NON_TERMINAL_STATES, TERMINAL_STATES, JobState, iso_time


def test_every_state_has_a_doc_and_its_value_is_its_lower_case_name():
    for state in JobState:
        assert state.doc.strip()
        assert state.value == state.name.lower()


def test_terminal_and_non_terminal_states_partition_the_states():
    assert set(NON_TERMINAL_STATES) | TERMINAL_STATES == set(JobState)
    assert not set(NON_TERMINAL_STATES) & TERMINAL_STATES
    assert JobState.SKIPPED.terminal and not JobState.ACCEPTED.terminal


def test_times_are_written_like_the_node_version_with_milliseconds_and_z():
    assert iso_time(datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=timezone.utc)) == "2026-01-02T03:04:05.678Z"
