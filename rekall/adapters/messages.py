"""What an incoming IPC message is, for a follower: the records every adapter's
``classify`` returns, and the started turn a ``start_turn`` acknowledgement names.

Shared by all protocol generations (an adapter decides *which* record a message is; the
records themselves do not change), so the session can dispatch on them alike.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class Response:
    request_id: str
    ok: bool
    result: Any
    error: str | None
    handled_by: str | None
    message: dict[str, Any]


@attrs.frozen
class StateChange:
    change: Any


@attrs.frozen
class UnknownVersion:
    method: str
    version: Any
    from_owner: bool


@attrs.frozen
class FollowStatusRequested:
    source: Any


@attrs.frozen
class ForeignState:
    """A state broadcast for our thread from a client that is not our owner (or before the
    owner is known: a generation without owner discovery learns it from who answers)."""

    source: Any
    change: Any = None


@attrs.frozen
class Reply:
    """Send ``message`` back (discovery probes and requests addressed to us)."""

    message: dict[str, Any]
    why: str


@attrs.frozen
class Ignored:
    reason: str


Inbound = Response | StateChange | UnknownVersion | FollowStatusRequested | ForeignState | Reply | Ignored


@attrs.frozen
class StartedTurn:
    turn_id: str
    status: str
