"""Length-prefixed JSON frames, the wire format of the extension's IPC router.

A frame is a ``u32`` little-endian body length followed by that many bytes of UTF-8 JSON.
Lengths of zero and lengths above :data:`MAX_FRAME_BYTES` (256 MiB, the same cap as the
extension and the Codex TUI) are refused: after such a header the byte stream can no longer
be trusted, so the caller must close the connection.

:class:`FrameDecoder` is sans-I/O: feed it whatever chunks the socket produced, in any
split, and it returns the complete frame bodies. Reassembly is linear in the bytes fed.
A body is copied exactly once, into a buffer allocated from its header, so a 200 MB
snapshot arriving in 64 KiB pieces is never re-concatenated (the Node client's quadratic
``Buffer.concat`` is what we avoid here).
"""

from __future__ import annotations

import json
import struct
from typing import Any

from rekall.errors import IpcError

MAX_FRAME_BYTES = 256 * 1024 * 1024
_HEADER = struct.Struct("<I")
HEADER_BYTES = _HEADER.size


class FrameError(IpcError):
    """The peer sent bytes that are not a valid frame. The connection cannot continue."""

    code = "protocol_error"


def _check_length(length: int) -> None:
    if length == 0 or length > MAX_FRAME_BYTES:
        raise FrameError(
            f"invalid IPC frame length {length} (must be 1..{MAX_FRAME_BYTES} bytes)",
            hint="the peer is not speaking the extension's IPC framing; check REKALL_PIPE or the socket path",
        )


def encode_frame(body: bytes) -> bytes:
    """Header plus body, as one buffer so that it is written in a single call."""
    _check_length(len(body))
    return _HEADER.pack(len(body)) + body


def encode_message(message: Any) -> bytes:
    """A JSON value as one frame. Non-ASCII text is sent as UTF-8, not escaped."""
    return encode_frame(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def decode_body(body: bytes | bytearray) -> Any:
    """Parse one frame body; invalid UTF-8 or JSON is a :class:`FrameError`."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(f"IPC frame is not valid UTF-8 (byte {exc.start} of {len(body)})",
                         hint="the peer sent a corrupt frame; reconnect") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FrameError(f"IPC frame is not valid JSON: {exc.msg} at offset {exc.pos}",
                         hint="the peer sent a corrupt frame; reconnect") from None


class FrameDecoder:
    """Turns arbitrary chunks of the byte stream into complete frame bodies.

    ``feed`` returns the bodies completed by this chunk, in order. After a
    :class:`FrameError` the decoder is poisoned and keeps raising: there is no way to find
    the next frame boundary again.
    """

    def __init__(self) -> None:
        self._header = bytearray()
        self._body: bytearray | None = None
        self._filled = 0
        self._error: FrameError | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame held back (header and body)."""
        return len(self._header) + self._filled

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[bytearray]:
        if self._error is not None:
            raise self._error
        frames: list[bytearray] = []
        view = memoryview(chunk).cast("B")
        pos, end = 0, len(view)
        while pos < end:
            if self._body is None:
                if not self._header and end - pos >= HEADER_BYTES:
                    (length,) = _HEADER.unpack_from(view, pos)
                    pos += HEADER_BYTES
                else:  # a header split across chunks
                    take = min(HEADER_BYTES - len(self._header), end - pos)
                    self._header += view[pos:pos + take]
                    pos += take
                    if len(self._header) < HEADER_BYTES:
                        break
                    (length,) = _HEADER.unpack(self._header)
                    self._header.clear()
                try:
                    _check_length(length)
                except FrameError as exc:
                    self._error = exc
                    raise
                if end - pos >= length:  # the common case: the whole body is in this chunk
                    frames.append(bytearray(view[pos:pos + length]))
                    pos += length
                    continue
                self._body = bytearray(length)
                self._filled = 0
            take = min(len(self._body) - self._filled, end - pos)
            self._body[self._filled:self._filled + take] = view[pos:pos + take]
            self._filled += take
            pos += take
            if self._filled == len(self._body):
                frames.append(self._body)
                self._body = None
                self._filled = 0
        return frames
