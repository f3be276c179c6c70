"""The job lifecycle: states, the two machines' tables, the machine that runs them, rendering.

Only this package decides what state a job is in. The worker fires triggers with evidence;
the tables' guards (pure functions of the job and the evidence) pick the transition, its
effect says which status fields change, and the store journals the result before it takes
effect. The compaction machine (``rekall.states.table``) says when the compaction ends and how;
the delivery machine (``rekall.states.delivery``) how, once, the handoff reaches the model. The
job's one state is derived from both (``rekall.states.model.job_state``). See
``docs/states.md`` for the picture.
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
from rekall.states.delivery import DELIVERY
from rekall.states.model import (
    COMPACTION_STATES,
    NON_TERMINAL_STATES,
    SUCCESSFUL_END_STATES,
    TERMINAL_STATES,
    DeliveryState,
    Instant,
    JobState,
    JobView,
    iso_time,
    job_state,
)
from rekall.states.rules import (
    HEADROOM_LIMIT,
    REQUEST_SENT_UNOBSERVED,
    Headroom,
    check_headroom,
    outcome_may_be_unknown,
)
from rekall.states.rows import Table, Transition
from rekall.states.table import COMPACTION, MACHINES, SCHEDULE, table_named

__all__ = [
    "COMPACTION",
    "COMPACTION_STATES",
    "DELIVERY",
    "MACHINES",
    "DeliveryState",
    "Table",
    "job_state",
    "table_named",
    "HEADROOM_LIMIT",
    "NON_TERMINAL_STATES",
    "SCHEDULE",
    "TERMINAL_STATES",
    "SUCCESSFUL_END_STATES",
    "REQUEST_SENT_UNOBSERVED",
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
    "iso_time",
    "outcome_may_be_unknown",
    "validate_evidence",
]
