"""The WebSocket channel over rekall's Unix transport, against a real ``websockets`` server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.server import ServerConnection, unix_serve

from rekall.transports import FrameError, PeerMismatch, TransportError, UnixTransport
from rekall.transports.memory import memory_stream_pair
from rekall.transports.socketstream import serve_unix
from rekall.transports.websocket import open_websocket

pytestmark = pytest.mark.anyio

Handler = Callable[[ServerConnection], Awaitable[None]]


@pytest.fixture
def short_dir():
    """Socket paths must fit in sun_path (108 bytes), so keep them short."""
    path = Path(tempfile.mkdtemp(prefix="rkws", dir="/tmp"))
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@asynccontextmanager
async def ws_server(path: Path, handler: Handler) -> AsyncIterator[list[Any]]:
    """A websockets server on ``path``; yields the list of text messages it received."""
    received: list[Any] = []

    async def serve(connection: ServerConnection) -> None:
        async def collect() -> None:
            async for message in connection:
                received.append(json.loads(message))

        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            await handler(connection)
            await connection.wait_closed()
            tg.cancel_scope.cancel()

    async with unix_serve(serve, str(path), max_size=None):
        yield received


async def connect(path: Path, *, max_message_bytes: int = 1 << 20):
    stream = await UnixTransport(str(path)).connect()
    return await open_websocket(stream, where=str(path), max_message_bytes=max_message_bytes)


async def test_messages_go_both_ways_one_per_text_frame_with_fragments_reassembled(short_dir: Path) -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send(json.dumps({"method": "hello", "params": {"text": "héllo"}}))
        await ws.send(iter(['{"id":1,', '"result":', '{"ok":true}}']))  # one message, three frames

    with anyio.fail_after(10):
        async with ws_server(short_dir / "s", handler) as received:
            channel = await connect(short_dir / "s")
            assert channel.peer_check == f"uid {os.geteuid()} matches ours"
            await channel.send({"id": 7, "method": "initialize", "params": {"clientInfo": {"name": "rekall"}}})
            assert await channel.receive() == {"method": "hello", "params": {"text": "héllo"}}
            assert await channel.receive() == {"id": 1, "result": {"ok": True}}
            await channel.aclose()
    assert received == [{"id": 7, "method": "initialize", "params": {"clientInfo": {"name": "rekall"}}}]


async def test_a_clean_close_by_the_server_ends_receive_with_none_and_says_how(short_dir: Path) -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send('{"method":"last"}')
        await ws.close(1001, "going away")

    with anyio.fail_after(10):
        async with ws_server(short_dir / "s", handler):
            channel = await connect(short_dir / "s")
            assert await channel.receive() == {"method": "last"}
            assert await channel.receive() is None
            assert channel.close_description == "the app-server closed the WebSocket (code 1001: going away)"
            with pytest.raises(TransportError, match="closed"):
                await channel.send({"method": "late"})
            await channel.aclose()


async def test_a_text_frame_that_is_not_json_is_refused_by_name_after_the_good_ones(short_dir: Path) -> None:
    closed_with: list[int | None] = []

    async def handler(ws: ServerConnection) -> None:
        await ws.send('{"method":"fine"}')
        await ws.send("this is not json")
        await ws.wait_closed()
        closed_with.append(ws.close_code)

    with anyio.fail_after(10):
        async with ws_server(short_dir / "s", handler):
            channel = await connect(short_dir / "s")
            assert await channel.receive() == {"method": "fine"}
            with pytest.raises(FrameError, match="not JSON") as caught:
                await channel.receive()
            assert "this is not json" in caught.value.message and str(short_dir / "s") in caught.value.message
            await channel.aclose()
    assert closed_with == [1007]  # invalid frame payload data


async def test_a_text_frame_nested_too_deeply_to_decode_is_refused_not_raised_as_recursion(short_dir: Path) -> None:
    closed_with: list[int | None] = []

    async def handler(ws: ServerConnection) -> None:
        await ws.send("[" * 100_000 + "]" * 100_000)
        await ws.wait_closed()
        closed_with.append(ws.close_code)

    with anyio.fail_after(10):
        async with ws_server(short_dir / "s", handler):
            channel = await connect(short_dir / "s")
            with pytest.raises(FrameError, match="nests too deeply to decode"):
                await channel.receive()
            await channel.aclose()
    assert closed_with == [1007]


async def test_a_binary_frame_is_refused(short_dir: Path) -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send(b'{"method":"binary"}')

    with anyio.fail_after(10):
        async with ws_server(short_dir / "s", handler):
            channel = await connect(short_dir / "s")
            with pytest.raises(FrameError, match="binary WebSocket frame"):
                await channel.receive()
            await channel.aclose()


async def test_an_oversized_message_is_refused_and_the_server_told_1009(short_dir: Path) -> None:
    closed_with: list[int | None] = []

    async def handler(ws: ServerConnection) -> None:
        await ws.send(json.dumps({"method": "big", "params": {"pad": "x" * 4000}}))
        await ws.wait_closed()
        closed_with.append(ws.close_code)

    with anyio.fail_after(10):
        async with ws_server(short_dir / "s", handler):
            channel = await connect(short_dir / "s", max_message_bytes=1024)
            with pytest.raises(FrameError, match="larger than 1024 bytes"):
                await channel.receive()
            await channel.aclose()
    assert closed_with == [1009]


async def test_an_oversized_fragmented_message_is_refused_too(short_dir: Path) -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send(iter(["[" + '"x",' * 200, '"y",' * 200, '"z"]']))

    with anyio.fail_after(10):
        async with ws_server(short_dir / "s", handler):
            channel = await connect(short_dir / "s", max_message_bytes=1024)
            with pytest.raises(FrameError, match="larger than 1024 bytes"):
                await channel.receive()
            await channel.aclose()


async def test_sending_more_than_the_bound_is_refused_before_anything_is_written(short_dir: Path) -> None:
    with anyio.fail_after(10):
        async with ws_server(short_dir / "s", lambda ws: ws.wait_closed()) as received:
            channel = await connect(short_dir / "s", max_message_bytes=1024)
            with pytest.raises(FrameError, match="refusing to send a message of"):
                await channel.send({"pad": "x" * 2000})
            await channel.send({"small": True})
            await channel.aclose()
    assert received == [{"small": True}]


async def test_a_socket_that_does_not_speak_websocket_fails_the_handshake_clearly(short_dir: Path) -> None:
    async def not_http(stream) -> None:  # answers like the extension's length-prefixed router
        await stream.receive(65536)
        await stream.send(b"\x05\x00\x00\x00hello")
        await stream.aclose()

    server = await serve_unix(str(short_dir / "s"), not_http)
    try:
        with anyio.fail_after(10), pytest.raises(FrameError, match="WebSocket handshake with .* failed") as caught:
            await connect(short_dir / "s")
        assert "does not serve the Codex app-server protocol" in caught.value.hint
    finally:
        server.close()


async def test_the_peer_uid_check_of_the_unix_transport_still_applies(short_dir: Path) -> None:
    async with ws_server(short_dir / "s", lambda ws: ws.wait_closed()):
        transport = UnixTransport(str(short_dir / "s"), peer_uid_lookup=lambda sock: os.geteuid() + 1)
        with anyio.fail_after(10), pytest.raises(PeerMismatch, match="not as you"):
            await transport.connect()


def test_importing_the_transport_does_not_import_websockets() -> None:
    code = ("import sys, rekall.transports.websocket, rekall.transports.control_socket, rekall.adapters.app_server.client, "
            "rekall.surfaces.cli; print('websockets' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


async def serve_sans_io(stream, messages: list[bytes], cuts: list[int], chunk: int) -> None:
    """A server made of websockets' sans-I/O ServerProtocol: sends ``messages`` split at ``cuts``
    (as continuation frames) and writes the bytes in pieces of ``chunk``."""
    from websockets.server import ServerProtocol

    server = ServerProtocol(max_size=None)
    request: list[Any] = []
    while not request:
        server.receive_data(await stream.receive())
        request = server.events_received()
    server.send_response(server.accept(request[0]))
    for body in messages:
        parts = [body[i:j] for i, j in zip([0, *cuts], [*cuts, len(body)], strict=True) if j > i] or [body]
        server.send_text(parts[0], fin=len(parts) == 1)
        for n, part in enumerate(parts[1:], start=2):
            server.send_continuation(part, fin=n == len(parts))
    wire = b"".join(server.data_to_send())
    for start in range(0, len(wire), chunk):
        await stream.send(wire[start:start + chunk])


@given(messages=st.lists(JSON_VALUES, min_size=1, max_size=5),
       cuts=st.lists(st.integers(1, 200), max_size=4, unique=True),
       chunk=st.integers(1, 300))
@settings(max_examples=60, deadline=None)
def test_any_messages_in_any_fragments_and_read_sizes_arrive_whole_and_in_order(messages, cuts, chunk) -> None:
    bodies = [json.dumps(m, ensure_ascii=False).encode() for m in messages]

    async def run() -> list[Any]:
        client_end, server_end = memory_stream_pair()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve_sans_io, server_end, bodies, sorted(cuts), chunk)
                channel = await open_websocket(client_end, where="memory", max_message_bytes=1 << 20)
                return [await channel.receive() for _ in bodies]

    assert anyio.run(run) == messages


async def test_the_handshake_offers_no_extension_so_a_server_that_would_compress_does_not(short_dir: Path) -> None:
    # The websockets server accepts permessage-deflate when offered (its default); Codex 0.155 and
    # older drop a handshake that offers it. The client offers none, and none is negotiated.
    offered: list[list[str]] = []

    async def handler(ws: ServerConnection) -> None:
        offered.append(ws.request.headers.get_all("Sec-WebSocket-Extensions"))
        await ws.send(json.dumps({"extensions": [e.name for e in ws.protocol.extensions]}))

    with anyio.fail_after(10):
        async with ws_server(short_dir / "s", handler):
            channel = await connect(short_dir / "s")
            assert await channel.receive() == {"extensions": []}
            assert channel.protocol.extensions == []
            await channel.aclose()
    assert offered == [[]]
