"""Unix domain socket transport, with the peer-credential check.

The filesystem checks in :mod:`rekall.transports.endpoint` happen before connecting; after
connecting we also ask the kernel who is at the other end (``SO_PEERCRED`` on Linux,
``getpeereid`` on macOS and the BSDs) and refuse a peer running as another user. That
closes the window between ``lstat`` and ``connect`` in which the path could be swapped.

Connecting works with or without an event loop: :meth:`UnixTransport.connect` gives a
:class:`~rekall.transports.socketstream.SocketStream`, :meth:`UnixTransport.connect_blocking` a
plain blocking socket (the worker's first follow is made before it loads asyncio; see
:mod:`rekall.adapters.extension.first_follow`). Both run the same checks; this module does not import asyncio.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rekall.kernel.sandbox import caused_by_sandbox, way_out
from rekall.transports.base import (
    ConnectTimeout,
    EndpointInsecure,
    EndpointMissing,
    EndpointUnsupported,
    PeerMismatch,
    SandboxRefused,
    Transport,
    TransportError,
)

if TYPE_CHECKING:
    from rekall.transports.socketstream import SocketStream

PeerUidLookup = Callable[[Any], int]


def peer_uid(sock: Any) -> int:
    """The uid of the process at the other end of a connected Unix socket."""
    if hasattr(socket, "SO_PEERCRED"):
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", raw)
        return uid
    if sys.platform == "darwin" or "bsd" in sys.platform:
        import ctypes.util  # only here: Linux (above) needs no foreign call, and its import is not free

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
        if libc.getpeereid(sock.fileno(), ctypes.byref(uid), ctypes.byref(gid)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return uid.value
    raise EndpointUnsupported(f"cannot check the IPC peer's user on {sys.platform}",
                              hint="use Linux or macOS")


class UnixTransport(Transport):
    """Connects to ``path`` and verifies that the peer runs as ``expected_uid`` (default: us)."""

    def __init__(
        self,
        path: str,
        *,
        expected_uid: int | None = None,
        peer_uid_lookup: PeerUidLookup = peer_uid,
        connect_timeout_s: float = 5.0,
        server: str = "the extension",
        restart: str = "reload the VS Code window",
        start_hint: str = "open the thread in the Codex VS Code extension, then try again",
    ) -> None:
        self.path = path
        self.server = server  # who should be listening, for the wording of errors
        self.restart = restart
        self.start_hint = start_hint
        self.expected_uid = os.geteuid() if expected_uid is None else expected_uid
        self.peer_uid_lookup = peer_uid_lookup
        self.connect_timeout_s = connect_timeout_s

    async def connect(self) -> SocketStream:
        import asyncio

        from rekall.transports.socketstream import SocketStream

        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, stream = await loop.create_unix_connection(SocketStream, self.path)
        except TimeoutError:
            raise self._timed_out() from None
        except OSError as exc:
            raise self._refused(exc) from exc
        try:
            stream.peer_check = self._checked_peer(stream.raw_socket())
        except PeerMismatch:
            await stream.aclose()
            raise
        return stream

    def connect_blocking(self) -> tuple[socket.socket, str]:
        """The same connection and checks without an event loop: a blocking socket and the peer check."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.connect_timeout_s)
            try:
                sock.connect(self.path)
            except TimeoutError:
                raise self._timed_out() from None
            except OSError as exc:
                raise self._refused(exc) from exc
            return sock, self._checked_peer(sock)
        except BaseException:
            sock.close()
            raise

    def _timed_out(self) -> ConnectTimeout:
        return ConnectTimeout(f"IPC connection to {self.path} timed out after {self.connect_timeout_s:g} s",
                              hint=f"{self.server} may be busy or hung; {self.restart}")

    def _refused(self, exc: OSError) -> TransportError:
        if isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
            return EndpointMissing(f"nothing is listening on {self.path} ({exc.strerror})", hint=self.start_hint)
        if caused_by_sandbox(exc):
            # Shown as is in doctor's rows; the CLI words it anew for whichever verb met it.
            return SandboxRefused(f"Codex's sandbox refused the connection to {self.path}",
                                  hint=way_out("rekall doctor"))
        if isinstance(exc, PermissionError):
            return EndpointInsecure(f"permission denied connecting to {self.path}",
                                    hint="the socket belongs to another user; do not use it")
        return TransportError(f"cannot connect to {self.path}: {exc.strerror or exc}", hint="check the socket path")

    def _checked_peer(self, raw_socket: Any) -> str:
        """The peer check's text; :class:`PeerMismatch` unless the peer runs as ``expected_uid``."""
        try:
            uid = self.peer_uid_lookup(raw_socket)
        except OSError as exc:
            raise PeerMismatch(f"cannot verify the user of the process behind {self.path}: {exc}",
                               hint=f"refusing an unverified peer; {self.restart}") from exc
        if uid != self.expected_uid:
            raise PeerMismatch(
                f"the process behind {self.path} runs as uid {uid}, not as you (uid {self.expected_uid})",
                hint=f"another user may be impersonating {self.server}; do not connect",
            )
        return f"uid {uid} matches ours"
