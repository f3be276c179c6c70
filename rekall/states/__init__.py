"""The job lifecycle: states, the one transition table, the machine that runs it, rendering.

Only this package decides what state a job is in. The worker fires triggers with evidence;
the table's guards (pure functions of the job and the evidence) pick the transition, its
effect says which status fields change, and the store journals the result before it takes
effect. See ``rekall.states.table`` for the rules and ``docs/states.md`` for the picture.
"""

from rekall.states.evidence import TRIGGERS, InvalidEvidence, UnknownTrigger, validate_evidence
from rekall.states.machine import (
    GuardVerdict,
    IllegalTransition,
    JobMachine,
    Step,
    TransitionRefused,
    build_machine,
)
from rekall.states.model import NON_TERMINAL_STATES, SUCCESSFUL_END_STATES, TERMINAL_STATES, Instant, JobState, JobView, iso_time
from rekall.states.rules import (
    HEADROOM_LIMIT,
    REQUEST_SENT_UNOBSERVED,
    Headroom,
    check_headroom,
    outcome_may_be_unknown,
)
from rekall.states.table import SCHEDULE, TRANSITIONS, Transition, find_row, rows_for

__all__ = [
    "HEADROOM_LIMIT",
    "NON_TERMINAL_STATES",
    "SCHEDULE",
    "TERMINAL_STATES",
    "SUCCESSFUL_END_STATES",
    "REQUEST_SENT_UNOBSERVED",
    "TRANSITIONS",
    "TRIGGERS",
    "GuardVerdict",
    "Headroom",
    "IllegalTransition",
    "Instant",
    "InvalidEvidence",
    "JobMachine",
    "JobState",
    "JobView",
    "Step",
    "Transition",
    "TransitionRefused",
    "UnknownTrigger",
    "build_machine",
    "check_headroom",
    "find_row",
    "iso_time",
    "outcome_may_be_unknown",
    "rows_for",
    "validate_evidence",
]
