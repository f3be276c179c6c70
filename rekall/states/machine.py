"""The two tables, each run by the ``transitions`` library, with a commit hook before each move.

``JobMachine`` holds a job's view and one model per machine (compaction, delivery), each bound to
a ``transitions.Machine`` built from its table: the library binds the triggers (``trigger``) to
the model and reads and writes that machine's state through one attribute backed by the job's
view, so each state exists once.

``JobMachine.fire`` routes an event to one machine: the compaction machine until it hands the job
over (``compacted``), then the delivery machine, except for the job's ends (cancel, deadline,
fail, a stuck runtime), which the compaction machine takes wherever the job is. The handover
itself is one event: the completion moves the compaction machine into ``compacted``, then the
delivery machine chooses the route (``route_chosen``) from the same evidence.

Each machine fires through the library, once. The library tries the rows for the current state
in order, asking each row's guard; the first that passes runs its ``before`` callback, which
computes the row's effect and calls the caller's ``commit`` (the store appends the journal record
there and fsyncs it). Only when ``commit`` returns does the library set the state, which advances
the view, so a failed commit leaves the job where it was (write-ahead: the library halts a
transition when a ``before`` callback raises).

The machine is synchronous and queued (run-to-completion); no callback fires a trigger.
States are passed to the library as their string values so that diagrams show the names
written to disk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from rekall.kernel.errors import RekallError
from rekall.states.delivery import DELIVERY
from rekall.states.evidence import TRIGGERS, validate_evidence
from rekall.states.model import Instant, JobState, JobView, MachineState
from rekall.states.rows import Table, Transition
from rekall.states.table import COMPACTION, ENDS, MACHINES

if TYPE_CHECKING:  # the library is imported where a machine is built: `rekall status` never needs it
    from transitions import EventData, Machine

#: The model attribute through which the library reads and sets a machine's state (its string value).
STATE_ATTRIBUTE = "state_value"


@attrs.frozen
class GuardVerdict:
    """One guard's answer while an event was routed: which row (by destination) and yes/no."""

    to: MachineState
    guard: str
    passed: bool


@attrs.frozen
class Step:
    """A decided transition of one machine (``machine``: its table's name), handed to ``commit`` before
    it takes effect."""

    machine: str
    trigger: str
    source: MachineState
    dest: MachineState
    evidence: Mapping[str, Any]
    verdicts: tuple[GuardVerdict, ...]
    #: The status fields the transition sets (the row's effect).
    fields: Mapping[str, Any]
    now: Instant
    #: The delivery's route after the step (``None`` for the compaction machine's).
    route: str | None = None


class IllegalTransition(RekallError):
    """No row of the table takes this trigger from this state."""

    code = "illegal_transition"

    def __init__(self, state: JobState, trigger: str) -> None:
        super().__init__(f"{trigger} is not allowed while the job is {state.value}",
                         hint="no transition exists for this event in this state; nothing was changed")
        self.state, self.trigger = state, trigger


class TransitionRefused(RekallError):
    """Rows exist for this trigger and state, but every guard said no."""

    code = "transition_refused"

    def __init__(self, state: JobState, trigger: str, verdicts: tuple[GuardVerdict, ...]) -> None:
        said_no = ", ".join(f"{v.guard} (to {v.to.value})" for v in verdicts)
        super().__init__(f"{trigger} refused while the job is {state.value}: {said_no} said no",
                         hint="the evidence does not justify a transition; nothing was changed")
        self.state, self.trigger, self.verdicts = state, trigger, verdicts


Commit = Callable[[Step], None]


@attrs.define
class _Attempt:
    """What one ``fire`` passes through the library to the guard and commit callbacks."""

    view: JobView
    evidence: Mapping[str, Any]
    now: Instant
    commit: Commit
    verdicts: list[GuardVerdict] = attrs.Factory(list)
    step: Step | None = None


def _attempt(event: EventData) -> _Attempt:
    attempt: _Attempt = event.kwargs["attempt"]
    return attempt


def _condition(row: Transition) -> Callable[[EventData], bool]:
    guard = row.guard
    assert guard is not None

    def condition(event: EventData) -> bool:
        attempt = _attempt(event)
        passed = bool(guard(attempt.view, attempt.evidence))
        attempt.verdicts.append(GuardVerdict(row.dest, guard.__name__, passed))
        return passed

    condition.__name__ = guard.__name__  # diagrams label edges with the guard's name
    return condition


def _committer(table: Table, row: Transition) -> Callable[[EventData], None]:
    def commit(event: EventData) -> None:
        attempt = _attempt(event)
        view = attempt.view
        route = None
        if table is DELIVERY:
            route = view.route if row.route is None else row.route(view, attempt.evidence)
        step = Step(table.name, row.trigger, view.state_in(table.name), row.dest,
                    attempt.evidence, tuple(attempt.verdicts), row.effect(view, attempt.evidence, attempt.now),
                    attempt.now, route)
        attempt.commit(step)  # raising here halts the transition: the state does not change
        attempt.step = step

    return commit


def machine_config(table: Table = COMPACTION) -> dict[str, Any]:
    """Keyword arguments for a ``transitions`` machine (plain or graph) built from ``table``."""
    transitions = []
    for row in table.rows:
        config: dict[str, Any] = {"trigger": row.trigger, "source": [s.value for s in row.source],
                                  "dest": row.dest.value, "before": [_committer(table, row)]}
        if row.guard is not None:
            config["conditions"] = [_condition(row)]
        transitions.append(config)
    return {"states": [s.value for s in table.states], "transitions": transitions,
            "auto_transitions": False, "send_event": True, "queued": True}


def build_machine(model: Any = None, *, table: Table = COMPACTION, initial: MachineState | None = None) -> Machine:
    """A ``transitions.Machine`` for one of a job's machines, starting at ``initial`` (the table's own
    initial state when not said).

    With a ``model``, the library binds the triggers to it and keeps the state in its
    ``state_value`` attribute; without one, the machine is its own model.
    """
    from transitions import Machine

    start = (table.initial if initial is None else initial).value
    if model is None:
        return Machine(initial=start, **machine_config(table))
    return Machine(model=model, initial=start, model_attribute=STATE_ATTRIBUTE, **machine_config(table))


class _Model:
    """One machine's model: the library reads and sets that machine's state in the job's view."""

    # Bound by the library (model binding): ``trigger(name, **kw)`` fires ``name``.
    trigger: Callable[..., bool]

    def __init__(self, job: JobMachine, table: Table) -> None:
        self._job, self.table = job, table
        build_machine(self, table=table, initial=job.view.state_in(table.name))

    @property
    def state_value(self) -> str:
        """The state as the library names it; read and set by the library only."""
        return str(self._job.view.state_in(self.table.name).value)

    @state_value.setter
    def state_value(self, value: str) -> None:
        self._job._moved(self.table, value)


class JobMachine:
    """One job: its view (the only copy of both machines' states), and a model per machine.

    ``fire`` decides, commits, then moves.
    """

    def __init__(self, view: JobView) -> None:
        self._view = view
        self._attempt: _Attempt | None = None
        self._models = {table.name: _Model(self, table) for table in MACHINES}

    @property
    def view(self) -> JobView:
        return self._view

    @property
    def state(self) -> JobState:
        """The job's state, derived from both machines."""
        return self._view.state

    def _moved(self, table: Table, value: str) -> None:
        # The library sets the state when a model is bound (the initial state, which is the
        # view's own) and after a transition's commit succeeded: then the view advances.
        step = self._attempt.step if self._attempt is not None else None
        if step is None:
            if value != self._view.state_in(table.name).value:
                raise AssertionError(f"the {table.name} machine set {value!r} without a committed step")
            return
        assert step.dest.value == value, (step.dest, value)
        self._view = self._view.moved(step.dest, step.fields, step.now.mono_ms, step.route)

    def fire(self, trigger: str, evidence: Mapping[str, Any], now: Instant, commit: Commit) -> tuple[Step, ...]:
        """Route ``trigger`` to its machine; ``commit(step)`` runs before each state changes. Returns the
        steps taken: one, or two where the compaction machine hands the job over to the delivery machine.

        Raises ``UnknownTrigger``/``InvalidEvidence`` for a malformed call,
        ``IllegalTransition`` when no row exists (or the job has ended), ``TransitionRefused`` when
        every guard says no, or whatever ``commit`` raised. In all of these cases nothing changed.
        """
        evidence = validate_evidence(trigger, evidence)
        if self.state.terminal:
            raise IllegalTransition(self.state, trigger)
        delivering = self._view.compaction is JobState.COMPACTED and trigger not in ENDS
        step = self._fire_on(DELIVERY if delivering else COMPACTION, trigger, evidence, now, commit)
        if step.dest is not JobState.COMPACTED:
            return (step,)
        # The handover: the delivery machine chooses the route from the completion's evidence.
        chosen = {key.name: evidence[key.name] for key in TRIGGERS["route_chosen"].keys if key.name in evidence}
        return step, self._fire_on(DELIVERY, "route_chosen", validate_evidence("route_chosen", chosen), now, commit)

    def _fire_on(self, table: Table, trigger: str, evidence: Mapping[str, Any], now: Instant,
                 commit: Commit) -> Step:
        from transitions import MachineError  # loaded with the machine (``build_machine``)

        state = self.state
        # One pass through the library: it asks the rows' guards in order and commits the first
        # that passes. A queued machine answers True either way, so the attempt tells: no step
        # and no verdict means a row without a guard would have fired, so there is no row.
        self._attempt = attempt = _Attempt(self._view, evidence, now, commit)
        try:
            self._models[table.name].trigger(trigger, attempt=attempt)
        except (MachineError, AttributeError):  # no row takes this trigger from this state (or in this machine)
            raise IllegalTransition(state, trigger) from None
        finally:
            self._attempt = None
        if attempt.step is None:
            if not attempt.verdicts:  # never a silent no-op
                raise IllegalTransition(state, trigger)
            raise TransitionRefused(state, trigger, tuple(attempt.verdicts))
        return attempt.step
