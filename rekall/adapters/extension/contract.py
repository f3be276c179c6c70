"""What a protocol adapter provides: the contract the session is written against.

An adapter is sans-I/O. :class:`rekall.adapters.extension.ipc.IpcAdapter` is the one implementation:
it speaks any generation from its record (:mod:`rekall.adapters.extension.generations`). mypy checks
``registry.ADAPTERS`` against this protocol, so an adapter that forgets a name, or gives a
function another signature, fails ``scripts/test``.

The inbound message records (``Response``, ``StateChange`` ...) are shared by all
adapters (:mod:`rekall.adapters.extension.messages`); an adapter re-exports them so the session
can classify through the adapter alone.
"""

from __future__ import annotations

from typing import Any, Protocol

from rekall.adapters.extension import messages as m
from rekall.adapters.extension.errors import Delivery
from rekall.adapters.extension.generations import Generation
from rekall.thread.layout import Layout


class Adapter(Protocol):
    """One protocol generation of the extension IPC, as plain functions and constants."""

    # Identity and the method-version table.
    @property
    def NAME(self) -> str: ...  # noqa: N802 (module constants are upper case)
    @property
    def STATE_VERSION(self) -> int: ...  # noqa: N802
    @property
    def METHOD_VERSIONS(self) -> dict[str, int]: ...  # noqa: N802
    @property
    def INITIAL_CLIENT_ID(self) -> str: ...  # noqa: N802
    @property
    def INITIALIZE(self) -> str: ...  # noqa: N802
    @property
    def OWNER_DISCOVERY(self) -> str: ...  # noqa: N802
    @property
    def STATE_CHANGED(self) -> str: ...  # noqa: N802
    @property
    def COMPACT(self) -> str: ...  # noqa: N802
    @property
    def START_TURN(self) -> str: ...  # noqa: N802
    #: The conversation-state field names this generation's thread model reads.
    @property
    def LAYOUT(self) -> Layout: ...  # noqa: N802
    #: Whether the generation has ``thread-owner-discovery`` (else the owner is who answers a follow).
    @property
    def owner_discovery(self) -> bool: ...
    #: The record everything above is derived from.
    @property
    def generation(self) -> Generation: ...

    # The inbound records, re-exported from rekall.adapters.extension.messages.
    @property
    def Response(self) -> type[m.Response]: ...  # noqa: N802
    @property
    def StateChange(self) -> type[m.StateChange]: ...  # noqa: N802
    @property
    def UnknownVersion(self) -> type[m.UnknownVersion]: ...  # noqa: N802
    @property
    def FollowStatusRequested(self) -> type[m.FollowStatusRequested]: ...  # noqa: N802
    @property
    def ForeignState(self) -> type[m.ForeignState]: ...  # noqa: N802
    @property
    def Reply(self) -> type[m.Reply]: ...  # noqa: N802
    @property
    def Ignored(self) -> type[m.Ignored]: ...  # noqa: N802
    @property
    def StartedTurn(self) -> type[m.StartedTurn]: ...  # noqa: N802

    # Outgoing messages.
    def request(self, method: str, params: dict[str, Any], *, request_id: str, source: str, timeout_ms: int,
                target: str | None = None) -> dict[str, Any]: ...
    def initialize_params(self, client_type: str) -> dict[str, Any]: ...
    def owner_discovery_params(self, thread_id: str) -> dict[str, Any]: ...
    def compact_params(self, thread_id: str) -> dict[str, Any]: ...
    def start_turn_params(self, thread_id: str, text: str, client_user_message_id: str) -> dict[str, Any]: ...
    def follow_broadcast(self, thread_id: str, *, source: str, owner: str | None) -> dict[str, Any]: ...
    def discovery_response(self, request_id: Any) -> dict[str, Any]: ...
    def no_handler_response(self, request_id: Any) -> dict[str, Any]: ...

    # Incoming messages, and what a response means (these raise rekall errors).
    def classify(self, message: Any, *, thread_id: str, owner_id: str | None) -> m.Inbound: ...
    def protocol_changed_text(self, method: str, version: Any) -> str: ...
    def client_id_from(self, response: m.Response) -> str: ...
    def owner_from(self, response: m.Response, thread_id: str) -> str: ...
    def check_compact_ack(self, response: m.Response) -> None: ...
    def started_turn_from(self, response: m.Response) -> m.StartedTurn: ...
    def delivery_of(self, error: str) -> Delivery: ...
