"""The JSON-RPC core shared by rekall's app-server clients (stdio and the shared control socket).

The wire is JSON-RPC 2.0 without the ``jsonrpc`` member. Three kinds of message arrive:
responses to our requests (matched by ``id``), notifications (``{method, params}``) and server
requests (``{id, method, params}``, e.g. approvals). The last two are delivered, in arrival
order, on one stream that the caller reads with :meth:`RpcClient.next_message` or
:meth:`RpcClient.wait_for`. Nothing here answers a server request: whether rekall may answer
one at all is the concrete client's decision.

A concrete client supplies :meth:`RpcClient._send_message` (how one message goes out), feeds
every message it reads to :meth:`RpcClient._dispatch`, and calls :meth:`RpcClient._close_with`
when its input ends. The caller may close the client while its reader still runs: a message read
after :meth:`RpcClient._close_with` is dropped, and its reader is told to stop. Unknown fields
(``emittedAtMs``) and unknown methods pass through.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import attrs

from rekall.kernel.errors import CodexError

DEFAULT_TIMEOUT_S = 30.0
#: The largest message accepted from an app-server, whatever the wire (a stdio line, a WebSocket
#: message): a ``thread/resume`` can carry a whole thread; refuse anything absurd rather than hang.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class AppServerError(CodexError):
    """The app-server answered a request with a JSON-RPC error."""

    code = "app_server_error"

    def __init__(self, method: str, rpc_code: int | None, rpc_message: str, data: Any = None) -> None:
        super().__init__(f"codex app-server rejected {method}: {rpc_message} (code {rpc_code})",
                         hint="check the request parameters and the app-server's log")
        self.method = method
        self.rpc_code = rpc_code
        self.rpc_message = rpc_message
        self.data = data


class AppServerClosed(CodexError):
    """The connection to the app-server ended, or what it sent could not be read."""

    code = "app_server_closed"


class AppServerTimeout(CodexError):
    """No reply in time. The request may still take effect: its outcome is unknown."""

    code = "app_server_timeout"


@attrs.frozen
class Notification:
    method: str
    params: dict[str, Any]


@attrs.frozen
class ServerRequest:
    """A request from the server (an approval, a question), addressed to a client."""

    id: int | str
    method: str
    params: dict[str, Any]


Message = Notification | ServerRequest


@attrs.define
class _Pending:
    method: str
    done: anyio.Event = attrs.field(factory=anyio.Event)
    result: Any = None
    error: CodexError | None = None


class RpcClient:
    """Requests with ids, replies matched to them, and one ordered stream of everything else."""

    #: Where to look when the server misbehaves; each client says where its server logs.
    diagnosis: str = "see the app-server's log"

    def __init__(self) -> None:
        self._ids = iter(range(1, 2**62))
        self._pending: dict[int | str, _Pending] = {}
        self._send, self._receive = anyio.create_memory_object_stream[Message](math.inf)
        self._closed_reason: str | None = None
        #: The ``initialize`` result: ``userAgent``, ``codexHome``, ``platformFamily``, ``platformOs``.
        self.server_info: dict[str, Any] = {}

    # --- transport hooks ----------------------------------------------------------------

    async def _send_message(self, message: dict[str, Any]) -> None:
        """Write one message; raise :class:`AppServerClosed` if the connection is gone."""
        raise NotImplementedError  # pragma: no cover

    async def _write(self, message: dict[str, Any]) -> None:
        if self._closed_reason is not None:
            raise AppServerClosed(self._closed_reason, hint=self.diagnosis)
        await self._send_message(message)

    # --- outgoing -----------------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any] | None = None, *,
                      timeout: float = DEFAULT_TIMEOUT_S) -> Any:
        """Send a request and return its ``result``; raise :class:`AppServerError` on an error reply."""
        request_id = next(self._ids)
        pending = self._pending[request_id] = _Pending(method)
        try:
            await self._write({"id": request_id, "method": method, "params": params or {}})
            with anyio.fail_after(timeout):
                await pending.done.wait()
        except TimeoutError:
            raise AppServerTimeout(f"codex app-server did not answer {method} within {timeout} s",
                                   hint="the outcome is unknown; inspect the thread before acting again") from None
        finally:
            self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        await self._write(message)

    async def initialize(self, client_name: str, version: str, *, experimental_api: bool = False,
                         opt_out_notifications: tuple[str, ...] = ()) -> dict[str, Any]:
        """The handshake: ``initialize``, then the ``initialized`` notification."""
        capabilities: dict[str, Any] = {"experimentalApi": experimental_api}
        if opt_out_notifications:
            capabilities["optOutNotificationMethods"] = list(opt_out_notifications)
        self.server_info = await self.request("initialize", {
            "clientInfo": {"name": client_name, "title": "rekall", "version": version},
            "capabilities": capabilities})
        await self.notify("initialized")
        return self.server_info

    # --- the methods rekall uses --------------------------------------------------------

    async def start_thread(self, **params: Any) -> dict[str, Any]:
        """``thread/start``; returns the result (``thread``, ``model``, …)."""
        return await self.request("thread/start", params)

    async def start_turn(self, thread_id: str, text: str, **params: Any) -> dict[str, Any]:
        """``turn/start`` with one text input; returns the ``turn`` (normally ``inProgress``)."""
        result = await self.request("turn/start", {
            "threadId": thread_id, "input": [{"type": "text", "text": text}], **params})
        return result["turn"]

    async def start_compaction(self, thread_id: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """``thread/compact/start``. Its ``{}`` result is acceptance, not completion."""
        await self.request("thread/compact/start", {"threadId": thread_id}, timeout=timeout)

    # --- incoming -----------------------------------------------------------------------

    async def next_message(self, *, timeout: float = DEFAULT_TIMEOUT_S) -> Message:
        """The next notification or server request; :class:`AppServerClosed` once the server is gone."""
        with anyio.fail_after(timeout):
            try:
                return await self._receive.receive()
            except anyio.EndOfStream:
                raise AppServerClosed(self._closed_reason or "codex app-server closed",
                                      hint=self.diagnosis) from None

    async def wait_for(self, predicate: Callable[[Message], bool], *,
                       timeout: float = DEFAULT_TIMEOUT_S, seen: list[Message] | None = None) -> Message:
        """Read messages until one matches; every message read is appended to ``seen`` if given."""
        with anyio.fail_after(timeout):
            while True:
                message = await self.next_message(timeout=math.inf)
                if seen is not None:
                    seen.append(message)
                if predicate(message):
                    return message

    @property
    def closed_reason(self) -> str | None:
        """Why the connection ended; ``None`` while it is open."""
        return self._closed_reason

    async def messages(self) -> AsyncIterator[Message]:
        """Every notification and server request until the server closes."""
        async for message in self._receive:
            yield message

    def _dispatch(self, message: Any) -> str | None:
        """Route one decoded message. Returns why the connection cannot go on, or ``None``."""
        if self._closed_reason is not None:
            # Closed while the reader held this message (the caller left, e.g. just as the server
            # notified): the stream is closed and nobody waits for it, so the reader stops here.
            return self._closed_reason
        if not isinstance(message, dict):
            return f"codex app-server sent a message that is not an object: {str(message)[:80]!r}"
        method = message.get("method")
        if method is None:  # a response
            request_id = message.get("id")
            # Late or unknown ids are dropped: their request already timed out or never existed.
            pending = self._pending.get(request_id) if isinstance(request_id, int | str) else None
            if pending is None:
                return None
            if "error" in message:
                err = message["error"] or {}
                pending.error = AppServerError(pending.method, err.get("code"), str(err.get("message")),
                                               err.get("data"))
            else:
                pending.result = message.get("result")
            pending.done.set()
        elif "id" in message:
            self._send.send_nowait(ServerRequest(message["id"], method, message.get("params") or {}))
        else:
            self._send.send_nowait(Notification(method, message.get("params") or {}))
        return None

    def _close_with(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        for pending in self._pending.values():
            if pending.done.is_set():  # answered, its caller not yet woken: the answer stands
                continue
            pending.error = AppServerClosed(f"{self._closed_reason} before answering {pending.method}",
                                            hint=f"the outcome is unknown; {self.diagnosis}")
            pending.done.set()
        self._send.close()


__all__ = ["DEFAULT_TIMEOUT_S", "MAX_MESSAGE_BYTES", "AppServerClosed", "AppServerError", "AppServerTimeout", "Message",
           "Notification", "RpcClient", "ServerRequest"]
