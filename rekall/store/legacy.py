"""Journals written before the delivery had a machine of its own (record versions 1 and 2).

Until then one machine ran the whole job, and its records name the job's states: a continuation
``waiting_for_resume_idle`` → ``resuming`` → ``resumed``, an injection ``injecting`` → ``completed``.
Each such record is read as the moves the two machines make for it today (:data:`MOVES`), checked
against their tables like any other move, and must lead to the state it names.
"""

from __future__ import annotations

import attrs

from rekall.states import COMPACTION, DELIVERY, DeliveryState, JobState, Table
from rekall.kernel.jobstate import CONTINUATION, INJECTION
from rekall.states.table import ENDS
from rekall.store.wire import DeliveryRecord, Move, TransitionRecord

S, D = JobState, DeliveryState


@attrs.frozen
class MachineMove:
    """One machine's move as a record says it (``route``: the delivery's route after a delivery move)."""

    table: Table
    source: JobState | DeliveryState
    trigger: str
    dest: JobState | DeliveryState
    route: str | None = None


def _delivery(source: DeliveryState, trigger: str, dest: DeliveryState, route: str) -> MachineMove:
    return MachineMove(DELIVERY, source, trigger, dest, route)


_COMPACTION_STATES = frozenset(COMPACTION.states)
#: The states the single machine was in while it delivered.
DELIVERING = (S.WAITING_FOR_RESUME_IDLE, S.RESUMING, S.INJECTING)
#: Where a completion led, as the delivery machine's state and route.
_COMPLETED_INTO = {S.WAITING_FOR_RESUME_IDLE: (D.WAITING, CONTINUATION), S.INJECTING: (D.WAITING, INJECTION),
                   S.COMPLETED: (D.SETTLED, None), S.SKIPPED: (D.SETTLED, None)}
_INJECTION_SENT = _delivery(D.WAITING, "idle_stable", D.SENDING, INJECTION)  # journaled since the split only
#: The single machine's delivery rows, as the delivery machine's moves.
MOVES: dict[tuple[JobState, str, JobState], tuple[MachineMove, ...]] = {
    (S.WAITING_FOR_RESUME_IDLE, "idle_stable", S.RESUMING): (
        _delivery(D.WAITING, "idle_stable", D.SENDING, CONTINUATION),),
    (S.WAITING_FOR_RESUME_IDLE, "idle_stable", S.SKIPPED): (
        _delivery(D.WAITING, "idle_stable", D.SETTLED, CONTINUATION),),
    (S.WAITING_FOR_RESUME_IDLE, "idle_stable", S.INJECTING): (
        _delivery(D.WAITING, "idle_stable", D.WAITING, INJECTION),),
    (S.WAITING_FOR_RESUME_IDLE, "resume_overtaken", S.INJECTING): (
        _delivery(D.WAITING, "rerouted", D.WAITING, INJECTION),),
    (S.RESUMING, "resume_overtaken", S.COMPLETED): (
        _delivery(D.SENDING, "handoff_not_delivered", D.SETTLED, CONTINUATION),),
    (S.RESUMING, "turn_started", S.RESUMED): (_delivery(D.SENDING, "handoff_delivered", D.DELIVERED, CONTINUATION),),
    **{(S.INJECTING, "handoff_injected", end): (_INJECTION_SENT,
                                                _delivery(D.SENDING, "handoff_delivered", D.DELIVERED, INJECTION))
       for end in (S.COMPLETED, S.SKIPPED)},
    **{(S.INJECTING, "handoff_not_delivered", end): (
        _delivery(D.WAITING, "handoff_not_delivered", D.SETTLED, INJECTION),) for end in (S.COMPLETED, S.SKIPPED)},
}


def is_legacy(record: Move) -> bool:
    """A record of the single machine: it names a state the compaction machine does not have (since the
    split, a ``transition`` record moves only the compaction machine)."""
    return isinstance(record, TransitionRecord) and record.source is not None \
        and not {record.source, record.dest} <= _COMPACTION_STATES


def moves_of(record: Move) -> tuple[MachineMove, ...] | None:
    """The machines' moves ``record`` stands for (``None``: no move of either machine)."""
    if isinstance(record, DeliveryRecord):
        return (MachineMove(DELIVERY, record.source, record.trigger, record.dest, record.route),)
    source, trigger, dest = record.source, record.trigger, record.dest
    if source is None:
        return None
    if not is_legacy(record):
        return (MachineMove(COMPACTION, source, trigger, dest),)
    if source is S.ACCEPTED and trigger == "compaction_completed" and dest in _COMPLETED_INTO:
        into, route = _COMPLETED_INTO[dest]
        return (MachineMove(COMPACTION, S.ACCEPTED, trigger, S.COMPACTED),
                MachineMove(DELIVERY, D.PENDING, "route_chosen", into, route))
    if source in DELIVERING and trigger in ENDS:
        return (MachineMove(COMPACTION, S.COMPACTED, trigger, dest),)
    return MOVES.get((source, trigger, dest))
