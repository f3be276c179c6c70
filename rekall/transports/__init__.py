"""Bytes to and from the extension's IPC router: endpoints, security checks, framing.

A transport yields a :class:`ByteStream` (send, receive, close) and nothing more;
:class:`MessageChannel` adds framing and JSON on top. Nothing here knows a method name
or a protocol version: that is the adapters' job.

The shared Codex app-server's control socket has its own modules, imported on use (they are
not re-exported here, so that ``websockets`` stays off start-up paths):
:mod:`rekall.transports.control_socket` (where it is, what is checked) and
:mod:`rekall.transports.websocket` (JSON messages as WebSocket text frames over a ByteStream).
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

from rekall.transports.base import (
    ByteStream,
    ConnectTimeout,
    EndpointInsecure,
    EndpointMissing,
    EndpointUnsupported,
    PeerMismatch,
    Transport,
    TransportError,
)
from rekall.transports.endpoint import Endpoint, resolve_endpoint
from rekall.transports.framing import MAX_FRAME_BYTES, FrameDecoder, FrameError, decode_body, encode_frame, encode_message
from rekall.transports.unix import PeerUidLookup, UnixTransport, peer_uid

if TYPE_CHECKING:
    from rekall.transports.channel import MessageChannel
    from rekall.transports.memory import MemoryStream, MemoryTransport, memory_stream_pair

#: Re-exported on first use: they need asyncio, which the worker's first follow is made without.
_ON_USE = {"MessageChannel": "rekall.transports.channel", "MemoryStream": "rekall.transports.memory",
           "MemoryTransport": "rekall.transports.memory", "memory_stream_pair": "rekall.transports.memory"}


def __getattr__(name: str) -> Any:
    if name not in _ON_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_ON_USE[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "MAX_FRAME_BYTES",
    "ByteStream",
    "ConnectTimeout",
    "Endpoint",
    "EndpointInsecure",
    "EndpointMissing",
    "EndpointUnsupported",
    "FrameDecoder",
    "FrameError",
    "MemoryStream",
    "MemoryTransport",
    "MessageChannel",
    "PeerMismatch",
    "PeerUidLookup",
    "Transport",
    "TransportError",
    "UnixTransport",
    "decode_body",
    "encode_frame",
    "encode_message",
    "memory_stream_pair",
    "peer_uid",
    "resolve_endpoint",
    "transport_for",
]


def transport_for(endpoint: Endpoint, *, peer_uid_lookup: PeerUidLookup = peer_uid,
                  platform: str | None = None) -> Transport:
    """The transport that reaches ``endpoint``: a named pipe on Windows, else a Unix socket."""
    platform = sys.platform if platform is None else platform
    if endpoint.kind == "pipe" or (endpoint.kind == "test" and platform == "win32"):
        from rekall.transports.pipe import PipeTransport

        return PipeTransport(endpoint.path)
    return UnixTransport(endpoint.path, peer_uid_lookup=peer_uid_lookup)
