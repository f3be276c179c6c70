"""Windows named-pipe transport (``\\\\.\\pipe\\codex-ipc``), on pywin32.

Pipe names share one machine-wide namespace, so the client must not trust whoever created
the name. We open the pipe with ``SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION`` (a
squatting server cannot impersonate us), then ask for the server's process id and compare
that process's token user SID with ours before sending a byte.

The handle is opened for overlapped I/O so that a blocking read on one worker thread does
not serialize a write on another (synchronous handles serialize all I/O). Reads and writes
run through ``asyncio.to_thread``; closing cancels the pending read.

pywin32 is a Windows-only dependency (see ``pyproject.toml``). All calls go through an
``api`` namespace so the logic is unit-tested with fakes on other platforms.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

from rekall.transports.base import (
    ByteStream,
    ConnectTimeout,
    EndpointInsecure,
    EndpointMissing,
    PeerMismatch,
    Transport,
    TransportError,
)

GENERIC_READ = 0x80000000
GENERIC_WRITE = 0x40000000
OPEN_EXISTING = 3
FILE_FLAG_OVERLAPPED = 0x40000000
SECURITY_SQOS_PRESENT = 0x00100000
SECURITY_IDENTIFICATION = 0x00010000
PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
TOKEN_QUERY = 0x0008
TOKEN_USER_CLASS = 1  # TOKEN_INFORMATION_CLASS.TokenUser

ERROR_FILE_NOT_FOUND = 2
ERROR_ACCESS_DENIED = 5
ERROR_BROKEN_PIPE = 109
ERROR_SEM_TIMEOUT = 121
ERROR_PIPE_BUSY = 231
ERROR_MORE_DATA = 234
ERROR_PIPE_NOT_CONNECTED = 233
ERROR_OPERATION_ABORTED = 995
ERROR_INVALID_HANDLE = 6

OPEN_FLAGS = FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION
_EOF_ERRORS = {ERROR_BROKEN_PIPE, ERROR_PIPE_NOT_CONNECTED, ERROR_OPERATION_ABORTED, ERROR_INVALID_HANDLE}


def load_win32() -> types.SimpleNamespace:
    """The pywin32 modules this transport uses (import fails off Windows)."""
    import pywintypes
    import win32api
    import win32event
    import win32file
    import win32pipe
    import win32security

    return types.SimpleNamespace(pywintypes=pywintypes, win32api=win32api, win32event=win32event,
                                 win32file=win32file, win32pipe=win32pipe, win32security=win32security)


def _winerror(exc: BaseException) -> int | None:
    return getattr(exc, "winerror", None)


def _process_user_sid(api: Any, process_handle: Any) -> str:
    token = api.win32security.OpenProcessToken(process_handle, TOKEN_QUERY)
    try:
        sid, _attributes = api.win32security.GetTokenInformation(token, TOKEN_USER_CLASS)
        return api.win32security.ConvertSidToStringSid(sid)
    finally:
        api.win32api.CloseHandle(token)


class PipeStream(ByteStream):
    def __init__(self, api: Any, handle: Any, peer_check: str) -> None:
        self._api = api
        self._handle = handle
        self.peer_check = peer_check
        self._closed = False

    def _overlapped(self) -> Any:
        ov = self._api.pywintypes.OVERLAPPED()
        ov.hEvent = self._api.win32event.CreateEvent(None, True, False, None)
        return ov

    def _read_blocking(self, max_bytes: int) -> bytes:
        api, ov = self._api, self._overlapped()
        buf = api.win32file.AllocateReadBuffer(max_bytes)
        try:
            api.win32file.ReadFile(self._handle, buf, ov)
            got = api.win32file.GetOverlappedResult(self._handle, ov, True)
        except api.pywintypes.error as exc:
            code = _winerror(exc)
            if code == ERROR_MORE_DATA:  # a message-mode pipe: the rest comes with the next read
                got = max_bytes
            elif code in _EOF_ERRORS or self._closed:
                return b""
            else:
                raise TransportError(f"named pipe read failed: {exc}", hint="reconnect") from exc
        finally:
            api.win32api.CloseHandle(ov.hEvent)
        return bytes(buf[:got])

    def _write_blocking(self, data: bytes) -> None:
        api, view = self._api, memoryview(data)
        while view:
            ov = self._overlapped()
            try:
                api.win32file.WriteFile(self._handle, view.tobytes(), ov)
                written = api.win32file.GetOverlappedResult(self._handle, ov, True)
            except api.pywintypes.error as exc:
                raise TransportError(f"named pipe write failed: {exc}", hint="reconnect") from exc
            finally:
                api.win32api.CloseHandle(ov.hEvent)
            view = view[written:]

    async def send(self, data: bytes) -> None:
        if self._closed:
            raise TransportError("named pipe is closed", hint="reconnect")
        await asyncio.to_thread(self._write_blocking, data)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._closed:
            return b""
        return await asyncio.to_thread(self._read_blocking, max_bytes)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        cancel = getattr(self._api.win32file, "CancelIoEx", None)
        try:
            if cancel is not None:
                cancel(self._handle, None)
        except self._api.pywintypes.error:
            pass
        self._api.win32api.CloseHandle(self._handle)


class PipeTransport(Transport):
    def __init__(self, name: str, *, api: Any | None = None, connect_timeout_s: float = 5.0) -> None:
        self.name = name
        self._api = api
        self.connect_timeout_s = connect_timeout_s

    def _create(self, api: Any) -> Any:
        return api.win32file.CreateFile(self.name, GENERIC_READ | GENERIC_WRITE, 0, None, OPEN_EXISTING,
                                        OPEN_FLAGS, None)

    def _open_blocking(self) -> PipeStream:
        api = self._api or load_win32()
        try:
            try:
                handle = self._create(api)
            except api.pywintypes.error as exc:
                if _winerror(exc) != ERROR_PIPE_BUSY:
                    raise
                # All instances are busy: wait (bounded) for one to free up, then open once more.
                api.win32pipe.WaitNamedPipe(self.name, int(self.connect_timeout_s * 1000))
                handle = self._create(api)
        except api.pywintypes.error as exc:
            code = _winerror(exc)
            if code == ERROR_FILE_NOT_FOUND:
                raise EndpointMissing(f"no named pipe {self.name}",
                                      hint="open the thread in the Codex VS Code extension, then try again") from exc
            if code == ERROR_ACCESS_DENIED:
                raise EndpointInsecure(f"access to named pipe {self.name} was denied",
                                       hint="the pipe belongs to another user; do not use it") from exc
            if code in (ERROR_SEM_TIMEOUT, ERROR_PIPE_BUSY):
                raise ConnectTimeout(f"named pipe {self.name} stayed busy for {self.connect_timeout_s:g} s",
                                     hint="the extension may be hung; reload the VS Code window") from exc
            raise TransportError(f"cannot open named pipe {self.name}: {exc}", hint="check the pipe name") from exc
        try:
            peer_check = self._verify_server(api, handle)
        except BaseException:
            api.win32api.CloseHandle(handle)
            raise
        return PipeStream(api, handle, peer_check)

    def _verify_server(self, api: Any, handle: Any) -> str:
        try:
            pid = api.win32pipe.GetNamedPipeServerProcessId(handle)
            process = api.win32api.OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, False, pid)
            try:
                theirs = _process_user_sid(api, process)
            finally:
                api.win32api.CloseHandle(process)
            ours = _process_user_sid(api, api.win32api.GetCurrentProcess())
        except api.pywintypes.error as exc:
            raise PeerMismatch(f"cannot verify who serves named pipe {self.name}: {exc}",
                               hint="refusing an unverified peer; restart the extension") from exc
        if theirs != ours:
            raise PeerMismatch(
                f"named pipe {self.name} is served by process {pid} running as {theirs}, not as you ({ours})",
                hint="another user may be squatting the pipe name; do not connect",
            )
        return f"server process {pid} runs as {theirs} (ours)"

    async def connect(self) -> PipeStream:
        return await asyncio.to_thread(self._open_blocking)
