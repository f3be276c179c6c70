"""What the worker's rules read and say: the job, the memo, the events they decide about and the
steps they return (:mod:`rekall.worker.policy` decides; :mod:`rekall.worker.reactor` executes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from rekall.kernel import events as ev
from rekall.kernel.settings import WorkerSettings
from rekall.adapters.contract import Acted, ThreadSnapshot
from rekall.states import DeliveryState, JobState, JobView
from rekall.states.status import known

Timer = Literal["idle", "system_error", "telemetry"]
Then = Literal["send_compact", "deliver", "completion", "consider"]

# --- inputs -----------------------------------------------------------------------------


@attrs.frozen
class Job:
    """What the rules read of the job: its state, where its delivery is and by which route, and the
    status fields the rules need."""

    state: JobState
    settings: WorkerSettings
    user_fingerprint: Any = None
    resume: bool = False
    tokens_before: Any = None
    delivery: DeliveryState = DeliveryState.PENDING
    route: str | None = None

    @classmethod
    def of(cls, view: JobView, settings: WorkerSettings) -> Job:
        status = view.status
        return cls(view.state, settings, known(status.userFingerprint), bool(known(status.resume)),
                   known(status.contextTokensBefore), view.delivery, view.route)


@attrs.frozen
class Running:
    """A timer the worker armed: its serial number (counted up per arming, so a stale timer is
    told apart), when the fact that started it arrived, and (for the idle timer, whose length
    depends on it) the state it was started in."""

    serial: int
    since: float
    state: JobState | None = None


@attrs.frozen
class Memo:
    connected: bool = False
    #: Compactions that are not this job's (taken at connect, retaken at the request).
    baseline: frozenset[str] = frozenset()
    #: A request's answer or its connection was lost: once the owner is reachable again,
    #: the settle rule may end the job (see ``outcome_settled`` in the table).
    outcome_unknown: bool = False
    serial: int = 0
    idle: Running | None = None
    system_error: Running | None = None
    telemetry_wait_armed: bool = False
    telemetry_wait_over: bool = False
    #: Whether the handoff is injected where no continuation will carry it (the setting and the
    #: platform's way in), and if not, why; ``None``: not said (nothing is added to the evidence).
    inject: bool | None = None
    injection_limit: str | None = None
    #: The user boundary when the handoff was sent: a turn that starts before an injection's answer may hold it.
    sent_at_boundary: Any = None


# --- events (besides the platform's domain events, which arrive wrapped in Observed) -------


@attrs.frozen
class Observed:
    """A domain event from the platform."""

    event: ev.DomainEvent


@attrs.frozen
class Began:
    """Connected and baselined: decide from the first snapshot."""


@attrs.frozen
class TimerFired:
    timer: Timer
    serial: int


@attrs.frozen
class CancelSignalled:
    marker_exists: bool


@attrs.frozen
class DeadlinePassed:
    pass


#: ``deliver`` sends the handoff by the delivery's route (it must win the job's delivery claim first).
Request = Literal["compact", "deliver"]


@attrs.frozen
class RequestDone:
    kind: Request
    acted: Acted
    #: For an injection: the size of the text sent (UTF-8 bytes).
    sent_bytes: int | None = None


@attrs.frozen
class DeliveryTaken:
    """The handoff was about to be sent, but another route holds the job's delivery claim
    (:mod:`rekall.store.delivery`): ``holder`` is its route (``unknown`` where the claim cannot be read),
    ``claim`` its file's name. Nothing was sent."""

    holder: str
    claim: str
    #: For a ``foreign`` holder: what is wrong with the claim file.
    why: str | None = None


@attrs.frozen
class ReconnectDone:
    error: str | None = None


@attrs.frozen
class HandoffChecked:
    """The saved handoff failed the reactor's check (a handoff that passes fires the
    :class:`VerifyHandoff` step's ``passed`` at once: its outcome comes back as :class:`Fired`)."""

    problem: str


@attrs.frozen
class Fired:
    """A :class:`Fire` with ``then`` was applied; ``state`` is where the lifecycle went."""

    then: Then
    state: JobState


Event = Observed | Began | TimerFired | CancelSignalled | DeadlinePassed | RequestDone | DeliveryTaken | \
    ReconnectDone | HandoffChecked | Fired


# --- steps ------------------------------------------------------------------------------


@attrs.frozen
class Fire:
    """Fire a lifecycle trigger with its evidence; with ``then``, report the outcome back."""

    trigger: str
    evidence: Mapping[str, Any]
    then: Then | None = None


@attrs.frozen
class Send:
    """Send a request, once. ``deliver`` carries the handoff verified just before, by the delivery's route."""

    kind: Request


@attrs.frozen
class Arm:
    timer: Timer
    delay: float
    serial: int


@attrs.frozen
class Disarm:
    timer: Timer


@attrs.frozen
class Note:
    kind: str
    detail: Mapping[str, Any]


@attrs.frozen
class Reconnect:
    """Start reconnecting (backoff within the reconnect window; no request is resent)."""


@attrs.frozen
class VerifyHandoff:
    """Check the saved handoff; if it passes, take ``passed`` in the same round (no decision
    between the check and the transition or request it allows); if not, :class:`HandoffChecked` says why."""

    passed: Fire | Send


Step = Fire | Send | Arm | Disarm | Note | Reconnect | VerifyHandoff


@attrs.frozen
class Decision:
    steps: tuple[Step, ...]
    memo: Memo


def fail(code: str, message: str, delivery: str | None = None) -> Fire:
    evidence: dict[str, Any] = {"errorCode": code, "error": message}
    if delivery:
        evidence["delivery"] = delivery
    return Fire("fail", evidence)


def stuck_in_system_error(seen: ThreadSnapshot) -> bool:
    """The runtime says systemError and the user's turn is over: nothing will clear it by itself
    (a failed turn leaves it behind, and the thread still accepts new turns)."""
    return seen.facts.runtime_status == "systemError" and not seen.facts.user_turn_running
