from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rekall.transports.framing import (
    MAX_FRAME_BYTES,
    FrameDecoder,
    FrameError,
    decode_body,
    encode_frame,
    encode_message,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)


def test_a_frame_is_a_little_endian_length_then_the_utf8_body():
    frame = encode_message({"k": "é"})
    assert frame[:4] == struct.pack("<I", len(frame) - 4)
    assert frame[4:] == '{"k":"é"}'.encode()


def test_a_header_split_two_and_two_bytes_is_reassembled_like_the_node_fake_sends_it():
    frame = encode_message({"type": "broadcast"})
    decoder = FrameDecoder()
    assert decoder.feed(frame[:2]) == []
    assert decoder.feed(frame[2:4]) == []
    assert [decode_body(b) for b in decoder.feed(frame[4:])] == [{"type": "broadcast"}]
    assert decoder.pending_bytes == 0


@pytest.mark.parametrize("length", [0, MAX_FRAME_BYTES + 1, 2**32 - 1])
def test_zero_and_oversize_lengths_are_refused_and_poison_the_decoder(length):
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match=f"invalid IPC frame length {length}"):
        decoder.feed(struct.pack("<I", length) + b"xx")
    with pytest.raises(FrameError):  # the stream cannot be resynchronised afterwards
        decoder.feed(encode_message({}))


def test_the_largest_allowed_length_is_accepted_as_a_header():
    decoder = FrameDecoder()
    assert decoder.feed(struct.pack("<I", MAX_FRAME_BYTES)) == []
    assert decoder.pending_bytes == 0  # no buffer is held for a body that has not started


def test_encoding_an_empty_body_is_refused():
    with pytest.raises(FrameError):
        encode_frame(b"")


def test_invalid_utf8_and_invalid_json_are_frame_errors_that_say_which():
    with pytest.raises(FrameError, match="not valid UTF-8"):
        decode_body(b"\xff\xfe")
    with pytest.raises(FrameError, match="not valid JSON"):
        decode_body(b"{nope")


def test_a_large_body_fed_in_small_pieces_is_copied_into_one_preallocated_buffer():
    body = b"x" * 1_000_000
    frame = encode_frame(body)
    decoder = FrameDecoder()
    out = []
    for start in range(0, len(frame), 4096):
        out += decoder.feed(frame[start:start + 4096])
    assert out == [bytearray(body)]


@settings(max_examples=150, deadline=None)
@given(messages=st.lists(json_values, min_size=1, max_size=8), data=st.data())
def test_frames_round_trip_under_arbitrary_chunking(messages, data):
    stream = b"".join(encode_message(m) for m in messages)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    decoder = FrameDecoder()
    decoded = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        decoded += [decode_body(body) for body in decoder.feed(stream[previous:cut])]
        previous = cut
    assert decoded == messages
    assert decoder.pending_bytes == 0


@settings(max_examples=150, deadline=None)
@given(messages=st.lists(json_values, min_size=1, max_size=8), data=st.data(),
       scratch=st.sampled_from([8, 64, 4096]))
def test_receiving_in_place_round_trips_under_arbitrary_receive_sizes(messages, data, scratch):
    stream = b"".join(encode_message(m) for m in messages)
    decoder = FrameDecoder(scratch_bytes=scratch)  # tiny scratch: most frames take the large-body path
    decoded, pos = [], 0
    while pos < len(stream):
        target = decoder.buffer()
        assert len(target) > 0
        count = min(len(target), len(stream) - pos, data.draw(st.integers(1, 64)))
        target[:count] = stream[pos:pos + count]  # what recv_into does
        pos += count
        decoded += [decode_body(view) for view in decoder.commit(count)]  # views: decode before buffer()
    assert decoded == messages and decoder.pending_bytes == 0


def test_a_large_body_is_received_straight_into_its_own_buffer_which_is_reused():
    decoder = FrameDecoder(scratch_bytes=1024)
    frame = encode_frame(b"y" * 10_000)
    buffers = set()
    for _ in range(2):
        got, pos = [], 0
        while pos < len(frame):
            target = decoder.buffer()
            count = min(len(target), 3000, len(frame) - pos)
            target[:count] = frame[pos:pos + count]
            pos += count
            got += decoder.commit(count)
        assert [bytes(view) for view in got] == [b"y" * 10_000]
        buffers.add(id(got[0].obj))
    assert len(buffers) == 1  # the second body of that size reused the first one's buffer


def test_a_decoding_error_says_where_once():
    with pytest.raises(FrameError) as caught:
        decode_body(b'{"a": "\x01"}')
    assert "Invalid control character at offset 7" in caught.value.message and " at at " not in caught.value.message
