"""Structural checks of the one transition table (transitions itself validates none of this)."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings, strategies as st

from rekall.states import NON_TERMINAL_STATES, TERMINAL_STATES, TRANSITIONS, TRIGGERS, JobState, JobView, rows_for
from rekall.states.table import TRIGGER_NAMES


def _edges() -> dict[JobState, set[JobState]]:
    edges: dict[JobState, set[JobState]] = {s: set() for s in JobState}
    for row in TRANSITIONS:
        for source in row.source:
            edges[source].add(row.dest)
    return edges


def _reachable(start: JobState) -> set[JobState]:
    edges, seen, queue = _edges(), {start}, deque([start])
    while queue:
        for nxt in edges[queue.popleft()] - seen:
            seen.add(nxt)
            queue.append(nxt)
    return seen


def test_every_state_is_reachable_from_scheduled():
    assert _reachable(JobState.SCHEDULED) == set(JobState)


def test_every_non_terminal_state_can_reach_a_terminal_state():
    for state in NON_TERMINAL_STATES:
        assert _reachable(state) & TERMINAL_STATES, state


def test_terminal_states_have_no_exits():
    for row in TRANSITIONS:
        assert not set(row.source) & TERMINAL_STATES, row


def test_cancel_deadline_and_fail_leave_every_non_terminal_state():
    for trigger, dest in (("cancel", JobState.CANCELLED), ("deadline", JobState.TIMED_OUT), ("fail", JobState.FAILED)):
        for state in NON_TERMINAL_STATES:
            assert [r.dest for r in rows_for(state, trigger)] == [dest]


def test_every_trigger_in_the_table_declares_its_evidence_and_no_other():
    assert set(TRIGGER_NAMES) == set(TRIGGERS)


def test_only_guarded_rows_share_a_trigger_and_a_source():
    for state in JobState:
        for trigger in TRIGGER_NAMES:
            rows = rows_for(state, trigger)
            if len(rows) > 1:
                assert all(r.guard is not None for r in rows), (state, trigger)


_tokens = st.one_of(st.none(), st.integers(-5, 200_000), st.booleans(), st.floats(allow_nan=False))
_fingerprint = st.sampled_from([None, "fp-1", "fp-2"])


@settings(max_examples=300, deadline=None)
@given(
    state=st.sampled_from(NON_TERMINAL_STATES),
    resume=st.booleans(),
    before=_tokens,
    fingerprint=_fingerprint,
    evidence=st.fixed_dictionaries({
        "tokens": _tokens, "window": _tokens, "boundaryFingerprint": _fingerprint,
        "handoffVerified": st.sampled_from([True, False, None]), "jobId": st.just("x"), "tokensBefore": _tokens,
    }),
)
def test_guards_of_rows_sharing_a_trigger_and_state_are_mutually_exclusive(state, resume, before, fingerprint,
                                                                            evidence):
    job = JobView("x", "t", state, {"resume": resume, "contextTokensBefore": before, "userFingerprint": fingerprint},
                  {})
    for trigger in TRIGGER_NAMES:
        passing = [r for r in rows_for(state, trigger) if r.guard is None or r.guard(job, evidence)]
        assert len(passing) <= 1, (trigger, passing)
