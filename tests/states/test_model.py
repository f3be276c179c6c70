from __future__ import annotations

from datetime import datetime, timezone

from rekall.states import NON_TERMINAL_STATES, TERMINAL_STATES, Instant, JobState, JobView, iso_time


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


def test_an_instants_time_is_written_once_and_the_same_each_time_it_is_read():
    now = Instant(datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=timezone.utc), 5)
    assert now.iso == "2026-01-02T03:04:05.678Z" and now.iso is now.iso
    assert now == Instant(now.wall, 5) and hash(now) == hash(Instant(now.wall, 5))


def test_a_views_status_is_read_from_its_fields_once_and_an_advanced_view_reads_its_own():
    view = JobView("j", "t", JobState.SCHEDULED, {"resume": True, "pid": 1}, {})
    assert view.status is view.status and view.status.pid == 1 and view.resume
    later = view.moved(JobState.WAITING_FOR_IDLE, {"pid": 2}, 7)
    assert later.status.pid == 2 and view.status.pid == 1
    assert later == JobView("j", "t", JobState.WAITING_FOR_IDLE, {"resume": True, "pid": 2},
                            {JobState.WAITING_FOR_IDLE: 7})
