"""Length-prefixed JSON frames, the wire format of the extension's IPC router.

A frame is a ``u32`` little-endian body length followed by that many bytes of UTF-8 JSON.
Lengths of zero and lengths above :data:`MAX_FRAME_BYTES` (256 MiB, the same cap as the
extension and the Codex TUI) are refused: after such a header the byte stream can no longer
be trusted, so the caller must close the connection.

:class:`FrameDecoder` is sans-I/O and linear in the bytes it is given. The transport
receives straight into :meth:`FrameDecoder.buffer` and reports with
:meth:`FrameDecoder.commit`; frames come back as views of that memory. A frame that fits
the scratch buffer is never copied by us, and a larger one is received directly into a
buffer sized from its header, so a 200 MB snapshot arriving in 64 KiB pieces is never
re-concatenated (the Node client's quadratic ``Buffer.concat`` is what we avoid here).
:meth:`FrameDecoder.feed` is the simple, copying form of the same thing.
"""

from __future__ import annotations

import json
import mmap
import struct
import sys
from typing import Any

from rekall.kernel.errors import IpcError
from rekall.kernel.safejson import decode_reason

MAX_FRAME_BYTES = 256 * 1024 * 1024
#: Bodies at least this large (snapshots) are parsed by :mod:`rekall.transports.fastdecode`
#: when it can, and on a worker thread by :class:`~rekall.transports.channel.MessageChannel`.
LARGE_BODY_BYTES = 1 << 20
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


def frame_length(header: bytes | bytearray) -> int:
    """The body length a frame's header announces; a :class:`FrameError` if it cannot be valid."""
    (length,) = _HEADER.unpack(header)
    _check_length(length)
    return length


def encode_frame(body: bytes) -> bytes:
    """Header plus body, as one buffer so that it is written in a single call."""
    _check_length(len(body))
    return _HEADER.pack(len(body)) + body


def encode_message(message: Any) -> bytes:
    """A JSON value as one frame. Non-ASCII text is sent as UTF-8, not escaped."""
    return encode_frame(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def decode_body(body: bytes | bytearray | memoryview) -> Any:
    """Parse one frame body as ``json.loads`` does; invalid UTF-8 or JSON is a :class:`FrameError`."""
    if len(body) >= LARGE_BODY_BYTES:
        from rekall.transports.fastdecode import REFUSED, decode_large  # msgspec: only for big bodies

        value = decode_large(body)
        if value is not REFUSED:
            return value
    try:
        text = str(body, "utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(f"IPC frame is not valid UTF-8 (byte {exc.start} of {len(body)})",
                         hint="the peer sent a corrupt frame; reconnect") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FrameError(f"IPC frame is not valid JSON: {decode_reason(exc)} at offset {exc.pos}",
                         hint="the peer sent a corrupt frame; reconnect") from exc
    except ValueError:  # past json's own errors: an integer longer than Python converts from text
        raise FrameError(f"IPC frame holds an integer of more than {sys.get_int_max_str_digits()} digits",
                         hint="the peer sent a corrupt frame; reconnect") from None
    except RecursionError:  # thread states are deep but bounded; no depth scan on every snapshot
        raise FrameError("IPC frame nests too deeply to decode", hint="the peer sent a corrupt frame; reconnect") from None


def _body_buffer(length: int) -> bytearray | mmap.mmap:
    """A buffer for one large body. A kept one (up to KEEP_BIG_BUFFER_BYTES) is a bytearray;
    a bigger one is anonymous memory, which the kernel hands out already zeroed, page by page
    as the body arrives: ``bytearray(n)`` zeroes all of it first, in time that grows with the body."""
    if length <= FrameDecoder.KEEP_BIG_BUFFER_BYTES:
        return bytearray(length)
    return mmap.mmap(-1, length)


class FrameDecoder:
    """Reassembles frames from the byte stream, in linear time.

    Zero-copy use: ``n = recv_into(decoder.buffer())``, then ``frames = decoder.commit(n)``.
    Each frame is a ``memoryview`` that stays valid until the next call to :meth:`buffer`;
    decode it before asking for more bytes. Simple use: :meth:`feed` takes any chunk and
    returns owned ``bytes``.

    Frames that fit in the scratch buffer are views of it; a larger body gets its own
    buffer (reused when up to :data:`KEEP_BIG_BUFFER_BYTES`, so a stream of 1 MB snapshots
    does not allocate each time, and released when bigger).

    A bad header poisons the decoder: there is no way to find the next frame boundary
    again. The good frames before it are delivered first; the next call raises.
    """

    KEEP_BIG_BUFFER_BYTES = 8 * 1024 * 1024

    def __init__(self, scratch_bytes: int = 256 * 1024) -> None:
        self._scratch = bytearray(scratch_bytes)
        self._view = memoryview(self._scratch)
        self._start = 0  # first byte not yet returned as (part of) a frame
        self._end = 0  # end of the bytes received into the scratch
        self._big: bytearray | mmap.mmap | None = None
        self._big_length = 0  # length of the large body being received (0: none)
        self._big_filled = 0
        self._error: FrameError | None = None

    @property
    def pending_bytes(self) -> int:
        return self._end - self._start + self._big_filled

    def buffer(self) -> memoryview:
        """Where the next bytes must be received (never empty)."""
        if self._error is not None:
            raise self._error
        if self._big_length:
            return memoryview(self._big)[self._big_filled:self._big_length]  # type: ignore[arg-type]
        if self._big is not None and len(self._big) > self.KEEP_BIG_BUFFER_BYTES:
            self._big = None  # the frame it held has been handed out and decoded by now
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._scratch):  # move the partial frame to the front
            remaining = self._end - self._start
            self._scratch[:remaining] = self._view[self._start:self._end]
            self._start, self._end = 0, remaining
        return self._view[self._end:]

    def commit(self, count: int) -> list[memoryview]:
        """``count`` bytes were written into the last :meth:`buffer`; return completed frames."""
        if self._big_length:
            self._big_filled += count
            if self._big_filled < self._big_length:
                return []
            frame = memoryview(self._big)[:self._big_length]  # type: ignore[arg-type]
            self._big_length = self._big_filled = 0
            return [frame]
        self._end += count
        frames: list[memoryview] = []
        while self._end - self._start >= HEADER_BYTES:
            (length,) = _HEADER.unpack_from(self._scratch, self._start)
            try:
                _check_length(length)
            except FrameError as exc:
                self._error = exc
                if frames:  # deliver the good frames first; the next call raises
                    return frames
                raise
            body = self._start + HEADER_BYTES
            if self._end - body >= length:
                frames.append(self._view[body:body + length])
                self._start = body + length
                continue
            if HEADER_BYTES + length > len(self._scratch):  # will not fit: give it its own buffer
                if self._big is None or len(self._big) < length:
                    self._big = _body_buffer(length)
                have = self._end - body
                self._big[:have] = self._view[body:self._end]
                self._big_length, self._big_filled = length, have
                self._start = self._end = 0
            break
        return frames

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[bytes]:
        """Copy ``chunk`` in and return the frames it completed (owned copies)."""
        view = memoryview(chunk).cast("B")
        frames: list[bytes] = []
        pos = 0
        while pos < len(view):
            try:
                target = self.buffer()
                count = min(len(target), len(view) - pos)
                target[:count] = view[pos:pos + count]
                pos += count
                frames += [bytes(frame) for frame in self.commit(count)]
            except FrameError:
                if frames:  # deliver the good frames first; the error is stored, the next call raises
                    return frames
                raise
        return frames
