"""The extension's side of the wire protocol, as the simulator speaks it.

Deliberately separate tables from :mod:`rekall.adapters.extension.generations`: the simulator plays
the other party, so a wrong constant in rekall's records must show up as a failing test, not
be mirrored here. Each table is the build's own method table (base versions, as its bundle
states them), written from ``extension-generations.md`` §1, with the builds' other
differences (§2, §4) beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

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

class Build(NamedTuple):
    """One build as the simulator plays it, declared: its method table (base versions; a method
    that is absent has no handler anywhere), the key start-turn's params must carry, and the
    conversation-state fields it names differently from v11 (v11 name → the build's name; the
    backend writes v11 names and the owner publishes the build's)."""

    table: Mapping[str, int]
    start_turn_key: str
    renames: Mapping[str, str] = {}


#: Desktop bundles 26.901.x (seen live by other projects) and IDE 26.917.
B26_9XX = Build({STATE_CHANGED: 11, FOLLOWING_CHANGED: 1, FOLLOWING_STATUS_REQUESTED: 1, OWNER_DISCOVERY: 1,
                 START_TURN: 2, COMPACT: 1, LOAD_HISTORY: 1, INTERRUPT_TURN: 4}, "turnStart")

#: The builds played, each derived from its nearest neighbour by naming only what differs.
BUILDS: dict[str, Build] = {
    "26.9xx": B26_9XX,
    # Desktop 26.721.31836 and IDE 26.721.41059 bundle readings: no owner discovery.
    "26.721": B26_9XX._replace(
        table={**{m: v for m, v in B26_9XX.table.items() if m != OWNER_DISCOVERY}, START_TURN: 1, INTERRUPT_TURN: 3},
        start_turn_key="turnStartParams"),
}
#: The method table of each build, and the key start-turn's params must carry (views of BUILDS).
TABLES: dict[str, Mapping[str, int]] = {name: build.table for name, build in BUILDS.items()}
START_TURN_KEYS: dict[str, str] = {name: build.start_turn_key for name, build in BUILDS.items()}
DEFAULT_GENERATION = "26.9xx"

ROUTER_ERRORS = ("no-client-found", "request-version-mismatch", "no-handler-for-request",
                 "client-disconnected", "request-timeout")


def accepted_version(table: Mapping[str, int], method: str, envelope: dict[str, Any]) -> int | None:
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


def renamed_state(state: Any, renames: Mapping[str, str]) -> Any:
    """A conversation state (written with v11 names) as a build that ``renames`` fields publishes it."""
    if not renames or not isinstance(state, dict):
        return state
    return {renames.get(key, key): value for key, value in state.items()}


def renamed_patches(patches: list[dict[str, Any]], renames: Mapping[str, str]) -> list[dict[str, Any]]:
    """Patches (v11 paths) as a build that ``renames`` fields publishes them: the first path
    element renamed, and a root replace's state."""
    if not renames:
        return patches
    out = []
    for patch in patches:
        path = patch.get("path")
        if isinstance(path, list) and path:
            patch = {**patch, "path": [renames.get(path[0], path[0]), *path[1:]]}
        elif path == [] and "value" in patch:
            patch = {**patch, "value": renamed_state(patch["value"], renames)}
        out.append(patch)
    return out
