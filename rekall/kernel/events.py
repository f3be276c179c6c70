"""Domain events: what the protocol adapter tells the worker about a thread.

Data flows one way: bytes → frames (transports) → protocol messages (adapters) → these
events. Nothing here knows a method name, a protocol version or a socket. The worker turns
events into lifecycle triggers; only ``rekall.states`` decides what state a job is in.

Each event is a frozen record. ``revision`` is the conversation-state revision the owner
reported with the change that produced the event (``None`` when the owner sent none).
"""

from __future__ import annotations

import attrs


@attrs.frozen
class ThreadIdle:
    """The thread became idle: runtime ``idle``, no pending requests, no unconfirmed submissions."""

    revision: int | None = None


@attrs.frozen
class ThreadBusy:
    """The thread stopped being idle (a turn runs, a request waits for the user, …)."""

    reason: str
    revision: int | None = None


@attrs.frozen
class CompactionCompleted:
    """A ``contextCompaction`` item with ``completed: true`` appeared (or was first seen)."""

    compaction_id: str
    revision: int | None = None


@attrs.frozen
class Telemetry:
    """Token usage changed. ``tokens`` is ``last.totalTokens``; either may be ``None``."""

    tokens: int | None
    window: int | None
    revision: int | None = None


@attrs.frozen
class UserBoundaryChanged:
    """The latest user-bearing turn changed: new input, steering, or a stop."""

    fingerprint: str
    interrupted: bool
    revision: int | None = None


@attrs.frozen
class UserTurnRunning:
    """The latest user-bearing turn started running (``inProgress``) or stopped running."""

    running: bool
    revision: int | None = None


@attrs.frozen
class GoalChanged:
    """The thread's goal status changed (``ThreadFacts.goal``: ``active``, ``paused``, ``none``, ...)."""

    status: str | None
    revision: int | None = None


@attrs.frozen
class LayoutIncompatible:
    """The conversation state no longer has the layout rekall relies on."""

    detail: str
    revision: int | None = None


@attrs.frozen
class Resynced:
    """The mirror asked for, and received, a fresh snapshot (revision gap or bad patch)."""

    reason: str
    count: int
    revision: int | None = None


@attrs.frozen
class ProtocolChanged:
    """A broadcast arrived in a version no adapter handles. Reported, never silently dropped."""

    method: str
    version: int
    detail: str


@attrs.frozen
class ConnectionLost:
    """The connection to the router closed or failed. ``detail`` says how."""

    detail: str


DomainEvent = (
    ThreadIdle
    | ThreadBusy
    | CompactionCompleted
    | Telemetry
    | UserBoundaryChanged
    | UserTurnRunning
    | GoalChanged
    | LayoutIncompatible
    | Resynced
    | ProtocolChanged
    | ConnectionLost
)
