"""The named-pipe transport's logic, against fakes of the pywin32 calls it makes."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from rekall.transports import (
    ConnectTimeout,
    Endpoint,
    EndpointInsecure,
    EndpointMissing,
    MessageChannel,
    PeerMismatch,
    UnixTransport,
    encode_message,
    transport_for,
)
from rekall.transports import pipe as pipe_module
from rekall.transports.pipe import PipeTransport

NAME = r"\\.\pipe\codex-ipc"


class FakeWinError(Exception):
    def __init__(self, winerror: int) -> None:
        super().__init__(f"winerror {winerror}")
        self.winerror = winerror


class FakeOverlapped:
    hEvent = None


class FakeWindows:
    """Just enough of pywin32 for one client pipe, with a scripted server."""

    def __init__(self, *, server_sid: str = "S-1-5-21-ME", create_errors: list[int] | None = None) -> None:
        self.server_sid = server_sid
        self.create_errors = list(create_errors or [])
        self.opened: list[tuple] = []
        self.closed: list[object] = []
        self.written = bytearray()
        self.to_client = bytearray()
        self.server_closed = False
        self.write_limit = 3  # short writes: the transport must loop
        self.waited: list[tuple] = []
        self.cancelled: list[object] = []
        self._pending = 0
        self.api = SimpleNamespace(
            pywintypes=SimpleNamespace(error=FakeWinError, OVERLAPPED=FakeOverlapped),
            win32event=SimpleNamespace(CreateEvent=lambda *args: "event"),
            win32api=SimpleNamespace(CloseHandle=self.closed.append, GetCurrentProcess=lambda: "me",
                                     OpenProcess=lambda access, inherit, pid: f"process-{pid}"),
            win32file=SimpleNamespace(CreateFile=self.create_file, AllocateReadBuffer=bytearray,
                                      ReadFile=self.read_file, WriteFile=self.write_file,
                                      GetOverlappedResult=self.overlapped_result, CancelIoEx=self.cancel),
            win32pipe=SimpleNamespace(GetNamedPipeServerProcessId=lambda handle: 4242,
                                      WaitNamedPipe=lambda name, ms: self.waited.append((name, ms))),
            win32security=SimpleNamespace(OpenProcessToken=lambda process, access: ("token", process),
                                          GetTokenInformation=self.token_user, ConvertSidToStringSid=str),
        )

    def create_file(self, *args):
        self.opened.append(args)
        if self.create_errors:
            raise FakeWinError(self.create_errors.pop(0))
        return "pipe-handle"

    def token_user(self, token, info_class):
        assert info_class == pipe_module.TOKEN_USER_CLASS
        _, process = token
        return ("S-1-5-21-ME" if process == "me" else self.server_sid), 0

    def read_file(self, handle, buffer, overlapped):
        if not self.to_client:
            raise FakeWinError(pipe_module.ERROR_BROKEN_PIPE)
        count = min(len(buffer), len(self.to_client))
        buffer[:count] = self.to_client[:count]
        del self.to_client[:count]
        self._pending = count
        return 997, None

    def write_file(self, handle, data, overlapped):
        count = min(len(data), self.write_limit)
        self.written += data[:count]
        self._pending = count
        return 0, count

    def overlapped_result(self, handle, overlapped, wait):
        assert wait is True
        return self._pending

    def cancel(self, handle, overlapped):
        self.cancelled.append(handle)


@pytest.mark.anyio
async def test_the_pipe_is_opened_for_overlapped_io_with_identification_only_and_the_server_is_verified():
    fake = FakeWindows()
    stream = await PipeTransport(NAME, api=fake.api).connect()
    (args,) = fake.opened
    assert args[0] == NAME
    assert args[1] == pipe_module.GENERIC_READ | pipe_module.GENERIC_WRITE
    assert args[4] == pipe_module.OPEN_EXISTING
    assert args[5] == (pipe_module.FILE_FLAG_OVERLAPPED | pipe_module.SECURITY_SQOS_PRESENT
                       | pipe_module.SECURITY_IDENTIFICATION)
    assert stream.peer_check == "server process 4242 runs as S-1-5-21-ME (ours)"
    assert "process-4242" in fake.closed  # the process handle is not leaked
    await stream.aclose()
    assert fake.cancelled == ["pipe-handle"] and "pipe-handle" in fake.closed


@pytest.mark.anyio
async def test_a_pipe_served_by_another_user_is_refused_and_closed():
    fake = FakeWindows(server_sid="S-1-5-21-SOMEONE-ELSE")
    with pytest.raises(PeerMismatch, match="running as S-1-5-21-SOMEONE-ELSE, not as you"):
        await PipeTransport(NAME, api=fake.api).connect()
    assert "pipe-handle" in fake.closed


@pytest.mark.anyio
@pytest.mark.parametrize("errors, expected", [
    ([pipe_module.ERROR_FILE_NOT_FOUND], EndpointMissing),
    ([pipe_module.ERROR_ACCESS_DENIED], EndpointInsecure),
    ([pipe_module.ERROR_PIPE_BUSY, pipe_module.ERROR_PIPE_BUSY], ConnectTimeout),
])
async def test_open_failures_map_to_clear_errors(errors, expected):
    fake = FakeWindows(create_errors=errors)
    with pytest.raises(expected, match="codex-ipc"):
        await PipeTransport(NAME, api=fake.api).connect()


@pytest.mark.anyio
async def test_a_busy_pipe_is_waited_for_once_with_the_connect_budget():
    fake = FakeWindows(create_errors=[pipe_module.ERROR_PIPE_BUSY])
    stream = await PipeTransport(NAME, api=fake.api, connect_timeout_s=2.5).connect()
    assert fake.waited == [(NAME, 2500)] and len(fake.opened) == 2
    await stream.aclose()


@pytest.mark.anyio
async def test_frames_travel_through_the_pipe_and_a_broken_pipe_is_eof():
    fake = FakeWindows()
    channel = MessageChannel(await PipeTransport(NAME, api=fake.api).connect())
    fake.to_client += encode_message({"type": "broadcast", "n": 1})
    with anyio.fail_after(5):
        await channel.send({"type": "request", "text": "é" * 10})  # written 3 bytes at a time
        assert await channel.receive() == {"type": "broadcast", "n": 1}
        assert await channel.receive() is None  # ERROR_BROKEN_PIPE
    assert bytes(fake.written) == encode_message({"type": "request", "text": "é" * 10})


def test_windows_endpoints_get_the_pipe_transport_and_unix_ones_the_socket():
    assert isinstance(transport_for(Endpoint("pipe", NAME)), PipeTransport)
    assert isinstance(transport_for(Endpoint("test", r"\\.\pipe\test"), platform="win32"), PipeTransport)
    assert isinstance(transport_for(Endpoint("test", "/tmp/x.sock"), platform="linux"), UnixTransport)
