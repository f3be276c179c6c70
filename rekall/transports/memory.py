"""An in-memory transport for tests, public through :mod:`rekall.testing`.

Like httpx's ``MockTransport``: no sockets, same contract. Each :meth:`MemoryTransport.connect`
creates a connected pair of :class:`MemoryStream` ends; the server end goes to ``serve``
(run as a task) or, without one, waits for :meth:`MemoryTransport.accept`. Every chunk
written is also recorded in :attr:`MemoryStream.sent` for assertions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rekall.transports.base import ByteStream, Transport, TransportError

_EOF = b""


class MemoryStream(ByteStream):
    peer_check = "in-memory peer (not checked)"

    def __init__(self) -> None:
        self._inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._leftover = b""
        self._peer: MemoryStream | None = None
        self._closed = False
        self._eof = False
        self.sent: list[bytes] = []

    async def send(self, data: bytes) -> None:
        if self._closed or self._peer is None or self._peer._closed:
            raise TransportError("in-memory connection is closed", hint="reconnect")
        if data:
            self.sent.append(bytes(data))
            self._peer._inbox.put_nowait(bytes(data))

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._leftover:
            if self._eof or self._closed:
                return _EOF
            chunk = await self._inbox.get()
            if not chunk:
                self._eof = True
                return _EOF
            self._leftover = chunk
        out, self._leftover = self._leftover[:max_bytes], self._leftover[max_bytes:]
        return out

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.put_nowait(_EOF)  # wake our own pending receive
        if self._peer is not None:
            self._peer._inbox.put_nowait(_EOF)


def memory_stream_pair() -> tuple[MemoryStream, MemoryStream]:
    a, b = MemoryStream(), MemoryStream()
    a._peer, b._peer = b, a
    return a, b


class MemoryTransport(Transport):
    def __init__(self, serve: Callable[[MemoryStream], Awaitable[None]] | None = None) -> None:
        self._serve = serve
        self._accepted: asyncio.Queue[MemoryStream] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0
        self.refuse: str | None = None  # set to a message to make connect() fail

    async def connect(self) -> MemoryStream:
        if self.refuse is not None:
            raise TransportError(self.refuse, hint="the in-memory transport was told to refuse")
        client, server = memory_stream_pair()
        self.connections += 1
        if self._serve is None:
            self._accepted.put_nowait(server)
        else:
            task = asyncio.create_task(self._serve(server))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return client

    async def accept(self) -> MemoryStream:
        """The server end of the next connection (only without ``serve``)."""
        return await self._accepted.get()

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
