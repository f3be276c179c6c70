"""JSON messages over a byte stream: framing plus decoding, nothing protocol-specific."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from rekall.transports.base import ByteStream, TransportError
from rekall.transports.framing import LARGE_BODY_BYTES, FrameDecoder, decode_body, encode_message


class MessageChannel:
    """Send and receive whole JSON messages. ``receive`` returns ``None`` at a clean EOF."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self._decoder = FrameDecoder()
        #: Each complete frame with when its last byte arrived (borrowed: decoded before the next receive).
        self._ready: deque[tuple[memoryview, float]] = deque()
        self._send_lock = asyncio.Lock()
        #: When the frame of the message ``receive`` returned last had arrived (``time.monotonic()``):
        #: what it says was known from then, however long decoding and handling it take.
        self.received_at: float | None = None

    async def send(self, message: Any) -> None:
        frame = encode_message(message)
        async with self._send_lock:
            await self.stream.send(frame)

    def send_now(self, message: Any) -> bool:
        """Write ``message`` before returning if no send is under way and the stream takes it
        without waiting (:meth:`ByteStream.send_now`); ``False``: nothing was written, use
        :meth:`send`. Raises :class:`TransportError` if the stream broke."""
        if self._send_lock.locked():  # another send waits for the peer: frames keep their order
            return False
        return self.stream.send_now(encode_message(message))

    async def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (used by the simulator to send broken frames)."""
        async with self._send_lock:
            await self.stream.send(data)

    async def receive(self) -> Any | None:
        while not self._ready:
            count = await self.stream.receive_into(self._decoder.buffer())
            if not count:
                if self._decoder.pending_bytes:
                    raise TransportError(
                        f"IPC connection closed in the middle of a frame ({self._decoder.pending_bytes} bytes pending)",
                        hint="reconnect")
                return None
            arrived = time.monotonic()
            self._ready.extend((frame, arrived) for frame in self._decoder.commit(count))
        body, self.received_at = self._ready.popleft()
        if len(body) >= LARGE_BODY_BYTES:  # on a worker thread: a big snapshot must not stall the loop's timers
            return await asyncio.to_thread(decode_body, body)
        return decode_body(body)

    async def aclose(self) -> None:
        await self.stream.aclose()
