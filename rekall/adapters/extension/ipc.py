"""The extension IPC, spoken for any known generation (:mod:`rekall.adapters.extension.generations`).

Sans-I/O, like h11: an :class:`IpcAdapter` builds outgoing messages and classifies incoming
ones; the session (:mod:`rekall.adapters.extension.session`) does the I/O. Everything that differs
between builds is read from the adapter's :class:`~rekall.adapters.extension.generations.Generation`
record; nothing here is written per generation.
"""

from __future__ import annotations

from typing import Any

from rekall import __version__
from rekall.adapters.extension import generations as gen
from rekall.adapters.extension.errors import Delivery, HandshakeFailed, NoOwner, RequestFailed, VersionMismatch
from rekall.adapters.extension import messages as m
from rekall.thread.fields import FieldNames

HOST_ID = "local"
INITIAL_CLIENT_ID = "initializing-client"

#: Router errors that prove the owner never acted on the request.
NOT_DELIVERED_ERRORS = frozenset({"no-client-found", "request-version-mismatch", "no-handler-for-request"})
#: Errors that say the versions may disagree: after one, "safe to schedule again" is never said.
#: ``no-client-found`` says so only when follower requests are routed by discovery (a wrong
#: version finds no handler); a targeted request names its client.
VERSION_ERRORS = frozenset({"no-client-found", "request-version-mismatch"})
NO_HANDLER = "no-handler-for-request"
STARTED_TURN_STATUSES = frozenset({"inProgress", "completed"})


def delivery_of(error: str) -> Delivery:
    """What a router error proves. Anything unrecognised is treated as ``unknown``."""
    return "not_delivered" if error in NOT_DELIVERED_ERRORS else "unknown"


def behind_text(subject: str, method: str, seen: Any) -> str:
    """Which side is behind, when ``subject`` uses ``method`` at base version ``seen``.

    ``subject`` reads like "the installed extension (26.1201.3) expects" or "the extension sent"."""
    bases = {g.name: base for g in gen.GENERATIONS if (base := g.base(method)) is not None}
    known = sorted(set(bases.values()))
    noun = "generation" if len(bases) == 1 else "generations"
    knows = f"rekall {__version__} knows base {'/'.join(map(str, known)) or 'none'} ({noun} {gen.listed(bases)})"
    head = f"{subject} {method} at base version {seen}"
    if isinstance(seen, int) and not isinstance(seen, bool) and known:
        if seen > known[-1]:
            return f"{head}; {knows}: update rekall"
        if seen < known[0]:
            return f"{head}, older than any generation rekall knows ({knows}): update the extension"
    return f"{head}; {knows}; neither side is simply behind: report the extension version"


class IpcAdapter:
    """One generation of the extension IPC: its constants, builders and interpreters."""

    INITIAL_CLIENT_ID = INITIAL_CLIENT_ID
    INITIALIZE = gen.INITIALIZE
    OWNER_DISCOVERY = gen.OWNER_DISCOVERY
    FOLLOWING_CHANGED = gen.FOLLOWING_CHANGED
    FOLLOWING_STATUS_REQUESTED = gen.FOLLOWING_STATUS_REQUESTED
    STATE_CHANGED = gen.STATE_CHANGED
    COMPACT = gen.COMPACT
    START_TURN = gen.START_TURN
    # The inbound records (shared by every generation), so the session classifies through the adapter.
    Response = m.Response
    StateChange = m.StateChange
    UnknownVersion = m.UnknownVersion
    FollowStatusRequested = m.FollowStatusRequested
    ForeignState = m.ForeignState
    Reply = m.Reply
    Ignored = m.Ignored
    StartedTurn = m.StartedTurn

    def __init__(self, generation: gen.Generation) -> None:
        self.generation = generation
        self.NAME: str = generation.name
        self.LAYOUT: FieldNames = generation.layout
        self.STATE_VERSION: int = generation.state_version
        targeted = generation.follower_envelope_host_id
        #: The versions as sent (requests) or expected (broadcasts in), for this generation.
        self.METHOD_VERSIONS: dict[str, int] = {
            method: generation.sent_version(method, envelope_host_id=targeted)
            for method in (gen.INITIALIZE, *generation.base_versions)}
        self._broadcasts = {m: v for m, v in self.METHOD_VERSIONS.items()
                            if m in (gen.STATE_CHANGED, gen.FOLLOWING_CHANGED, gen.FOLLOWING_STATUS_REQUESTED)}

    def __repr__(self) -> str:
        return f"IpcAdapter({self.NAME})"

    @property
    def owner_discovery(self) -> bool:
        return self.generation.owner_discovery

    def delivery_of(self, error: str) -> Delivery:
        return delivery_of(error)

    # --- outgoing ---------------------------------------------------------------------

    def request(self, method: str, params: dict[str, Any], *, request_id: str, source: str, timeout_ms: int,
                target: str | None = None) -> dict[str, Any]:
        """A request; ``target`` (the owner) is ignored for follower requests of a generation
        that routes them by discovery."""
        follower = method.startswith(gen.FOLLOWER_PREFIX)
        if follower and not self.generation.follower_envelope_host_id:
            target = None
        message: dict[str, Any] = {
            "type": "request",
            "requestId": request_id,
            "sourceClientId": source,
            "version": self.generation.sent_version(method, envelope_host_id=target is not None),
            "method": method,
            "params": params,
            "timeoutMs": timeout_ms,
        }
        if target is not None:
            message["hostId"] = HOST_ID
            message["targetClientId"] = target
        return message

    def initialize_params(self, client_type: str) -> dict[str, Any]:
        return {"clientType": client_type}

    def owner_discovery_params(self, thread_id: str) -> dict[str, Any]:
        return {"hostId": HOST_ID, "conversationId": thread_id}

    def compact_params(self, thread_id: str) -> dict[str, Any]:
        return {"conversationId": thread_id}

    def start_turn_params(self, thread_id: str, text: str, client_user_message_id: str) -> dict[str, Any]:
        """Exactly one text input; no model, approval, sandbox or cwd: the turn inherits them."""
        text_input = [{"type": "text", "text": text, "text_elements": []}]
        if self.generation.start_turn_shape == "turnStartParams":
            return {"conversationId": thread_id,
                    "turnStartParams": {"input": text_input, "clientUserMessageId": client_user_message_id}}
        return {
            "conversationId": thread_id,
            "turnStart": {
                "request": {"threadId": thread_id, "clientUserMessageId": client_user_message_id, "input": text_input},
                "context": {"inheritThreadSettings": True},
            },
        }

    def follow_broadcast(self, thread_id: str, *, source: str, owner: str | None) -> dict[str, Any]:
        """Follow the thread; to every client while the owner is not known yet (generations
        without owner discovery learn it from who answers)."""
        message: dict[str, Any] = {
            "type": "broadcast",
            "method": gen.FOLLOWING_CHANGED,
            "sourceClientId": source,
            "version": self.METHOD_VERSIONS[gen.FOLLOWING_CHANGED],
            "params": {"hostId": HOST_ID, "conversationId": thread_id, "following": True},
        }
        if owner is not None:
            message["targetClientIds"] = [owner]
        return message

    def discovery_response(self, request_id: Any) -> dict[str, Any]:
        """We never offer to handle anything."""
        return {"type": "client-discovery-response", "requestId": request_id, "response": {"canHandle": False}}

    def no_handler_response(self, request_id: Any) -> dict[str, Any]:
        return {"type": "response", "requestId": request_id, "resultType": "error", "error": NO_HANDLER}

    # --- incoming ---------------------------------------------------------------------

    def classify(self, message: Any, *, thread_id: str, owner_id: str | None) -> m.Inbound:
        """What an incoming message means for a follower of ``thread_id`` owned by ``owner_id``."""
        if not isinstance(message, dict):
            return m.Ignored("not an object")
        kind = message.get("type")
        if kind == "response":
            request_id = message.get("requestId")
            if not isinstance(request_id, str):
                return m.Ignored("response without requestId")
            ok = message.get("resultType") == "success"
            error = message.get("error")
            handled_by = message.get("handledByClientId")
            return m.Response(request_id, ok, message.get("result"),
                            None if ok else (error if isinstance(error, str) and error else "request-failed"),
                            handled_by if isinstance(handled_by, str) else None, message)
        if kind == "client-discovery-request":
            return m.Reply(self.discovery_response(message.get("requestId")), "client-discovery-request")
        if kind == "request":
            return m.Reply(self.no_handler_response(message.get("requestId")), f"request {message.get('method')!r}")
        if kind != "broadcast":
            return m.Ignored(f"unknown message type {kind!r}")
        method, params = message.get("method"), message.get("params")
        if not isinstance(method, str):
            return m.Ignored("broadcast without a method name")
        if not isinstance(params, dict) or params.get("conversationId") != thread_id:
            return m.Ignored("broadcast for another conversation")
        if params.get("hostId") != HOST_ID:
            return m.Ignored(f"broadcast for host {params.get('hostId')!r}")
        source = message.get("sourceClientId")
        from_owner = owner_id is not None and source == owner_id
        version = message.get("version")
        if method in self._broadcasts and version != self._broadcasts[method]:
            return m.UnknownVersion(method, version, from_owner)
        if method == gen.STATE_CHANGED:
            return m.StateChange(params.get("change")) if from_owner else m.ForeignState(source, params.get("change"))
        if method == gen.FOLLOWING_STATUS_REQUESTED:
            return m.FollowStatusRequested(source)
        return m.Ignored(f"broadcast {method!r}")

    def protocol_changed_text(self, method: str, version: Any) -> str:
        return behind_text("the extension sent", method, version)

    def version_doubt(self, method: str, error: str, *, discovered: tuple[str, float] | None = None) -> str | None:
        """What a refused request says about versions: a mismatch, or possibly one (follower
        requests routed by discovery, or ``no-client-found`` although owner discovery named the
        owner: ``discovered`` is that owner and how many seconds ago); ``None`` when it says
        nothing about them."""
        targeted = self.generation.follower_envelope_host_id
        if error not in VERSION_ERRORS or (error == "no-client-found" and targeted and discovered is None):
            return None
        sent, base = self.METHOD_VERSIONS.get(method), self.generation.base(method)
        how = (f"sent at version {sent} (base {base} + 1 for the envelope hostId)" if targeted and base != sent
               else f"sent at version {sent} (the base version)")
        if error == "request-version-mismatch":
            what = "the extension expects another version"
        elif discovered is not None:
            owner, ago = discovered
            what = (f"owner {owner} answered owner discovery for this thread {ago:.1f} s before, so the likely "
                    "cause is a version of this request that the owner does not handle")
        else:
            what = "either no client owns the thread now or the extension expects another version"
        return f"{method} {how}, generation {self.NAME}: {what}"

    # --- interpreting results ---------------------------------------------------------

    def client_id_from(self, response: m.Response) -> str:
        result = response.result
        client_id = result.get("clientId") if isinstance(result, dict) else None
        if not response.ok or not isinstance(client_id, str) or not client_id:
            raise HandshakeFailed(f"initialize failed: {response.error or 'no clientId in the result'}",
                                  hint="the router did not accept us; reload the VS Code window and try again")
        return client_id

    def owner_from(self, response: m.Response, thread_id: str) -> str:
        if not response.ok:
            if response.error == "no-client-found":
                raise NoOwner(f"no client owns thread {thread_id} (no-client-found)",
                              hint="open the thread in a VS Code window with the Codex extension; never guess an owner")
            if response.error == "request-version-mismatch":
                raise VersionMismatch(
                    f"{gen.OWNER_DISCOVERY} sent at version {self.METHOD_VERSIONS[gen.OWNER_DISCOVERY]} "
                    f"(generation {self.NAME}) was refused: request-version-mismatch",
                    hint="the extension speaks another generation; run `rekall protocol` to compare its table")
            raise HandshakeFailed(f"owner discovery failed: {response.error}", hint="try again later")
        if not isinstance(response.handled_by, str) or not response.handled_by:
            raise NoOwner(f"owner discovery for thread {thread_id} named no owner",
                          hint="open the thread in the Codex extension; never guess an owner")
        return response.handled_by

    def check_compact_ack(self, response: m.Response) -> None:
        result = response.result
        if not (isinstance(result, dict) and result.get(self.generation.compact_ack_field) is True):
            raise _bad_ack(gen.COMPACT, f"acknowledgement lacks {self.generation.compact_ack_field}:true "
                                        f"(got {_short(result)})")

    def started_turn_from(self, response: m.Response) -> m.StartedTurn:
        turn: Any = response.result
        for key in self.generation.turn_path:
            turn = turn.get(key) if isinstance(turn, dict) else None
        turn_id = turn.get("id") if isinstance(turn, dict) else None
        status = turn.get("status") if isinstance(turn, dict) else None
        if not (isinstance(turn_id, str) and turn_id) or status not in STARTED_TURN_STATUSES:
            raise _bad_ack(gen.START_TURN, f"no started turn in the acknowledgement (got {_short(response.result)})")
        return m.StartedTurn(turn_id, status)


def _bad_ack(method: str, detail: str) -> RequestFailed:
    return RequestFailed(f"{method}: {detail}; outcome unknown", code="bad_ack", delivery="unknown", method=method,
                         hint="check the thread in VS Code before scheduling again; nothing was retried")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


#: Every known generation's adapter, in the order of :data:`~rekall.adapters.extension.generations.GENERATIONS`.
ADAPTERS: tuple[IpcAdapter, ...] = tuple(IpcAdapter(g) for g in gen.GENERATIONS)


def adapter_named(name: str) -> IpcAdapter | None:
    return next((a for a in ADAPTERS if a.NAME == name), None)
