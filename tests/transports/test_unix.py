from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import anyio
import pytest

from rekall.transports import (EndpointMissing, MessageChannel, PeerMismatch, TransportError, UnixTransport, encode_message,
                               peer_uid)


@pytest.fixture
def sock_path():
    root = Path(tempfile.mkdtemp(prefix="rk", dir="/tmp"))
    yield str(root / "s.sock")
    shutil.rmtree(root, ignore_errors=True)


async def echo_server(path: str):
    async def handle(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(handle, path)


@pytest.mark.anyio
async def test_the_peer_uid_of_a_real_socket_is_ours(sock_path):
    server = await echo_server(sock_path)
    async with server:
        stream = await UnixTransport(sock_path).connect()
        try:
            assert stream.peer_check == f"uid {os.geteuid()} matches ours"
            await stream.send(b"ping")
            with anyio.fail_after(5):
                assert await stream.receive() == b"ping"
        finally:
            await stream.aclose()


@pytest.mark.anyio
async def test_a_peer_running_as_another_user_is_refused(sock_path):
    server = await echo_server(sock_path)
    async with server:
        transport = UnixTransport(sock_path, peer_uid_lookup=lambda sock: os.geteuid() + 7)
        with pytest.raises(PeerMismatch) as caught:
            await transport.connect()
    assert f"runs as uid {os.geteuid() + 7}, not as you" in caught.value.message
    assert caught.value.code == "peer_uid_mismatch"


@pytest.mark.anyio
async def test_a_peer_whose_uid_cannot_be_read_is_refused(sock_path):
    def broken(sock):
        raise OSError(95, "not supported")

    server = await echo_server(sock_path)
    async with server:
        with pytest.raises(PeerMismatch, match="cannot verify"):
            await UnixTransport(sock_path, peer_uid_lookup=broken).connect()


@pytest.mark.anyio
async def test_nothing_listening_is_endpoint_missing(sock_path):
    with pytest.raises(EndpointMissing, match=sock_path):
        await UnixTransport(sock_path).connect()


@pytest.mark.anyio
async def test_receive_returns_empty_bytes_when_the_peer_closes_and_send_after_close_fails(sock_path):
    closed = asyncio.Event()

    async def handle(reader, writer):
        writer.close()
        closed.set()

    server = await asyncio.start_unix_server(handle, sock_path)
    async with server:
        stream = await UnixTransport(sock_path).connect()
        with anyio.fail_after(5):
            await closed.wait()
            assert await stream.receive() == b""
        await stream.aclose()
        await stream.aclose()  # idempotent
        with pytest.raises(TransportError):
            await stream.send(b"x")


@pytest.mark.anyio
async def test_a_message_channel_carries_json_both_ways_over_a_real_socket(sock_path):
    server = await echo_server(sock_path)
    async with server:
        channel = MessageChannel(await UnixTransport(sock_path).connect())
        big = {"blob": "é" * 700_000}  # over the threaded-decode threshold
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:  # send while reading: the echo would block
                tg.start_soon(channel.send, {"type": "request", "n": 1})
                tg.start_soon(channel.send, big)
                assert await channel.receive() == {"type": "request", "n": 1}
                assert await channel.receive() == big
        await channel.aclose()


def test_peer_uid_reads_so_peercred_from_a_socketpair():
    import socket

    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert peer_uid(a) == os.geteuid()


@pytest.mark.anyio
async def test_a_message_says_when_its_frame_arrived_and_frames_read_together_arrived_together(sock_path):
    server = await echo_server(sock_path)
    async with server:
        channel = MessageChannel(await UnixTransport(sock_path).connect())
        try:
            assert channel.received_at is None
            before = time.monotonic()
            # one write, two frames: the echo returns them in one read
            await channel.send_raw(encode_message({"n": 1}) + encode_message({"n": 2}))
            with anyio.fail_after(5):
                assert await channel.receive() == {"n": 1}
                first_at, returned = channel.received_at, time.monotonic()
                await anyio.sleep(0.01)  # the second is taken later, but arrived with the first
                assert await channel.receive() == {"n": 2}
            assert before <= first_at <= returned
            assert channel.received_at == first_at
        finally:
            await channel.aclose()


def test_a_blocking_connect_makes_the_same_checks_as_the_event_loops(sock_path):
    def broken(sock):
        raise OSError(95, "not supported")

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with server:
        server.bind(sock_path)
        server.listen()
        sock, check = UnixTransport(sock_path).connect_blocking()
        sock.close()
        assert check == f"uid {os.geteuid()} matches ours"
        with pytest.raises(PeerMismatch) as caught:
            UnixTransport(sock_path, peer_uid_lookup=lambda sock: os.geteuid() + 7).connect_blocking()
        assert f"runs as uid {os.geteuid() + 7}, not as you" in caught.value.message
        with pytest.raises(PeerMismatch, match="cannot verify"):
            UnixTransport(sock_path, peer_uid_lookup=broken).connect_blocking()
    os.unlink(sock_path)
    with pytest.raises(EndpointMissing, match=sock_path):
        UnixTransport(sock_path).connect_blocking()


@pytest.mark.anyio
async def test_a_message_sent_now_is_in_the_peers_socket_when_the_call_returns_unless_the_peer_is_behind(sock_path):
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sock_path)
    listener.listen(1)
    stream = await UnixTransport(sock_path).connect()
    channel = MessageChannel(stream)
    peer, _ = listener.accept()  # queued by the connect: no event loop turn is needed
    with listener, peer:
        peer.settimeout(5)
        # Nothing is awaited between the call and the read: the frame left in the call.
        assert channel.send_now({"type": "request", "n": 1}) is True
        assert peer.recv(65536) == encode_message({"type": "request", "n": 1})
        stream.pause_writing()  # what the event loop says when the peer stops reading
        assert channel.send_now({"n": 2}) is False  # nothing written: ``send`` writes and waits
        peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            peer.recv(65536)
        stream.resume_writing()
        await channel.aclose()
        with pytest.raises(TransportError):
            channel.send_now({"n": 3})
