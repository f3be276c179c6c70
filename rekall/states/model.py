"""The nouns of the lifecycle: a job's states, the view guards read, and a time reading."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from enum import Enum
from functools import cached_property
from types import MappingProxyType
from typing import Any

import attrs

from rekall.states.status import JobStatus, read


class JobState(str, Enum):
    """Where a job is. Values are the strings written to disk (``state`` and ``status``)."""

    doc: str

    def __new__(cls, value: str, doc: str) -> JobState:
        member = str.__new__(cls, value)
        member._value_ = value
        member.doc = doc
        return member

    SCHEDULED = "scheduled", "Saved with its handoff; the worker has not started yet."
    WAITING_FOR_IDLE = "waiting_for_idle", "The worker follows the thread and waits for idle to hold."
    REQUESTING = "requesting", "Idle held; the compaction request is being sent to the owner."
    ACCEPTED = "accepted", "The owner accepted the request; completion has not been seen yet."
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
    """What guards and effects may read about a job: its fields so far and when states began.

    Built by replaying the job's journal; never mutated, only advanced.
    """

    job_id: str
    thread_id: str
    state: JobState
    fields: Mapping[str, Any] = attrs.field(converter=_frozen)
    #: Monotonic ms at which each state was entered (for durations such as compactionDurationMs).
    entered_ms: Mapping[JobState, int] = attrs.field(converter=_frozen)

    @cached_property  # read by the guards and the effect of one transition; the record is frozen
    def status(self) -> JobStatus:
        """The fields as the status record (a field the record does not know is left out)."""
        return read(self.fields)

    @property
    def resume(self) -> bool:
        return self.status.resume is True

    def advanced(self, dest: JobState, fields: Mapping[str, Any], mono_ms: int) -> JobView:
        return JobView(self.job_id, self.thread_id, dest, {**self.fields, **fields},
                       {**self.entered_ms, dest: mono_ms})
