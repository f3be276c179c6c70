"""The transport contract: a connected byte stream with send, receive and close.

Modelled on httpcore's network streams. A transport knows sockets or pipes and nothing
else: no frames, no JSON, no method names. Lower-level exceptions (``OSError``, pywin32
errors, ``asyncio.IncompleteReadError``) are translated here into :class:`TransportError`
so that nobody above this package catches ``OSError``.
"""

from __future__ import annotations

from rekall.kernel.errors import IpcError
from rekall.kernel.sandbox import CODE as SANDBOXED


class TransportError(IpcError):
    """The connection could not be made, or broke. ``code`` says which."""

    code = "connection_lost"


class EndpointMissing(TransportError):
    code = "endpoint_missing"


class EndpointInsecure(TransportError):
    code = "endpoint_insecure"


class EndpointUnsupported(TransportError):
    code = "endpoint_unsupported"


class PeerMismatch(TransportError):
    """The process at the other end runs as another user."""

    code = "peer_uid_mismatch"


class ConnectTimeout(TransportError):
    code = "connect_timeout"


class SandboxRefused(TransportError):
    """Codex's sandbox refused the connection (:mod:`rekall.kernel.sandbox`)."""

    code = SANDBOXED


class ByteStream:
    """One connected, bidirectional byte stream."""

    #: What the transport learned about the peer on connect, e.g. ``"uid 1000 (ours)"``.
    peer_check: str = "not checked"

    async def send(self, data: bytes) -> None:
        """Write all of ``data``. Raises :class:`TransportError` if the stream broke."""
        raise NotImplementedError  # pragma: no cover

    def send_now(self, data: bytes) -> bool:
        """Write all of ``data`` before returning, if the stream can without waiting; ``False``:
        nothing was written (use :meth:`send`). Raises :class:`TransportError` if the stream broke.
        A stream that cannot write synchronously keeps this default."""
        return False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """Return the next bytes available (at most ``max_bytes``), or ``b""`` once the
        peer has closed its side. Raises :class:`TransportError` if the stream broke."""
        raise NotImplementedError  # pragma: no cover

    async def receive_into(self, buffer: memoryview) -> int:
        """Receive into ``buffer``; return the byte count, ``0`` at EOF. Transports that can
        receive in place override this; the default copies from :meth:`receive`."""
        data = await self.receive(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    async def aclose(self) -> None:
        """Close the stream. Idempotent; never raises."""
        raise NotImplementedError  # pragma: no cover

    async def __aenter__(self) -> ByteStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class Transport:
    """Something that can open a :class:`ByteStream` to the router."""

    async def connect(self) -> ByteStream:
        raise NotImplementedError  # pragma: no cover
