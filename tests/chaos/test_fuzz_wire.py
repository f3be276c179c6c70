"""Hostile bytes and messages on the IPC path (hypothesis, bounded).

tests/transports and tests/adapters already check well-formed traffic (round trips under any
chunking; the incremental mirror against the naive facts on thread-shaped patch streams).
Here the input is hostile: any bytes, any JSON, any state and any patch, and a live session
fed messages no extension would send. The rule everywhere: a clear rekall error or a
resync, never an unexpected exception, and never a wrong fact.
"""

from __future__ import annotations

import asyncio
import copy
import json
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rekall.kernel import events as ev
from rekall.adapters.extension import connect_thread, ipc
from rekall.thread import PatchError, RevisionGap, ThreadMirror, derive_facts
from rekall.thread.patches import MISSING
from rekall.sim import SimulatedOwner
from rekall.sim import protocol as p
from rekall.testing import MemoryTransport
from rekall.transports.framing import HEADER_BYTES, MAX_FRAME_BYTES, FrameDecoder, FrameError, decode_body, encode_frame
from tests.chaos.ledger import LEDGER
from tests.chaos.strategies import json_values

pytestmark = pytest.mark.chaos

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KNOWN_STATE = p.TABLES[p.DEFAULT_GENERATION][p.STATE_CHANGED]


# --- frames ----------------------------------------------------------------------------------

def naive_frames(data: bytes) -> tuple[list[bytes], bool]:
    """The frames a byte stream holds, and whether a bad header comes before its end."""
    frames, pos = [], 0
    while len(data) - pos >= HEADER_BYTES:
        (length,) = struct.unpack_from("<I", data, pos)
        if length == 0 or length > MAX_FRAME_BYTES:
            return frames, True
        if len(data) - pos - HEADER_BYTES < length:
            break
        frames.append(data[pos + HEADER_BYTES:pos + HEADER_BYTES + length])
        pos += HEADER_BYTES + length
    return frames, False


pieces = st.one_of(
    st.binary(min_size=1, max_size=80).map(encode_frame),  # a valid frame (any body)
    st.binary(max_size=12),  # loose garbage
    st.sampled_from([b"\x00\x00\x00\x00", struct.pack("<I", MAX_FRAME_BYTES + 1), b"\xff\xff\xff\xff"]),
)


def fed_in_chunks(data: bytes, cuts: list[int], scratch: int) -> tuple[list[bytes], bool]:
    """What ``FrameDecoder`` returns when ``data`` arrives in pieces of the given sizes."""
    decoder = FrameDecoder(scratch_bytes=scratch)  # small scratch buffers exercise the large-frame path
    got: list[bytes] = []
    pos = 0
    chunks = iter(cuts)
    while pos < len(data):
        size = next(chunks, len(data))
        try:
            got += decoder.feed(data[pos:pos + size])
        except FrameError:
            return got, True
        pos += size
    try:
        decoder.buffer()  # where the next read would go: a stored error surfaces here
    except FrameError:
        return got, True
    return got, False


byte_streams = st.lists(pieces, max_size=12).map(b"".join)
chunkings = st.lists(st.integers(1, 40), max_size=30)
scratch_sizes = st.sampled_from([16, 64, 256 * 1024])


@FUZZ
@given(data=byte_streams, cuts=chunkings, scratch=scratch_sizes)
def test_the_frame_decoder_agrees_with_a_naive_decoder_on_any_bytes(data, cuts, scratch):
    # Every frame before a bad header is delivered, then the error: the owner's last good
    # message is not lost because garbage followed it in the same read.
    assert fed_in_chunks(data, cuts, scratch) == naive_frames(data)


@FUZZ
@given(body=st.one_of(st.binary(min_size=1, max_size=60), json_values.map(lambda v: json.dumps(v).encode())))
def test_a_frame_body_is_json_or_a_frame_error(body):
    try:
        expected = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        with pytest.raises(FrameError):
            decode_body(body)
    else:
        assert decode_body(body) == expected


# --- messages --------------------------------------------------------------------------------

THREAD = "0199a5c2-3333-4000-8000-000000000003"
OWNER = "owner-1"

hostile_messages = st.one_of(
    json_values,
    st.fixed_dictionaries({"type": st.sampled_from(["response", "broadcast", "request", "client-discovery-request",
                                                    "nonsense"])},
                          optional={"requestId": json_values, "resultType": json_values, "error": json_values,
                                    "method": st.sampled_from([p.STATE_CHANGED, p.FOLLOWING_STATUS_REQUESTED, "x"])
                                    | json_values,
                                    "version": st.sampled_from([KNOWN_STATE, KNOWN_STATE + 1, 1]) | json_values,
                                    "sourceClientId": st.sampled_from([OWNER, "other"]) | json_values,
                                    "params": json_values | st.fixed_dictionaries(
                                        {"conversationId": st.just(THREAD), "hostId": st.just(p.HOST_ID)},
                                        optional={"change": json_values})}),
)


@FUZZ
@given(message=hostile_messages, owner=st.sampled_from([OWNER, None]), adapter=st.sampled_from(ipc.ADAPTERS))
def test_classifying_any_message_gives_a_meaning_never_an_exception(message, owner, adapter):
    inbound = adapter.classify(message, thread_id=THREAD, owner_id=owner)
    assert isinstance(inbound, (adapter.Response, adapter.StateChange, adapter.UnknownVersion,
                                adapter.FollowStatusRequested, adapter.ForeignState, adapter.Reply, adapter.Ignored))


patches = st.lists(st.one_of(
    json_values,
    st.fixed_dictionaries({"op": st.sampled_from(["add", "replace", "remove", "move"]),
                           "path": st.lists(st.one_of(st.text(max_size=6), st.integers(-2, 5), st.just("-")),
                                            max_size=4)},
                          optional={"value": json_values}),
), max_size=4) | json_values


@FUZZ
@given(state=json_values, batches=st.lists(patches, max_size=5))
def test_the_mirror_survives_any_snapshot_and_any_patches_without_a_wrong_fact(state, batches):
    mirror = ThreadMirror()
    mirror.load_snapshot(copy.deepcopy(state), 1)
    assert mirror.facts == derive_facts(state)
    for revision, batch in enumerate(batches, start=2):
        before, facts = copy.deepcopy(mirror.state), mirror.facts
        try:
            mirror.apply_patches(copy.deepcopy(batch), base_revision=revision - 1, revision=revision)
        except (PatchError, RevisionGap):
            assert mirror.state == before and mirror.facts == facts  # all or nothing
            mirror.load_snapshot(before, revision)  # what a resync does
        assert mirror.facts == derive_facts(mirror.state if mirror.has_state else MISSING)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(hostile_messages, min_size=1, max_size=8), data=st.data())
def test_a_live_session_fed_hostile_messages_keeps_the_truth_or_says_why_it_stopped(messages, data):
    asyncio.run(_hostile_session(messages, data))


async def _hostile_session(messages: list[Any], data: Any) -> None:
    async with SimulatedOwner(runtime="active") as sim:
        servers = []
        handled = asyncio.Condition()

        async def serve(stream: Any) -> None:
            servers.append(stream)
            await sim.serve_stream(stream)

        def tap(direction: str, message: Any) -> None:
            if direction == "handled":
                asyncio.get_running_loop().create_task(_notify(handled))

        session = await connect_thread(sim.thread_id, transport=MemoryTransport(serve=serve), request_timeout_s=1.0,
                                       env=sim.pin, tap=tap)
        seen: list[Any] = []

        async def collect() -> None:
            async for event in session.events():
                seen.append(event)

        collector = asyncio.create_task(collect())
        try:
            for message in messages:
                await servers[-1].send(frame_of(_aimed(message, sim, data)))
            LEDGER.fault("hostile IPC message", len(messages))
            sim.backend.complete_turn("completed")  # a real change after the noise, then the whole truth
            sim.publish_snapshot()
            async with asyncio.timeout(5), handled:
                # Every handled message wakes us; stop once the mirror holds the owner's state, or
                # once the session gave up on the connection.
                await handled.wait_for(lambda: not session.connected or session.mirror.state == sim.backend.state)
            if session.connected:
                assert session.mirror.facts == derive_facts(sim.backend.state)
        finally:
            await session.aclose()
            await collector
        lost = [e.detail for e in seen if isinstance(e, ev.ConnectionLost)]
        assert not [detail for detail in lost if detail.startswith("internal error")], lost


async def _notify(condition: asyncio.Condition) -> None:
    async with condition:
        condition.notify_all()


def _aimed(message: Any, sim: SimulatedOwner, data: Any) -> Any:
    """Point some messages at the live session: our thread, our owner's id, the adapter's version."""
    if not (isinstance(message, dict) and message.get("type") == "broadcast" and data.draw(st.booleans())):
        return message
    change = data.draw(st.one_of(
        json_values,
        st.fixed_dictionaries({"type": st.just("snapshot"), "revision": json_values,
                               "conversationState": json_values}),
        st.fixed_dictionaries({"type": st.just("patches"), "baseRevision": json_values, "revision": json_values,
                               "patches": patches}),
    ))
    return {**message, "sourceClientId": sim.owner_id, "method": p.STATE_CHANGED, "version": p.TABLES[p.DEFAULT_GENERATION][p.STATE_CHANGED],
            "params": {"conversationId": sim.thread_id, "hostId": p.HOST_ID, "change": change}}


def frame_of(message: Any) -> bytes:
    return encode_frame(json.dumps(message).encode("utf-8"))
