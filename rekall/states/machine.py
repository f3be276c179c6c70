"""The table, run by the ``transitions`` library, with a commit hook before each move.

``JobMachine`` is the model of a ``transitions.Machine`` built from ``TRANSITIONS``: the
library binds the triggers (``may_<trigger>``, ``trigger``) to it and reads and writes the
job's state through one attribute backed by the job's view, so the state exists once.

``JobMachine.fire`` fires through the library, once. The library tries the rows for the
current state in order, asking each row's guard; the first that passes runs its ``before``
callback, which computes the row's effect and calls the caller's ``commit`` (the store
appends the journal record there and fsyncs it). Only when ``commit`` returns does the
library set the state, which advances the view, so a failed commit leaves the job where it
was (write-ahead: the library halts a transition when a ``before`` callback raises).

The machine is synchronous and queued (run-to-completion); no callback fires a trigger.
States are passed to the library as their string values so that diagrams show the names
written to disk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from rekall.kernel.errors import RekallError
from rekall.states.evidence import validate_evidence
from rekall.states.model import Instant, JobState, JobView
from rekall.states.table import TRANSITIONS, Transition

if TYPE_CHECKING:  # the library is imported where a machine is built: `rekall status` never needs it
    from transitions import EventData, Machine

#: The model attribute through which the library reads and sets a job's state (its string value).
STATE_ATTRIBUTE = "state_value"


@attrs.frozen
class GuardVerdict:
    """One guard's answer while an event was routed: which row (by destination) and yes/no."""

    to: JobState
    guard: str
    passed: bool


@attrs.frozen
class Step:
    """A decided transition, handed to ``commit`` before it takes effect."""

    trigger: str
    source: JobState
    dest: JobState
    evidence: Mapping[str, Any]
    verdicts: tuple[GuardVerdict, ...]
    #: The status fields the transition sets (the row's effect).
    fields: Mapping[str, Any]
    now: Instant


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
    return event.kwargs["attempt"]


def _condition(row: Transition) -> Callable[[EventData], bool]:
    assert row.guard is not None

    def condition(event: EventData) -> bool:
        attempt = _attempt(event)
        passed = bool(row.guard(attempt.view, attempt.evidence))
        attempt.verdicts.append(GuardVerdict(row.dest, row.guard.__name__, passed))
        return passed

    condition.__name__ = row.guard.__name__  # diagrams label edges with the guard's name
    return condition


def _committer(row: Transition) -> Callable[[EventData], None]:
    def commit(event: EventData) -> None:
        attempt = _attempt(event)
        view = attempt.view
        step = Step(row.trigger, view.state, row.dest, attempt.evidence, tuple(attempt.verdicts),
                    row.effect(view, attempt.evidence, attempt.now), attempt.now)
        attempt.commit(step)  # raising here halts the transition: the state does not change
        attempt.step = step

    return commit


def machine_config() -> dict[str, Any]:
    """Keyword arguments for a ``transitions`` machine (plain or graph) built from the table."""
    transitions = []
    for row in TRANSITIONS:
        config: dict[str, Any] = {"trigger": row.trigger, "source": [s.value for s in row.source],
                                  "dest": row.dest.value, "before": [_committer(row)]}
        if row.guard is not None:
            config["conditions"] = [_condition(row)]
        transitions.append(config)
    return {"states": [s.value for s in JobState], "transitions": transitions,
            "auto_transitions": False, "send_event": True, "queued": True}


def build_machine(model: Any = None, *, initial: JobState = JobState.SCHEDULED) -> Machine:
    """A ``transitions.Machine`` for one job, starting at ``initial``.

    With a ``model``, the library binds the triggers to it and keeps the state in its
    ``state_value`` attribute; without one, the machine is its own model.
    """
    from transitions import Machine

    if model is None:
        return Machine(initial=initial.value, **machine_config())
    return Machine(model=model, initial=initial.value, model_attribute=STATE_ATTRIBUTE, **machine_config())


class JobMachine:
    """One job: its view (the only copy of its state), bound as the model of a machine.

    ``fire`` decides, commits, then moves.
    """

    # Bound by the library (model binding): ``may_trigger(name, **kw)`` answers whether ``name``
    # would fire now, guards included; ``trigger(name, **kw)`` fires it.
    may_trigger: Callable[..., bool]
    trigger: Callable[..., bool]

    def __init__(self, view: JobView) -> None:
        self._view = view
        self._attempt: _Attempt | None = None
        build_machine(self, initial=view.state)

    @property
    def view(self) -> JobView:
        return self._view

    @property
    def state(self) -> JobState:
        return self._view.state

    @property
    def state_value(self) -> str:
        """The state as the library names it; read and set by the library only."""
        return self._view.state.value

    @state_value.setter
    def state_value(self, value: str) -> None:
        # The library sets the state when a model is bound (the initial state, which is the
        # view's own) and after a transition's commit succeeded: then the view advances.
        step = self._attempt.step if self._attempt is not None else None
        if step is None:
            if value != self._view.state.value:
                raise AssertionError(f"the machine set {value!r} without a committed step")
            return
        assert step.dest.value == value, (step.dest, value)
        self._view = self._view.advanced(step.dest, step.fields, step.now.mono_ms)

    def fire(self, trigger: str, evidence: Mapping[str, Any], now: Instant, commit: Commit) -> Step:
        """Route ``trigger`` through the table; ``commit(step)`` runs before the state changes.

        Raises ``UnknownTrigger``/``InvalidEvidence`` for a malformed call,
        ``IllegalTransition`` when no row exists, ``TransitionRefused`` when every guard says
        no, or whatever ``commit`` raised. In all of these cases nothing changed.
        """
        from transitions import MachineError  # loaded with the machine (``build_machine``)

        evidence = validate_evidence(trigger, evidence)
        state = self.state
        # One pass through the library: it asks the rows' guards in order and commits the first
        # that passes. A queued machine answers True either way, so the attempt tells: no step
        # and no verdict means a row without a guard would have fired, so there is no row.
        self._attempt = attempt = _Attempt(self._view, evidence, now, commit)
        try:
            self.trigger(trigger, attempt=attempt)
        except MachineError:  # no row takes this trigger from this state
            raise IllegalTransition(state, trigger) from None
        finally:
            self._attempt = None
        if attempt.step is None:
            if not attempt.verdicts:  # never a silent no-op
                raise IllegalTransition(state, trigger)
            raise TransitionRefused(state, trigger, tuple(attempt.verdicts))
        return attempt.step
