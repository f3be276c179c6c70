"""JSON messages as WebSocket text frames over a :class:`ByteStream`: the shared app-server's wire.

The Codex app-server's control socket (``codex app-server --listen unix://``, the daemon) speaks
the WebSocket upgrade handshake and then one JSON-RPC message per text frame. The WebSocket
protocol itself is the ``websockets`` library's sans-I/O :class:`~websockets.client.ClientProtocol`;
this module only moves its bytes over a rekall :class:`ByteStream`, so that the endpoint and
peer-uid checks of :class:`rekall.transports.unix.UnixTransport` stay in force.

Bounds and refusals (each a :class:`FrameError`; the connection cannot continue after one):

- an incoming message larger than ``max_message_bytes`` (fragments counted together) is
  refused by the protocol, which closes with 1009 "message too big";
- a binary frame, invalid UTF-8 or text that is not JSON is refused by name;
- a handshake that is not a WebSocket upgrade says that the socket does not serve the protocol.

``websockets`` is imported when a connection is opened, never when this module is imported:
commands that never touch the shared app-server do not pay for it.
"""

from __future__ import annotations

import json
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio

from rekall.kernel.safejson import decode_reason
from rekall.transports.base import ByteStream, TransportError
from rekall.transports.framing import FrameError

if TYPE_CHECKING:
    from websockets.client import ClientProtocol

#: The path in the upgrade request; the app-server does not look at it.
DEFAULT_URI = "ws://localhost/"
_CHUNK_BYTES = 256 * 1024
_NOT_AN_APP_SERVER = ("this socket does not serve the Codex app-server protocol; check REKALL_APP_SERVER_SOCKET "
                      "or restart the app-server")


class WebSocketChannel:
    """Send and receive whole JSON messages. ``receive`` returns ``None`` once the peer closed."""

    def __init__(self, stream: ByteStream, protocol: ClientProtocol, *, max_message_bytes: int,
                 where: str) -> None:
        from websockets.frames import Opcode

        self.stream = stream
        self.protocol = protocol
        self.max_message_bytes = max_message_bytes
        self.where = where
        self._opcode = Opcode
        self._ready: deque[bytes] = deque()
        self._fragments: list[bytes] = []
        self._error: FrameError | None = None
        self._eof = False
        self._send_lock = anyio.Lock()

    @property
    def peer_check(self) -> str:
        return self.stream.peer_check

    @property
    def close_description(self) -> str:
        """How the connection ended, as far as the WebSocket layer knows."""
        close = self.protocol.close_rcvd
        if close is None:
            return "the app-server closed the connection without a WebSocket close frame"
        return f"the app-server closed the WebSocket (code {close.code}{': ' + close.reason if close.reason else ''})"

    # -- sending -----------------------------------------------------------------------------

    async def send(self, message: Any) -> None:
        from websockets.exceptions import InvalidState

        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if len(data) > self.max_message_bytes:
            raise FrameError(f"refusing to send a message of {len(data)} bytes to {self.where} "
                             f"(limit {self.max_message_bytes})", hint="send less in one request")
        try:
            self.protocol.send_text(data)
        except InvalidState:
            raise TransportError(f"the WebSocket to {self.where} is closed", hint="reconnect") from None
        await self._flush()

    async def _flush(self) -> None:
        # Collect under the lock: bytes queued by two tasks then leave in the order queued.
        async with self._send_lock:
            for chunk in self.protocol.data_to_send():
                if chunk:  # b"" asks to half-close; the stream is closed by aclose instead
                    await self.stream.send(chunk)

    # -- receiving ---------------------------------------------------------------------------

    async def _pump(self) -> bool:
        """Read one chunk into the protocol and collect its events; ``False`` at end of stream."""
        data = await self.stream.receive(_CHUNK_BYTES)
        if data:
            self.protocol.receive_data(data)
        else:
            self._eof = True
            self.protocol.receive_eof()
        # Pongs, the close reply, a 1009 close after an oversized message. If the peer is gone,
        # what it sent before is still delivered.
        await self._flush_quietly()
        self._take_events()
        return bool(data)

    def _take_events(self) -> None:
        from websockets.exceptions import PayloadTooBig
        from websockets.frames import Frame

        for event in self.protocol.events_received():
            if not isinstance(event, Frame):
                continue  # the handshake response; open_websocket checks the protocol's state
            if event.opcode in (self._opcode.TEXT, self._opcode.CONT):
                self._fragments.append(bytes(event.data))
                if event.fin:
                    self._ready.append(b"".join(self._fragments))
                    self._fragments = []
            elif event.opcode == self._opcode.BINARY:
                self._fail(FrameError(f"{self.where} sent a binary WebSocket frame ({len(event.data)} bytes); "
                                      "the app-server protocol uses text frames only",
                                      hint="check that this socket belongs to a Codex app-server"),
                           1003, "binary frames are not accepted")
        exc = self.protocol.parser_exc
        if exc is not None and self._error is None:
            if isinstance(exc, PayloadTooBig):
                self._error = FrameError(
                    f"{self.where} sent a message larger than {self.max_message_bytes} bytes; refused",
                    hint="the connection was closed (1009); reconnect, and report the request that caused it")
            else:
                self._error = FrameError(f"{self.where} sent invalid WebSocket data: {exc}",
                                         hint="check that this socket belongs to a Codex app-server")

    def _fail(self, error: FrameError, close_code: int, close_reason: str) -> None:
        if self._error is None:
            self._error = error
            try:
                self.protocol.fail(close_code, close_reason)
            except Exception:  # noqa: BLE001 - already closing: nothing more to tell the peer
                pass

    async def receive(self) -> Any | None:
        """The next JSON message; ``None`` once the peer closed cleanly; :class:`FrameError` for bad data."""
        while not self._ready:
            if self._error is not None:
                await self._flush_quietly()
                raise self._error
            if self._eof or self.protocol.close_rcvd is not None:
                return None
            await self._pump()
        return self._decode(self._ready.popleft())

    async def _flush_quietly(self) -> None:
        try:
            await self._flush()
        except TransportError:
            pass

    def _decode(self, data: bytes) -> Any:
        try:
            text = data.decode("utf-8")
            return json.loads(text)
        except UnicodeDecodeError as exc:
            error = FrameError(f"{self.where} sent a text frame that is not UTF-8 (byte {exc.start})",
                               hint="check that this socket belongs to a Codex app-server")
        except json.JSONDecodeError as exc:
            error = FrameError(f"{self.where} sent a text frame that is not JSON ({decode_reason(exc)} at offset "
                               f"{exc.pos}): {data[:60]!r}", hint="check that this socket belongs to a Codex app-server")
        except RecursionError:
            error = FrameError(f"{self.where} sent a text frame that nests too deeply to decode",
                               hint="check that this socket belongs to a Codex app-server")
        self._fail(error, 1007, "a text frame is not JSON")
        raise error

    async def aclose(self) -> None:
        """Say goodbye (close code 1000) if still open, then close the stream. Never raises."""
        from websockets.protocol import State

        if self.protocol.state is State.OPEN:
            self.protocol.send_close(1000)
        await self._flush_quietly()  # our close frame, or the one a refusal queued (1003, 1007, 1009)
        await self.stream.aclose()


async def open_websocket(stream: ByteStream, *, where: str, max_message_bytes: int, uri: str = DEFAULT_URI,
                         timeout_s: float = 10.0) -> WebSocketChannel:
    """Run the upgrade handshake on ``stream``; the stream is closed if it fails.

    ``where`` names the peer in errors (e.g. the socket path); ``max_message_bytes`` bounds each
    incoming message, fragments counted together.
    """
    from websockets.client import ClientProtocol
    from websockets.protocol import State
    from websockets.uri import parse_uri

    # No extension offered, permessage-deflate above all: Codex 0.155 and older drop a handshake
    # that offers it (tests/transports/test_websocket.py holds the client to that).
    protocol = ClientProtocol(parse_uri(uri), extensions=None, max_size=max_message_bytes)
    channel = WebSocketChannel(stream, protocol, max_message_bytes=max_message_bytes, where=where)
    try:
        protocol.send_request(protocol.connect())
        await channel._flush()
        with anyio.fail_after(timeout_s):
            while protocol.state is State.CONNECTING and protocol.handshake_exc is None:
                if not await channel._pump():
                    break
    except TransportError as exc:
        await stream.aclose()
        raise TransportError(f"the connection to {where} broke during the WebSocket handshake: {exc.message}",
                             hint=_NOT_AN_APP_SERVER) from exc
    except TimeoutError:
        await stream.aclose()
        raise TransportError(f"no WebSocket handshake reply from {where} within {timeout_s:g} s",
                             hint="the server may be hung; check it with `codex app-server daemon version`") from None
    except BaseException:
        await stream.aclose()
        raise
    # The upgrade succeeded if the protocol left CONNECTING without a handshake error; it may be
    # CLOSING already when the reply and a close frame came in one read.
    if protocol.state is State.CONNECTING or protocol.handshake_exc is not None:
        await stream.aclose()
        reason = protocol.handshake_exc or "the connection closed during the handshake"
        raise FrameError(f"WebSocket handshake with {where} failed: {reason}", hint=_NOT_AN_APP_SERVER)
    return channel


__all__ = ["DEFAULT_URI", "WebSocketChannel", "open_websocket"]
