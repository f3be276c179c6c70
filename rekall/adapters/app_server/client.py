"""A client of the shared Codex app-server: the daemon's control socket, over WebSocket.

Several clients share this server (the user's terminal UI: a plain ``codex`` or ``codex --remote``,
Desktop over SSH, remote control). rekall is one of them, and not the user's: a server request
(an approval, a question) is meant for the user's client. :class:`SharedAppServer` surfaces it as
a :class:`~rekall.adapters.app_server.rpc.ServerRequest` on the message stream and has no method to answer it.

The connection is made only after the control socket passed its checks
(:mod:`rekall.transports.control_socket`); the checks and the peer uid travel with the client as
:attr:`SharedAppServer.socket`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio

from rekall import __version__
from rekall.adapters.app_server.releases import UnsupportedCodex, refuse_older
from rekall.adapters.app_server.rpc import DEFAULT_TIMEOUT_S, MAX_MESSAGE_BYTES, AppServerClosed, AppServerError, RpcClient
from rekall.transports.base import TransportError
from rekall.transports.framing import FrameError
from rekall.transports.control_socket import ControlSocket, connect_control_socket, resolve_control_socket
from rekall.transports.unix import PeerUidLookup, peer_uid
from rekall.transports.websocket import WebSocketChannel, open_websocket

#: ``thread/loaded/list`` pages followed at most; the daemon returns one page in practice.
MAX_LOADED_PAGES = 100
_USER_AGENT_VERSION = re.compile(r"^[^/\s]+/(\S+)")
_CLOSE_GRACE_S = 2.0
log = logging.getLogger("rekall.adapters.app_server.shared")


class SharedAppServer(RpcClient):
    """A connection to the shared app-server. Create it with :func:`open_shared_app_server`."""

    def __init__(self, channel: WebSocketChannel, socket: ControlSocket) -> None:
        super().__init__()
        self.channel = channel
        self.socket = socket
        self.diagnosis = "check the shared app-server with `codex app-server daemon version`"

    @property
    def server_version(self) -> str | None:
        """The server's version as its ``initialize`` reply states it (in ``userAgent``), else ``None``."""
        match = _USER_AGENT_VERSION.match(str(self.server_info.get("userAgent", "")))
        return match.group(1) if match else None

    async def _send_message(self, message: dict[str, Any]) -> None:
        try:
            await self.channel.send(message)
        except TransportError as exc:
            raise AppServerClosed(f"cannot write to the shared app-server at {self.socket.target}: {exc.message}",
                                  hint=exc.hint or self.diagnosis) from None

    async def _read_loop(self) -> None:
        reason = "the connection to the shared app-server ended"
        try:
            while True:
                message = await self.channel.receive()
                if message is None:
                    reason = self.channel.close_description
                    await self.channel.stream.aclose()  # the peer said goodbye: it waits for our end to close
                    break
                if isinstance(message, dict) and message.get("method") == "deprecationNotice":
                    _log_deprecation(message.get("params"))
                refusal = self._dispatch(message)
                if refusal is not None:
                    reason = refusal
                    break
        except (TransportError, FrameError) as exc:  # broken, or not JSON, binary, oversized
            reason = exc.message
        finally:
            self._close_with(reason)

    # --- read-only observation ----------------------------------------------------------

    async def loaded_threads(self, *, timeout: float = DEFAULT_TIMEOUT_S) -> list[str]:
        """``thread/loaded/list``, every page: the ids of the threads loaded in this server."""
        ids: list[str] = []
        cursor: str | None = None
        for _ in range(MAX_LOADED_PAGES):
            page = await self.request("thread/loaded/list", {"cursor": cursor} if cursor else {}, timeout=timeout)
            ids += page["data"]
            cursor = page.get("nextCursor")
            if not cursor:
                return ids
        raise AppServerError("thread/loaded/list", None, f"still paging after {MAX_LOADED_PAGES} pages")

    async def read_thread(self, thread_id: str, *, include_turns: bool = False,
                          timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """``thread/read``: the thread (``status``, ``turns`` if asked), without notifying anyone."""
        result = await self.request("thread/read", {"threadId": thread_id, "includeTurns": include_turns},
                                    timeout=timeout)
        return result["thread"]

    async def thread_goal(self, thread_id: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any] | None:
        """``thread/goal/get``: ``{"goal": ThreadGoal | None}``; ``None`` when this server refuses the method
        (a release without goals): the goal is then unknown."""
        try:
            return await self.request("thread/goal/get", {"threadId": thread_id}, timeout=timeout)
        except AppServerError:
            return None

    # --- attaching ------------------------------------------------------------------------

    async def resume_thread(self, thread_id: str, *, exclude_turns: bool = True,
                            timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """``thread/resume``: attach to the thread. Every client is notified (``thread/goal/cleared``)."""
        return await self.request("thread/resume", {"threadId": thread_id, "excludeTurns": exclude_turns},
                                  timeout=timeout)


def _log_deprecation(params: Any) -> None:
    """A call rekall made is deprecated: said in the log (the worker's, next to its journal), so a
    release that deprecates one is noticed before it refuses it."""
    summary = params.get("summary") if isinstance(params, dict) else None
    log.warning("the shared app-server sent a deprecationNotice: %s", str(summary)[:300])


@asynccontextmanager
async def open_shared_app_server(
    env: Mapping[str, str] | None = None,
    *,
    socket: ControlSocket | None = None,
    client_name: str = "rekall",
    peer_uid_lookup: PeerUidLookup = peer_uid,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    experimental_api: bool = False,
    opt_out_notifications: tuple[str, ...] = (),
    timeout_s: float = 10.0,
) -> AsyncIterator[SharedAppServer]:
    """Check the control socket, connect, upgrade to WebSocket and complete the handshake.

    A server older than the releases rekall supports is refused here, before any thread request
    (:class:`~rekall.adapters.app_server.releases.UnsupportedCodex`). On exit the WebSocket is
    closed (code 1000); the server and its threads keep running.
    """
    socket = resolve_control_socket(env) if socket is None else socket
    socket, stream = await connect_control_socket(socket, peer_uid_lookup=peer_uid_lookup,
                                                  connect_timeout_s=timeout_s)
    channel = await open_websocket(stream, where=socket.target, max_message_bytes=max_message_bytes,
                                   timeout_s=timeout_s)
    server = SharedAppServer(channel, socket)
    refused: UnsupportedCodex | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(server._read_loop)
        try:
            await server.initialize(client_name, __version__, experimental_api=experimental_api,
                                    opt_out_notifications=opt_out_notifications)
            try:
                refuse_older(server.server_version)
            except UnsupportedCodex as exc:
                refused = exc  # raised once the connection is closed, outside the task group
            else:
                yield server
        finally:
            server._close_with("rekall closed its connection to the shared app-server")
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_GRACE_S):
                await channel.aclose()
            await channel.stream.aclose()  # idempotent; in case the goodbye did not finish in time
            tg.cancel_scope.cancel()
    if refused is not None:
        raise refused


__all__ = ["SharedAppServer", "open_shared_app_server"]
