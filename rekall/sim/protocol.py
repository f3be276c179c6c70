"""The extension's side of the wire protocol, as the simulator speaks it.

Deliberately separate tables from :mod:`rekall.adapters.extension.generations`: the simulator plays
the other party, so a wrong constant in rekall's records must show up as a failing test, not
be mirrored here. Each table is the build's own method table (base versions, as its bundle
states them), written from ``extension-generations.md`` §1, with the builds' other
differences (§2, §4) beside it.
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
LOAD_HISTORY = "thread-follower-load-complete-history"
INTERRUPT_TURN = "thread-follower-interrupt-turn"

#: Method tables by build (base versions; a method that is absent has no handler anywhere).
TABLES: dict[str, dict[str, int]] = {
    # Desktop bundles 26.901.x (seen live by other projects) and IDE 26.917.
    "26.9xx": {STATE_CHANGED: 11, FOLLOWING_CHANGED: 1, FOLLOWING_STATUS_REQUESTED: 1, OWNER_DISCOVERY: 1,
               START_TURN: 2, COMPACT: 1, LOAD_HISTORY: 1, INTERRUPT_TURN: 4},
    # Desktop 26.721.31836 and IDE 26.721.41059 bundle readings: no owner discovery.
    "26.721": {STATE_CHANGED: 11, FOLLOWING_CHANGED: 1, FOLLOWING_STATUS_REQUESTED: 1,
               START_TURN: 1, COMPACT: 1, LOAD_HISTORY: 1, INTERRUPT_TURN: 3},
}
#: The key start-turn's params must carry, by build.
START_TURN_KEYS: dict[str, str] = {"26.9xx": "turnStart", "26.721": "turnStartParams"}
DEFAULT_GENERATION = "26.9xx"

ROUTER_ERRORS = ("no-client-found", "request-version-mismatch", "no-handler-for-request",
                 "client-disconnected", "request-timeout")


def accepted_version(table: dict[str, int], method: str, envelope: dict[str, Any]) -> int | None:
    """The version a handler of ``method`` accepts for this envelope; ``None`` if it has no handler.
    A follower request whose envelope carries ``hostId`` is one above its base."""
    if method == INITIALIZE:
        return 0
    base = table.get(method)
    if base is None:
        return None
    return base + 1 if method.startswith("thread-follower-") and "hostId" in envelope else base


def success(request_id: Any, method: Any, result: Any, handled_by: str) -> dict[str, Any]:
    return {"type": "response", "requestId": request_id, "resultType": "success", "method": method,
            "handledByClientId": handled_by, "result": result}


def failure(request_id: Any, error: str) -> dict[str, Any]:
    return {"type": "response", "requestId": request_id, "resultType": "error", "error": error}


def broadcast(method: str, source: str, version: int, params: dict[str, Any]) -> dict[str, Any]:
    return {"type": "broadcast", "method": method, "sourceClientId": source, "version": version, "params": params}
