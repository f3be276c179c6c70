"""rekall's shared app-server client against misbehaving servers (a local ``websockets`` server)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
from pytest_mock import MockerFixture
from websockets.asyncio.server import ServerConnection, unix_serve

from rekall.adapters.app_server.rpc import AppServerClosed
from rekall.adapters.app_server.client import open_shared_app_server
from rekall.transports import EndpointMissing, PeerMismatch
from rekall.transports.base import ByteStream
from rekall.transports.control_socket import START_HINT
from rekall.transports.websocket import WebSocketChannel, open_websocket
from tests.codex.fakeserver import FAKE_VERSION, env_for, fake_app_server, folder  # noqa: F401 (a fixture)

pytestmark = pytest.mark.anyio

async def test_a_socket_nobody_listens_on_says_how_to_start_the_app_server(folder: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "app.sock"))
    os.chmod(folder / "app.sock", 0o600)
    with sock, anyio.fail_after(10), pytest.raises(EndpointMissing) as caught:
        async with open_shared_app_server(env_for(folder / "app.sock")):
            pass
    assert "nothing is listening" in caught.value.message and caught.value.hint == START_HINT


async def test_a_peer_running_as_another_user_is_refused_before_any_byte_is_sent(folder: Path) -> None:
    async with fake_app_server(folder / "app.sock"):
        with anyio.fail_after(10), pytest.raises(PeerMismatch) as caught:
            async with open_shared_app_server(env_for(folder / "app.sock"),
                                              peer_uid_lookup=lambda sock: os.geteuid() + 1):
                pass
    assert f"runs as uid {os.geteuid() + 1}, not as you" in caught.value.message
    assert "impersonating the app-server" in caught.value.hint


async def test_the_handshake_reports_the_socket_checks_and_the_server_version(folder: Path) -> None:
    async with fake_app_server(folder / "app.sock"):
        with anyio.fail_after(10):
            async with open_shared_app_server(env_for(folder / "app.sock")) as server:
                assert server.server_version == FAKE_VERSION
                assert server.socket.peer_check == f"uid {os.geteuid()} matches ours"
                assert server.socket.source == "REKALL_APP_SERVER_SOCKET"
                assert server.channel.max_message_bytes == 64 * 1024 * 1024  # the default bound


async def test_a_reply_that_is_not_json_fails_the_request_as_unknown_and_closes_the_client(folder: Path) -> None:
    async def garbage(ws: ServerConnection, message: dict) -> None:
        await ws.send("<html>not json</html>")

    async with fake_app_server(folder / "app.sock", garbage):
        with anyio.fail_after(10):
            async with open_shared_app_server(env_for(folder / "app.sock")) as server:
                with pytest.raises(AppServerClosed) as caught:
                    await server.request("thread/loaded/list")
                assert "not JSON" in caught.value.message and "unknown" in caught.value.hint
                with pytest.raises(AppServerClosed, match="not JSON"):
                    await server.request("thread/loaded/list")


async def test_a_message_that_is_not_an_object_closes_the_client(folder: Path) -> None:
    async def array(ws: ServerConnection, message: dict) -> None:
        await ws.send("[1, 2, 3]")

    async with fake_app_server(folder / "app.sock", array):
        with anyio.fail_after(10):
            async with open_shared_app_server(env_for(folder / "app.sock")) as server:
                with pytest.raises(AppServerClosed, match="not an object"):
                    await server.request("thread/loaded/list")


async def test_an_oversized_reply_is_refused_with_the_bound(folder: Path) -> None:
    async def huge(ws: ServerConnection, message: dict) -> None:
        await ws.send(json.dumps({"id": message["id"], "result": {"data": ["x" * 5000]}}))

    async with fake_app_server(folder / "app.sock", huge):
        with anyio.fail_after(10):
            async with open_shared_app_server(env_for(folder / "app.sock"), max_message_bytes=4096) as server:
                with pytest.raises(AppServerClosed, match="larger than 4096 bytes"):
                    await server.loaded_threads()


async def test_a_server_that_goes_away_fails_pending_requests_with_its_close_code(folder: Path) -> None:
    async def leave(ws: ServerConnection, message: dict) -> None:
        await ws.close(1001, "daemon stopping")

    async with fake_app_server(folder / "app.sock", leave):
        with anyio.fail_after(10):
            async with open_shared_app_server(env_for(folder / "app.sock")) as server:
                with pytest.raises(AppServerClosed) as caught:
                    await server.request("thread/read", {"threadId": "t"})
    assert caught.value.message == ("the app-server closed the WebSocket (code 1001: daemon stopping) "
                                    "before answering thread/read")
    assert caught.value.hint.startswith("the outcome is unknown")


class HeldReads(ByteStream):
    """rekall's socket, except that what arrives after :meth:`hold` reaches rekall's reader only
    once rekall sends its close frame: the reader has a message in hand while the client closes."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.peer_check = stream.peer_check
        self.holding = False
        self.in_hand = anyio.Event()
        self.closing = anyio.Event()

    def hold(self) -> None:
        self.holding = True

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self.stream.receive(max_bytes)
        if self.holding and data:
            self.in_hand.set()
            await self.closing.wait()
        return data

    async def send(self, data: bytes) -> None:
        if data[:1] == b"\x88":  # FIN + opcode 8: rekall's close frame
            self.closing.set()
            await anyio.lowlevel.checkpoint()  # the reader goes on with what it holds
        await self.stream.send(data)

    async def aclose(self) -> None:
        await self.stream.aclose()


async def test_a_notification_in_the_readers_hands_as_rekall_closes_is_dropped_not_raised(
        folder: Path, mocker: MockerFixture) -> None:
    # The flake against the real daemon (0.171.0 notifies each client right after `initialized`):
    # a notification read as the caller left the `async with` was delivered into the closed
    # message stream, and anyio.ClosedResourceError escaped the close.
    async def serve(ws: ServerConnection) -> None:
        async for raw in ws:
            message = json.loads(raw)
            if message.get("method") == "initialize":
                await ws.send(json.dumps({"id": message["id"], "result": {"userAgent": "fake/9.9.9 (test)"}}))
            elif message.get("method") == "initialized":
                await ws.send(json.dumps({"method": "configWarning", "params": {"summary": "like the daemon"}}))

    streams: list[HeldReads] = []

    async def open_held(stream: ByteStream, **kwargs: Any) -> WebSocketChannel:
        streams.append(HeldReads(stream))
        return await open_websocket(streams[-1], **kwargs)

    mocker.patch("rekall.adapters.app_server.client.open_websocket", open_held)
    async with unix_serve(serve, str(folder / "app.sock")):
        os.chmod(folder / "app.sock", 0o600)
        with anyio.fail_after(10):
            async with open_shared_app_server(env_for(folder / "app.sock")) as server:
                streams[0].hold()  # before any await: the notification cannot have been read yet
                await streams[0].in_hand.wait()
            with pytest.raises(AppServerClosed) as caught:
                await server.next_message()
    assert caught.value.message == "rekall closed its connection to the shared app-server"
