"""Adapter for the extension IPC whose ``thread-stream-state-changed`` is version 11.

Sans-I/O, like h11: functions that build outgoing messages and classify incoming ones.
The session (:mod:`rekall.adapters.session`) does the I/O. Method names and versions live
here and nowhere else.

Method versions (pinned to the extension build the reference was taken from; a
``thread-follower-*`` request with an envelope ``hostId`` uses its base version + 1):

==========================================  ==========  =====================================
method                                      version     kind
==========================================  ==========  =====================================
``initialize``                              0           request, untargeted
``thread-owner-discovery``                  1           request, untargeted
``thread-stream-following-changed``         1           broadcast to ``[owner]``
``thread-stream-following-status-requested`` 1          broadcast in (owner asks followers)
``thread-stream-state-changed``             11          broadcast in, from the owner only
``thread-follower-compact-thread``          2           request, targeted
``thread-follower-start-turn``              3           request, targeted
==========================================  ==========  =====================================
"""

from __future__ import annotations

from typing import Any

from rekall.adapters.errors import Delivery, HandshakeFailed, NoOwner, RequestFailed, VersionMismatch
# The inbound records, re-exported: the session classifies through the adapter alone.
from rekall.adapters.messages import FollowStatusRequested as FollowStatusRequested
from rekall.adapters.messages import ForeignState as ForeignState
from rekall.adapters.messages import Ignored as Ignored
from rekall.adapters.messages import Inbound
from rekall.adapters.messages import Reply as Reply
from rekall.adapters.messages import Response as Response
from rekall.adapters.messages import StartedTurn as StartedTurn
from rekall.adapters.messages import StateChange as StateChange
from rekall.adapters.messages import UnknownVersion as UnknownVersion
from rekall.thread.layout import V11

NAME = "v11"
HOST_ID = "local"
INITIAL_CLIENT_ID = "initializing-client"

INITIALIZE = "initialize"
OWNER_DISCOVERY = "thread-owner-discovery"
FOLLOWING_CHANGED = "thread-stream-following-changed"
FOLLOWING_STATUS_REQUESTED = "thread-stream-following-status-requested"
STATE_CHANGED = "thread-stream-state-changed"
COMPACT = "thread-follower-compact-thread"
START_TURN = "thread-follower-start-turn"

METHOD_VERSIONS: dict[str, int] = {
    INITIALIZE: 0,
    OWNER_DISCOVERY: 1,
    FOLLOWING_CHANGED: 1,
    FOLLOWING_STATUS_REQUESTED: 1,
    STATE_CHANGED: 11,
    COMPACT: 2,
    START_TURN: 3,
}
STATE_VERSION = METHOD_VERSIONS[STATE_CHANGED]
#: The conversation state of v11 uses the thread model's default field names.
LAYOUT = V11

#: Router errors that prove the owner never acted on the request.
NOT_DELIVERED_ERRORS = frozenset({"no-client-found", "request-version-mismatch", "no-handler-for-request"})
#: Router errors after which the request may or may not have been acted on.
UNKNOWN_OUTCOME_ERRORS = frozenset({"client-disconnected", "request-timeout"})
NO_HANDLER = "no-handler-for-request"
STARTED_TURN_STATUSES = frozenset({"inProgress", "completed"})


def delivery_of(error: str) -> Delivery:
    """What a router error proves. Anything unrecognised is treated as ``unknown``."""
    return "not_delivered" if error in NOT_DELIVERED_ERRORS else "unknown"


# --- outgoing ---------------------------------------------------------------------------


def request(method: str, params: dict[str, Any], *, request_id: str, source: str, timeout_ms: int,
            target: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "type": "request",
        "requestId": request_id,
        "sourceClientId": source,
        "version": METHOD_VERSIONS[method],
        "method": method,
        "params": params,
        "timeoutMs": timeout_ms,
    }
    if target is not None:
        message["hostId"] = HOST_ID
        message["targetClientId"] = target
    return message


def initialize_params(client_type: str) -> dict[str, Any]:
    return {"clientType": client_type}


def owner_discovery_params(thread_id: str) -> dict[str, Any]:
    return {"hostId": HOST_ID, "conversationId": thread_id}


def compact_params(thread_id: str) -> dict[str, Any]:
    return {"conversationId": thread_id}


def start_turn_params(thread_id: str, text: str, client_user_message_id: str) -> dict[str, Any]:
    """Exactly one text input; no model, approval, sandbox or cwd: the turn inherits them."""
    return {
        "conversationId": thread_id,
        "turnStart": {
            "request": {
                "threadId": thread_id,
                "clientUserMessageId": client_user_message_id,
                "input": [{"type": "text", "text": text, "text_elements": []}],
            },
            "context": {"inheritThreadSettings": True},
        },
    }


def follow_broadcast(thread_id: str, *, source: str, owner: str) -> dict[str, Any]:
    return {
        "type": "broadcast",
        "method": FOLLOWING_CHANGED,
        "sourceClientId": source,
        "targetClientIds": [owner],
        "version": METHOD_VERSIONS[FOLLOWING_CHANGED],
        "params": {"hostId": HOST_ID, "conversationId": thread_id, "following": True},
    }


def discovery_response(request_id: Any) -> dict[str, Any]:
    """We never offer to handle anything."""
    return {"type": "client-discovery-response", "requestId": request_id, "response": {"canHandle": False}}


def no_handler_response(request_id: Any) -> dict[str, Any]:
    return {"type": "response", "requestId": request_id, "resultType": "error", "error": NO_HANDLER}


# --- incoming ---------------------------------------------------------------------------




def classify(message: Any, *, thread_id: str, owner_id: str | None) -> Inbound:
    """What an incoming message means for a follower of ``thread_id`` owned by ``owner_id``."""
    if not isinstance(message, dict):
        return Ignored("not an object")
    kind = message.get("type")
    if kind == "response":
        request_id = message.get("requestId")
        if not isinstance(request_id, str):
            return Ignored("response without requestId")
        ok = message.get("resultType") == "success"
        error = message.get("error")
        return Response(request_id, ok, message.get("result"),
                        None if ok else (error if isinstance(error, str) and error else "request-failed"),
                        message.get("handledByClientId") if isinstance(message.get("handledByClientId"), str) else None,
                        message)
    if kind == "client-discovery-request":
        return Reply(discovery_response(message.get("requestId")), "client-discovery-request")
    if kind == "request":
        return Reply(no_handler_response(message.get("requestId")), f"request {message.get('method')!r}")
    if kind != "broadcast":
        return Ignored(f"unknown message type {kind!r}")
    method, params = message.get("method"), message.get("params")
    if not isinstance(method, str):
        return Ignored("broadcast without a method name")
    if not isinstance(params, dict) or params.get("conversationId") != thread_id:
        return Ignored("broadcast for another conversation")
    if params.get("hostId") != HOST_ID:
        return Ignored(f"broadcast for host {params.get('hostId')!r}")
    source = message.get("sourceClientId")
    from_owner = owner_id is not None and source == owner_id
    version = message.get("version")
    if method in METHOD_VERSIONS and version != METHOD_VERSIONS[method]:
        return UnknownVersion(method, version, from_owner)
    if method == STATE_CHANGED:
        return StateChange(params.get("change")) if from_owner else ForeignState(source)
    if method == FOLLOWING_STATUS_REQUESTED:
        return FollowStatusRequested(source)
    return Ignored(f"broadcast {method!r}")


def protocol_changed_text(method: str, version: Any) -> str:
    return f"extension protocol changed: {method} v{version} seen, no adapter"


# --- interpreting results ---------------------------------------------------------------


def client_id_from(response: Response) -> str:
    result = response.result
    client_id = result.get("clientId") if isinstance(result, dict) else None
    if not response.ok or not isinstance(client_id, str) or not client_id:
        raise HandshakeFailed(f"initialize failed: {response.error or 'no clientId in the result'}",
                              hint="the router did not accept us; reload the VS Code window and try again")
    return client_id


def owner_from(response: Response, thread_id: str) -> str:
    if not response.ok:
        if response.error == "no-client-found":
            raise NoOwner(f"no client owns thread {thread_id} (no-client-found)",
                          hint="open the thread in a VS Code window with the Codex extension; never guess an owner")
        if response.error == "request-version-mismatch":
            raise VersionMismatch(f"{OWNER_DISCOVERY} v{METHOD_VERSIONS[OWNER_DISCOVERY]} was refused: "
                                  "request-version-mismatch", hint="the extension changed its protocol; "
                                  "update rekall or report the extension version")
        raise HandshakeFailed(f"owner discovery failed: {response.error}", hint="try again later")
    if not isinstance(response.handled_by, str) or not response.handled_by:
        raise NoOwner(f"owner discovery for thread {thread_id} named no owner",
                      hint="open the thread in the Codex extension; never guess an owner")
    return response.handled_by


def _bad_ack(method: str, detail: str) -> RequestFailed:
    return RequestFailed(f"{method}: {detail}; outcome unknown", code="bad_ack", delivery="unknown", method=method,
                         hint="check the thread in VS Code before scheduling again; nothing was retried")


def check_compact_ack(response: Response) -> None:
    result = response.result
    if not (isinstance(result, dict) and result.get("ok") is True):
        raise _bad_ack(COMPACT, f"acknowledgement lacks ok:true (got {_short(result)})")


def started_turn_from(response: Response) -> StartedTurn:
    result = response.result
    inner = result.get("result") if isinstance(result, dict) else None
    turn = inner.get("turn") if isinstance(inner, dict) else None
    turn_id = turn.get("id") if isinstance(turn, dict) else None
    status = turn.get("status") if isinstance(turn, dict) else None
    if not (isinstance(turn_id, str) and turn_id) or status not in STARTED_TURN_STATUSES:
        raise _bad_ack(START_TURN, f"no started turn in the acknowledgement (got {_short(result)})")
    return StartedTurn(turn_id, status)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
