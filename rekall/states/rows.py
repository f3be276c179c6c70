"""What a machine's table is made of: rows (a trigger, states from and to, a guard, an effect, a note),
and the few readings of a job that both tables' guards and effects share.

Rule 1: everything that decides a job's state lives in this package, and every transition is a row
of one of two tables: the compaction machine's (:mod:`rekall.states.table`) and the delivery
machine's (:mod:`rekall.states.delivery`). The machines (:mod:`rekall.states.machine`), the docs
(``docs/states.md``), ``rekall explain`` and the journal replay are all built from them.

Rule 2: guards and effects are pure. A guard reads the job (a ``JobView``) and the event's evidence
and answers yes or no; an effect returns the status fields the transition sets. Neither does I/O or
reads a clock: the time comes in as an ``Instant``. That is what makes every decision replayable and
explainable afterwards.

When several rows share a trigger and a source state, their guards are mutually exclusive and the
first that passes wins; when none passes the event is refused, and nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from rekall.states.model import Instant, JobState, JobView, MachineState
from rekall.states.rules import Headroom, check_headroom
from rekall.states.status import JobStatus, known, wire

Evidence = Mapping[str, Any]
Guard = Callable[[JobView, Evidence], bool]
Effect = Callable[[JobView, Evidence, Instant], dict[str, Any]]
#: What a delivery row sets the route to (``None``: no route carries the handoff).
Route = Callable[[JobView, Evidence], str | None]


@attrs.frozen
class Transition:
    trigger: str
    source: tuple[MachineState, ...]
    dest: MachineState
    guard: Guard | None
    effect: Effect = attrs.field(repr=False)
    note: str
    #: A delivery row that chooses the route says which; without it the route stays as it was.
    route: Route | None = attrs.field(default=None, repr=False)

    @property
    def guard_name(self) -> str | None:
        return None if self.guard is None else self.guard.__name__


@attrs.frozen
class Table:
    """One machine: its name, its states (the first is where it starts), and its rows."""

    name: str
    title: str
    doc: str
    states: tuple[MachineState, ...]
    terminal: frozenset[MachineState]
    rows: tuple[Transition, ...]

    @property
    def initial(self) -> MachineState:
        return self.states[0]

    @property
    def triggers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(row.trigger for row in self.rows))

    def rows_for(self, state: MachineState, trigger: str) -> tuple[Transition, ...]:
        """The rows that could fire ``trigger`` from ``state``, in the order they are tried."""
        return tuple(row for row in self.rows if row.trigger == trigger and state in row.source)

    def find_row(self, source: MachineState, trigger: str, dest: MachineState) -> Transition | None:
        """The row that moves ``source`` to ``dest`` on ``trigger`` (used to check replayed records)."""
        return next((row for row in self.rows_for(source, trigger) if row.dest is dest), None)


# --- readings both tables share ---------------------------------------------------------------


def boundary_unchanged(job: JobView, ev: Evidence) -> bool:
    """The latest user turn is the one the job was scheduled after."""
    return ev.get("boundaryFingerprint") == known(job.status.userFingerprint)


def tokens_before(job: JobView, ev: Evidence) -> Any:
    """The count before the compaction: the owner's own when the platform reported one with the
    completion (the app-server), else the job's (the count when the request was sent)."""
    said = ev.get("tokensBefore")
    return known(job.status.contextTokensBefore) if said is None else said


def headroom(job: JobView, ev: Evidence) -> Headroom:
    return check_headroom(ev.get("tokens"), ev.get("window"), tokens_before(job, ev))


def since(job: JobView, state: JobState, now: Instant) -> int | None:
    start = job.entered_ms.get(state)
    return None if start is None else now.mono_ms - start


def known_outcome(now: Instant) -> dict[str, Any]:
    return wire(JobStatus(completedAt=now.iso, outcomeMayBeUnknown=False))
