"""What an incoming IPC message is, for a follower: the records every adapter's
``classify`` returns, and the started turn a ``start_turn`` acknowledgement names.

Shared by all protocol generations (an adapter decides *which* record a message is; the
records themselves do not change), so the session can dispatch on them alike.
``NamedTuple`` records: the worker's first follow reads them (see :mod:`rekall.thread.fields`).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Response(NamedTuple):
    request_id: str
    ok: bool
    result: Any
    error: str | None
    handled_by: str | None
    message: dict[str, Any]


class StateChange(NamedTuple):
    change: Any


class UnknownVersion(NamedTuple):
    method: str
    version: Any
    from_owner: bool


class FollowStatusRequested(NamedTuple):
    source: Any


class ForeignState(NamedTuple):
    """A state broadcast for our thread from a client that is not our owner (or before the
    owner is known: a generation without owner discovery learns it from who answers)."""

    source: Any
    change: Any = None


class Reply(NamedTuple):
    """Send ``message`` back (discovery probes and requests addressed to us)."""

    message: dict[str, Any]
    why: str


class Ignored(NamedTuple):
    reason: str


Inbound = Response | StateChange | UnknownVersion | FollowStatusRequested | ForeignState | Reply | Ignored


class StartedTurn(NamedTuple):
    turn_id: str
    status: str
