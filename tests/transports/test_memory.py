from __future__ import annotations

import anyio
import pytest

from rekall.testing import MemoryTransport, memory_stream_pair
from rekall.transports import MessageChannel, TransportError, encode_message


@pytest.mark.anyio
async def test_memory_streams_deliver_bytes_in_order_and_split_on_max_bytes():
    a, b = memory_stream_pair()
    await a.send(b"hello")
    await a.send(b"world")
    with anyio.fail_after(5):
        assert await b.receive(3) == b"hel"
        assert await b.receive() == b"lo"
        assert await b.receive() == b"world"
    assert a.sent == [b"hello", b"world"]


@pytest.mark.anyio
async def test_closing_one_end_gives_the_other_eof_and_refuses_sends():
    a, b = memory_stream_pair()
    await a.aclose()
    with anyio.fail_after(5):
        assert await b.receive() == b""
    with pytest.raises(TransportError):
        await b.send(b"x")


@pytest.mark.anyio
async def test_a_memory_transport_hands_each_connection_to_the_server_callback():
    async def serve(stream):
        channel = MessageChannel(stream)
        while (message := await channel.receive()) is not None:
            await channel.send({"echo": message})

    transport = MemoryTransport(serve)
    channel = MessageChannel(await transport.connect())
    with anyio.fail_after(5):
        await channel.send({"n": 1})
        assert await channel.receive() == {"echo": {"n": 1}}
    assert transport.connections == 1
    await channel.aclose()
    await transport.aclose()


@pytest.mark.anyio
async def test_without_a_callback_the_server_end_is_accepted_explicitly():
    transport = MemoryTransport()
    client = await transport.connect()
    with anyio.fail_after(5):
        server = await transport.accept()
        await server.send(encode_message({"type": "broadcast"}))
        assert await MessageChannel(client).receive() == {"type": "broadcast"}


@pytest.mark.anyio
async def test_a_refusing_memory_transport_raises_a_transport_error():
    transport = MemoryTransport()
    transport.refuse = "router gone"
    with pytest.raises(TransportError, match="router gone"):
        await transport.connect()
