"""Structural checks of the two machines' tables (transitions itself validates none of this)."""

from __future__ import annotations

from collections import deque
from enum import Enum

import pytest
from hypothesis import given, settings, strategies as st

from rekall.states import COMPACTION, COMPACTION_STATES, DELIVERY, MACHINES, TRIGGERS, DeliveryState, JobState, \
    JobView, Table
from rekall.kernel.jobstate import CONTINUATION, INJECTION
from rekall.states.model import job_state
from rekall.states.table import ENDS, TRIGGER_NAMES


def _reachable(table: Table, start: Enum) -> set[Enum]:
    edges: dict[Enum, set[Enum]] = {s: set() for s in table.states}
    for row in table.rows:
        for source in row.source:
            edges[source].add(row.dest)
    seen, queue = {start}, deque([start])
    while queue:
        for nxt in edges[queue.popleft()] - seen:
            seen.add(nxt)
            queue.append(nxt)
    return seen


@pytest.mark.parametrize("table", MACHINES, ids=lambda t: t.name)
def test_every_state_of_a_machine_is_reachable_from_its_first(table: Table):
    assert _reachable(table, table.initial) == set(table.states)


@pytest.mark.parametrize("table", MACHINES, ids=lambda t: t.name)
def test_every_state_but_the_handover_can_reach_an_end_of_its_machine(table: Table):
    for state in table.states:
        if state is not JobState.COMPACTED:  # the compaction machine's end there is the delivery machine's
            assert _reachable(table, state) & table.terminal, state


@pytest.mark.parametrize("table", MACHINES, ids=lambda t: t.name)
def test_terminal_states_have_no_exits(table: Table):
    for row in table.rows:
        assert not set(row.source) & table.terminal, row


def test_the_machines_stay_small_and_no_compaction_row_knows_a_route():
    assert len(COMPACTION.rows) <= 16 and len(DELIVERY.rows) <= 10
    assert all(row.route is None for row in COMPACTION.rows)
    assert set(COMPACTION.states) == set(COMPACTION_STATES) and set(DELIVERY.states) == set(DeliveryState)


def test_cancel_deadline_and_fail_end_the_job_from_every_open_compaction_state():
    assert {"cancel", "deadline", "fail"} <= ENDS
    for trigger, dest in (("cancel", JobState.CANCELLED), ("deadline", JobState.TIMED_OUT), ("fail", JobState.FAILED)):
        for state in COMPACTION.states:
            if state not in COMPACTION.terminal:
                assert [r.dest for r in COMPACTION.rows_for(state, trigger)] == [dest]
    assert not ENDS & set(DELIVERY.triggers)  # the delivery machine never ends the job


def test_every_trigger_in_the_tables_declares_its_evidence_and_no_other():
    assert set(TRIGGER_NAMES) == set(TRIGGERS)


@pytest.mark.parametrize("table", MACHINES, ids=lambda t: t.name)
def test_only_guarded_rows_share_a_trigger_and_a_source(table: Table):
    for state in table.states:
        for trigger in table.triggers:
            rows = table.rows_for(state, trigger)
            if len(rows) > 1:
                assert all(r.guard is not None for r in rows), (state, trigger)


@pytest.mark.parametrize(("delivery", "route", "skipped", "state"), [
    (DeliveryState.WAITING, CONTINUATION, None, JobState.WAITING_FOR_RESUME_IDLE),
    (DeliveryState.SENDING, CONTINUATION, None, JobState.RESUMING),
    (DeliveryState.WAITING, INJECTION, None, JobState.INJECTING),
    (DeliveryState.SENDING, INJECTION, "insufficient_headroom", JobState.INJECTING),
    (DeliveryState.DELIVERED, CONTINUATION, None, JobState.RESUMED),
    (DeliveryState.DELIVERED, INJECTION, None, JobState.COMPLETED),
    (DeliveryState.DELIVERED, INJECTION, "insufficient_headroom", JobState.SKIPPED),
    (DeliveryState.SETTLED, None, "new_user_input", JobState.COMPLETED),
    (DeliveryState.SETTLED, CONTINUATION, "insufficient_headroom", JobState.SKIPPED),
    (DeliveryState.SETTLED, CONTINUATION, "handoff_delivered_by_hook", JobState.COMPLETED),
    (DeliveryState.PENDING, None, None, JobState.COMPACTED),
])
def test_the_job_state_after_the_handover_is_the_delivery_machines_named_for_its_route(delivery, route, skipped,
                                                                                         state):
    assert job_state(JobState.COMPACTED, delivery, route, skipped) is state
    for end in (JobState.CANCELLED, JobState.TIMED_OUT, JobState.FAILED):  # an end is the compaction machine's
        assert job_state(end, delivery, route, skipped) is end


_tokens = st.one_of(st.none(), st.integers(-5, 200_000), st.booleans(), st.floats(allow_nan=False))
_fingerprint = st.sampled_from([None, "fp-1", "fp-2"])


@settings(max_examples=300, deadline=None)
@given(
    compaction=st.sampled_from(COMPACTION_STATES),
    delivery=st.sampled_from(list(DeliveryState)),
    route=st.sampled_from([None, CONTINUATION, INJECTION]),
    resume=st.booleans(),
    before=_tokens,
    fingerprint=_fingerprint,
    evidence=st.fixed_dictionaries({
        "tokens": _tokens, "window": _tokens, "boundaryFingerprint": _fingerprint,
        "handoffVerified": st.sampled_from([True, False, None]), "jobId": st.just("x"), "tokensBefore": _tokens,
    }, optional={"inject": st.booleans(), "userMovedOn": st.just("new_user_input"),
                 "reason": st.sampled_from(["new_user_input", "explicit_cancellation"]),
                 "delivery": st.sampled_from(["hook", "unknown"]), "turnId": st.just("t"), "textBytes": st.just(1)}),
)
def test_guards_of_rows_sharing_a_trigger_and_state_are_mutually_exclusive(compaction, delivery, route, resume, before,
                                                                            fingerprint, evidence):
    job = JobView("x", "t", compaction, {"resume": resume, "contextTokensBefore": before,
                                         "userFingerprint": fingerprint}, {}, delivery, route)
    for table in MACHINES:
        state = job.state_in(table.name)
        for trigger in table.triggers:
            passing = [r for r in table.rows_for(state, trigger) if r.guard is None or r.guard(job, evidence)]
            assert len(passing) <= 1, (trigger, passing)
