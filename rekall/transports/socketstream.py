"""A connected stream socket for the event loop, client or server side.

The stream is an ``asyncio.BufferedProtocol``: the event loop receives straight into the
buffer the caller passes to :meth:`SocketStream.receive_into` (reading is paused while no
one asks), so frames are reassembled without copying (see ``FrameDecoder``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from rekall.transports.base import ByteStream, TransportError


class SocketStream(asyncio.BufferedProtocol, ByteStream):
    """A connected stream socket as a :class:`ByteStream` (client or server side)."""

    def __init__(self) -> None:
        self.peer_check = "not checked"
        self._transport: asyncio.Transport | None = None
        self._target: memoryview | None = None
        self._waiter: asyncio.Future[int] | None = None
        self._eof = False
        self._lost: Exception | None = None
        self._closed = False
        self._writable: asyncio.Future[None] | None = None

    # -- protocol callbacks (called by the event loop) --------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._transport.pause_reading()  # read only when someone asks, into their buffer

    def get_buffer(self, sizehint: int) -> memoryview:
        assert self._target is not None and len(self._target), "reading while nobody asked"
        return self._target

    def buffer_updated(self, nbytes: int) -> None:
        assert self._transport is not None
        self._transport.pause_reading()
        self._target = None
        self._resolve(nbytes)

    def eof_received(self) -> bool:
        self._eof = True
        self._resolve(0)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc
        self._eof = True
        self._resolve(0, exc)
        if self._writable is not None and not self._writable.done():
            self._writable.set_exception(TransportError("IPC connection lost while sending", hint="reconnect"))

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def _resolve(self, count: int, exc: Exception | None = None) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            if exc is not None:
                waiter.set_exception(TransportError(f"IPC connection lost while receiving: {exc}", hint="reconnect"))
            else:
                waiter.set_result(count)

    # -- ByteStream ------------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        self._open_transport().write(data)
        if self._writable is not None:
            await asyncio.shield(self._writable)

    def send_now(self, data: bytes) -> bool:
        transport = self._open_transport()
        if self._writable is not None:  # the peer is behind: ``send`` writes and waits
            return False
        transport.write(data)  # into the socket now, or the transport's buffer if the socket is full
        return True

    def _open_transport(self) -> asyncio.Transport:
        transport = self._transport
        if self._closed or self._lost is not None or transport is None or transport.is_closing():
            raise TransportError("IPC connection is closed", hint="reconnect")
        return transport

    async def receive_into(self, buffer: memoryview) -> int:
        if self._closed or self._eof or self._transport is None:
            return 0
        if not len(buffer):
            return 0
        waiter = asyncio.get_running_loop().create_future()
        self._target, self._waiter = buffer, waiter
        self._transport.resume_reading()
        try:
            return await waiter
        except asyncio.CancelledError:
            if self._waiter is waiter:
                self._target = self._waiter = None
                if not self._transport.is_closing():
                    self._transport.pause_reading()
            raise

    async def receive(self, max_bytes: int = 65536) -> bytes:
        buffer = bytearray(max_bytes)
        count = await self.receive_into(memoryview(buffer))
        return bytes(buffer[:count])

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._transport is not None:
            self._transport.close()
        self._resolve(0)

    def raw_socket(self) -> Any:
        return self._transport.get_extra_info("socket") if self._transport is not None else None


async def adopt_socket(sock: socket.socket, peer_check: str) -> SocketStream:
    """A socket connected (and its peer checked) without the event loop, now on it."""
    _, stream = await asyncio.get_running_loop().create_unix_connection(SocketStream, sock=sock)
    stream.peer_check = peer_check
    return stream


async def serve_unix(path: str, handler: Callable[[SocketStream], Any]) -> asyncio.AbstractServer:
    """Listen on ``path``; each connection runs ``handler(stream)`` as a task."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[Any]] = set()

    def factory() -> SocketStream:
        stream = SocketStream()
        original = stream.connection_made

        def connection_made(transport: asyncio.BaseTransport) -> None:
            original(transport)
            stream.peer_check = "server end"
            task = loop.create_task(handler(stream))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        stream.connection_made = connection_made  # type: ignore[method-assign]
        return stream

    return await loop.create_unix_server(factory, path)
