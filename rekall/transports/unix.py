"""Unix domain socket transport, with the peer-credential check.

The filesystem checks in :mod:`rekall.transports.endpoint` happen before connecting; after
connecting we also ask the kernel who is at the other end (``SO_PEERCRED`` on Linux,
``getpeereid`` on macOS and the BSDs) and refuse a peer running as another user. That
closes the window between ``lstat`` and ``connect`` in which the path could be swapped.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any

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

PeerUidLookup = Callable[[Any], int]


def peer_uid(sock: Any) -> int:
    """The uid of the process at the other end of a connected Unix socket."""
    if hasattr(socket, "SO_PEERCRED"):
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", raw)
        return uid
    if sys.platform == "darwin" or "bsd" in sys.platform:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
        if libc.getpeereid(sock.fileno(), ctypes.byref(uid), ctypes.byref(gid)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return uid.value
    raise EndpointUnsupported(f"cannot check the IPC peer's user on {sys.platform}",
                              hint="use Linux or macOS")


class UnixStream(ByteStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer_check: str) -> None:
        self._reader = reader
        self._writer = writer
        self.peer_check = peer_check
        self._closed = False

    async def send(self, data: bytes) -> None:
        if self._closed:
            raise TransportError("IPC connection is closed", hint="reconnect")
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:  # RuntimeError: transport closed under us
            raise TransportError(f"IPC connection lost while sending: {exc}", hint="reconnect") from None

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._closed:
            return b""
        try:
            return await self._reader.read(max_bytes)
        except OSError as exc:
            raise TransportError(f"IPC connection lost while receiving: {exc}", hint="reconnect") from None

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, RuntimeError):
            pass


class UnixTransport(Transport):
    """Connects to ``path`` and verifies that the peer runs as ``expected_uid`` (default: us)."""

    def __init__(
        self,
        path: str,
        *,
        expected_uid: int | None = None,
        peer_uid_lookup: PeerUidLookup = peer_uid,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.path = path
        self.expected_uid = os.geteuid() if expected_uid is None else expected_uid
        self.peer_uid_lookup = peer_uid_lookup
        self.connect_timeout_s = connect_timeout_s

    async def connect(self) -> UnixStream:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_unix_connection(self.path)
        except TimeoutError:
            raise ConnectTimeout(f"IPC connection to {self.path} timed out after {self.connect_timeout_s:g} s",
                                 hint="the extension may be busy or hung; reload the VS Code window") from None
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise EndpointMissing(f"nothing is listening on {self.path} ({exc.strerror})",
                                  hint="open the thread in the Codex VS Code extension, then try again") from None
        except PermissionError:
            raise EndpointInsecure(f"permission denied connecting to {self.path}",
                                   hint="the socket belongs to another user; do not use it") from None
        except OSError as exc:
            raise TransportError(f"cannot connect to {self.path}: {exc.strerror or exc}",
                                 hint="check the socket path") from None
        try:
            uid = self.peer_uid_lookup(writer.get_extra_info("socket"))
        except OSError as exc:
            writer.close()
            raise PeerMismatch(f"cannot verify the user of the process behind {self.path}: {exc}",
                               hint="refusing an unverified peer; restart the extension") from None
        if uid != self.expected_uid:
            writer.close()
            raise PeerMismatch(
                f"the process behind {self.path} runs as uid {uid}, not as you (uid {self.expected_uid})",
                hint="another user may be impersonating the extension; do not connect",
            )
        return UnixStream(reader, writer, peer_check=f"uid {uid} matches ours")
