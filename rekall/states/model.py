"""The nouns of the lifecycle: a job's states, its two machines' states, the view guards read, and a
time reading.

A job runs two machines (:mod:`rekall.states.table`): the compaction machine (when the compaction ends and
how) and the delivery machine (how, once, the handoff reaches the model). What a job *is*, the one
``state`` every reader shows, is derived from both by :func:`job_state`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from enum import Enum
from functools import cached_property
from types import MappingProxyType
from typing import Any

import attrs

from rekall.kernel.jobstate import job_state_named
from rekall.states.status import JobStatus, read


class _Documented(str, Enum):
    """A state: its value is the string written to disk, and it says what it means (``doc``)."""

    doc: str

    def __new__(cls, value: str, doc: str) -> _Documented:
        member = str.__new__(cls, value)
        member._value_ = value
        member.doc = doc
        return member


class JobState(_Documented):
    """Where a job is. Values are the strings written to disk (``state`` and ``status``)."""

    SCHEDULED = "scheduled", "Saved with its handoff; the worker has not started yet."
    WAITING_FOR_IDLE = "waiting_for_idle", "The worker follows the thread and waits for idle to hold."
    REQUESTING = "requesting", "Idle held; the compaction request is being sent to the owner."
    ACCEPTED = "accepted", "The owner accepted the request; completion has not been seen yet."
    COMPACTED = (
        "compacted",
        "The compaction completed and the delivery machine has the job, but its route is not journaled yet "
        "(seen only when the worker stopped between the two records).",
    )
    WAITING_FOR_RESUME_IDLE = (
        "waiting_for_resume_idle",
        "Compaction completed with headroom; waiting for idle before the continuation turn.",
    )
    RESUMING = "resuming", "The continuation turn is being started."
    INJECTING = (
        "injecting",
        "Compaction completed and no continuation will carry the handoff; it is injected into the thread's "
        "context (the platform's way in, without a turn) once the thread has stayed idle, never while a turn "
        "runs: after a turn the user started first, it reaches their next message.",
    )
    COMPLETED = "completed", "Terminal: the compaction completed; no continuation was asked for."
    RESUMED = "resumed", "Terminal: the compaction completed and one continuation turn started."
    SKIPPED = "skipped", "Terminal: the compaction completed; the continuation was refused for headroom."
    CANCELLED = "cancelled", "Terminal: cancelled on request, by new user input or a new turn, an active goal, or a stopped turn."
    TIMED_OUT = "timed_out", "Terminal: the worker's deadline passed first."
    FAILED = "failed", "Terminal: an error stopped the job (its errorCode says which)."

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES: frozenset[JobState] = frozenset(
    {JobState.COMPLETED, JobState.RESUMED, JobState.SKIPPED, JobState.CANCELLED, JobState.TIMED_OUT, JobState.FAILED}
)
#: The end states that mean the job did what it was asked (``rekall worker`` and ``wait`` exit 0).
SUCCESSFUL_END_STATES: frozenset[JobState] = frozenset(
    {JobState.COMPLETED, JobState.RESUMED, JobState.SKIPPED, JobState.CANCELLED})
NON_TERMINAL_STATES: tuple[JobState, ...] = tuple(s for s in JobState if s not in TERMINAL_STATES)
#: The compaction machine's states; the others are the delivery machine's, named for its route.
COMPACTION_STATES: tuple[JobState, ...] = (
    JobState.SCHEDULED, JobState.WAITING_FOR_IDLE, JobState.REQUESTING, JobState.ACCEPTED, JobState.COMPACTED,
    JobState.CANCELLED, JobState.TIMED_OUT, JobState.FAILED)


class DeliveryState(_Documented):
    """Where the handoff's delivery is, whatever its route. Values are the strings written to disk."""

    PENDING = "pending", "The compaction has not completed: nothing to deliver yet."
    WAITING = "waiting", "A route is chosen; it waits for the thread to stay idle."
    SENDING = "sending", ("The route's request (the continuation turn, the injection) is journaled and leaves next; "
                          "its answer is awaited.")
    DELIVERED = "delivered", "Terminal: the owner acknowledged the route's request."
    SETTLED = "settled", ("Terminal: rekall delivered nothing: no route carries the handoff, another route (the "
                          "plugin's hook) delivered it, or the request was refused or its answer lost "
                          "(handoffDelivery says which).")

    @property
    def terminal(self) -> bool:
        return self in (DeliveryState.DELIVERED, DeliveryState.SETTLED)


_BY_VALUE = {state.value: state for state in JobState}
#: A state of either machine (their values differ, so a value names one state).
MachineState = JobState | DeliveryState


def job_state(compaction: JobState, delivery: DeliveryState, route: str | None, resume_skipped: Any) -> JobState:
    """The job's one state, derived from both machines (:func:`rekall.kernel.jobstate.job_state_named`)."""
    return _BY_VALUE[job_state_named(compaction.value, delivery.value, route, resume_skipped)]


@attrs.frozen
class Instant:
    """One reading of the clocks: UTC wall time for records, monotonic ms for durations."""

    wall: datetime
    mono_ms: int

    @cached_property  # a transition writes it more than once (the record's ``at``, its fields)
    def iso(self) -> str:
        return iso_time(self.wall)


def iso_time(wall: datetime) -> str:
    """``2026-11-30T03:19:00.123Z``, the format the Node version writes."""
    return wall.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{wall.microsecond // 1000:03d}Z"


def _frozen(value: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class JobView:
    """What guards and effects may read about a job: both machines' states, the delivery's route, its
    fields so far and when its states began.

    Built by replaying the job's journal; never mutated, only advanced.
    """

    job_id: str
    thread_id: str
    #: The compaction machine's state.
    compaction: JobState
    fields: Mapping[str, Any] = attrs.field(converter=_frozen)
    #: Monotonic ms at which the job entered each of its states (for durations such as compactionDurationMs).
    entered_ms: Mapping[JobState, int] = attrs.field(converter=_frozen)
    delivery: DeliveryState = DeliveryState.PENDING
    #: The delivery's route once chosen (``continuation``, ``injection``); ``None`` before, or with none.
    route: str | None = None

    @cached_property
    def state(self) -> JobState:
        """The job's state, derived from both machines (:func:`job_state`)."""
        return job_state(self.compaction, self.delivery, self.route, self.fields.get("resumeSkipped"))

    @cached_property  # read by the guards and the effect of one transition; the record is frozen
    def status(self) -> JobStatus:
        """The fields as the status record (a field the record does not know is left out)."""
        return read(self.fields)

    @property
    def resume(self) -> bool:
        return self.status.resume is True

    def state_in(self, machine: str) -> JobState | DeliveryState:
        """The state of the machine named ``machine`` (``compaction`` or ``delivery``)."""
        return self.delivery if machine == "delivery" else self.compaction

    def moved(self, dest: MachineState, fields: Mapping[str, Any], mono_ms: int, route: str | None = None) -> JobView:
        """After one machine moved into ``dest`` and set ``fields`` (a delivery move: with the route after it)."""
        if isinstance(dest, DeliveryState):
            compaction, delivery = self.compaction, dest
        else:
            compaction, delivery, route = dest, self.delivery, self.route
        merged = {**self.fields, **fields}
        state = job_state(compaction, delivery, route, merged.get("resumeSkipped"))
        # The job's state may go on (an injection being sent is still injecting): it was entered before.
        entered = self.entered_ms if state is self.state else {**self.entered_ms, state: mono_ms}
        return JobView(self.job_id, self.thread_id, compaction, merged, entered, delivery, route)
