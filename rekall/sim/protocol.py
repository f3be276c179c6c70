"""The extension's side of the wire protocol, as the simulator speaks it.

Deliberately a separate table from :mod:`rekall.adapters.v11`: the simulator plays the
other party, so a wrong constant in the adapter must show up as a failing test, not be
mirrored here.
"""

from __future__ import annotations

from typing import Any

HOST_ID = "local"
INITIALIZE = "initialize"
OWNER_DISCOVERY = "thread-owner-discovery"
FOLLOWING_CHANGED = "thread-stream-following-changed"
FOLLOWING_STATUS_REQUESTED = "thread-stream-following-status-requested"
STATE_CHANGED = "thread-stream-state-changed"
COMPACT = "thread-follower-compact-thread"
START_TURN = "thread-follower-start-turn"

#: Request versions the router accepts (a mismatch is ``request-version-mismatch``).
REQUEST_VERSIONS: dict[str, int] = {INITIALIZE: 0, OWNER_DISCOVERY: 1, COMPACT: 2, START_TURN: 3}
FOLLOWING_VERSION = 1
STATE_VERSION = 11

ROUTER_ERRORS = ("no-client-found", "request-version-mismatch", "no-handler-for-request",
                 "client-disconnected", "request-timeout")


def success(request_id: Any, method: Any, result: Any, handled_by: str) -> dict[str, Any]:
    return {"type": "response", "requestId": request_id, "resultType": "success", "method": method,
            "handledByClientId": handled_by, "result": result}


def failure(request_id: Any, error: str) -> dict[str, Any]:
    return {"type": "response", "requestId": request_id, "resultType": "error", "error": error}


def broadcast(method: str, source: str, version: int, params: dict[str, Any]) -> dict[str, Any]:
    return {"type": "broadcast", "method": method, "sourceClientId": source, "version": version, "params": params}
