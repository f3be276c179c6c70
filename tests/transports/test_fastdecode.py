"""Large frame bodies go through msgspec, and decode exactly as ``json.loads`` decodes them.

``reference`` is the json-only path (the large-body threshold out of reach), ``fast`` the
msgspec path forced on every body (threshold 0); ``outcome`` records a value exactly (types,
float bits, key order) or an error's type and message.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rekall.transports import framing
from rekall.transports.fastdecode import REFUSED, decode_large
from rekall.transports.framing import LARGE_BODY_BYTES, FrameDecoder, FrameError, decode_body, encode_frame


def exact(value: Any) -> Any:
    """A form of a JSON value in which 0.0 and -0.0, 1 and 1.0 and True, and key order differ."""
    if isinstance(value, dict):
        return ("dict", [(key, exact(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [exact(item) for item in value])
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    return (type(value).__name__, value)


def outcome(body: bytes) -> Any:
    try:
        return ("value", exact(decode_body(body)))
    except Exception as exc:  # the error is part of the behaviour: its type and its words
        return ("error", type(exc).__name__, str(exc), getattr(exc, "hint", None))


def reference(body: bytes) -> Any:
    with mock.patch.object(framing, "LARGE_BODY_BYTES", 1 << 62):
        return outcome(body)


def fast(body: bytes) -> Any:
    with mock.patch.object(framing, "LARGE_BODY_BYTES", 0):
        return outcome(body)


# -- what the bodies are made of --------------------------------------------------------------

class Raw(str):
    """A number literal written as it is."""


class Pairs(list):
    """An object written pair by pair: keys may repeat."""


any_text = st.text(st.characters(blacklist_categories=()), max_size=12)  # lone surrogates included
numbers = (st.integers() | st.integers(-(10**40), 10**40) | st.floats()
           | st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][-+]?[0-9]{1,4})?", fullmatch=True)
           .map(lambda literal: Raw(literal)))
values = st.recursive(
    st.none() | st.booleans() | numbers | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.lists(st.tuples(any_text | st.sampled_from("ab"), inner), max_size=4)
    .map(Pairs),
    max_leaves=25,
)


def write(value: Any, ascii_only: bool, space: str) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Pairs):
        return "{" + space + ("," + space).join(
            json.dumps(key, ensure_ascii=ascii_only) + space + ":" + space + write(item, ascii_only, space)
            for key, item in value) + space + "}"
    if isinstance(value, list):
        return "[" + space + ("," + space).join(write(item, ascii_only, space) for item in value) + space + "]"
    return json.dumps(value, ensure_ascii=ascii_only)  # NaN, Infinity and lone surrogates as json writes them


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    text = write(draw(values), draw(st.booleans()), draw(st.sampled_from(["", " ", "\n\t", "\r\n "])))
    body = text.encode("utf-8", "surrogatepass")  # a raw lone surrogate is invalid UTF-8: both must refuse it
    for _ in range(draw(st.integers(0, 2))):  # and a few broken bodies: a byte changed, dropped or added
        at = draw(st.integers(0, len(body)))
        byte = bytes([draw(st.integers(0, 255))])
        body = draw(st.sampled_from([body[:at] + byte + body[at + 1:], body[:at] + body[at + 1:],
                                     body[:at] + byte + body[at:]]))
    return body


@settings(max_examples=600, deadline=None)
@given(body=bodies())
def test_a_large_body_decodes_to_the_value_or_the_error_json_loads_gives(body):
    assert fast(body) == reference(body)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=40))
def test_any_bytes_decode_to_the_value_or_the_error_json_loads_gives(body):
    assert fast(body) == reference(body)


@pytest.mark.parametrize("body", [
    b'"\\ud83d"', b'["\\ude00\\ud83d", "\\ud83d x"]', b"NaN", b"[Infinity, -Infinity]", b"1e400",
    b'{"n": -1.7976931348623159e308}',
], ids=["lone-high", "reversed-pair", "nan", "infinity", "1e400", "beyond-double"])
def test_what_msgspec_refuses_and_json_loads_accepts_still_parses_in_a_large_body(body):
    assert decode_large(body) is REFUSED  # so this is the fallback at work
    padded = body + b" " * LARGE_BODY_BYTES  # the real threshold, no patching
    assert exact(decode_body(padded)) == exact(json.loads(body))


@pytest.mark.parametrize("padding", [0, LARGE_BODY_BYTES], ids=["small-body", "large-body"])
def test_an_integer_of_json_loads_digit_limit_parses_and_one_digit_more_is_a_frame_error(padding):
    assert decode_body(b"7" * 4300 + b" " * padding) == int("7" * 4300)
    with pytest.raises(FrameError, match="an integer of more than 4300 digits"):
        decode_body(b"[1, " + b"1" * 4301 + b"]" + b" " * padding)


def test_duplicate_keys_keep_the_first_place_and_the_last_value_like_json_loads():
    body = b'{"a": 1, "b": 2, "a": 3}' + b" " * LARGE_BODY_BYTES
    assert decode_large(body) is not REFUSED
    assert list(decode_body(body).items()) == [("a", 3), ("b", 2)]


def test_invalid_utf8_in_a_large_body_is_the_frame_error_that_names_the_byte():
    body = b'{"text": "' + b"x" * LARGE_BODY_BYTES + b'\xed\xa0\xbd"}'  # an encoded surrogate
    with pytest.raises(FrameError, match=f"not valid UTF-8 \\(byte {LARGE_BODY_BYTES + 10} of {len(body)}\\)"):
        decode_body(body)


def _nested(kind: str, depth: int) -> bytes:
    return b"[" * depth + b"]" * depth if kind == "list" else b'{"a":' * depth + b"1" + b"}" * depth


def _walk(kind: str, value: Any, depth: int) -> bool:
    """Whether ``value`` is exactly what _nested(kind, depth) says (without recursing)."""
    for _ in range(depth - 1 if kind == "list" else depth):
        if (kind == "list" and (type(value) is not list or len(value) != 1)) or \
                (kind == "object" and (type(value) is not dict or list(value) != ["a"])):
            return False
        value = value[0] if kind == "list" else value["a"]
    return value == [] if kind == "list" else (type(value) is int and value == 1)


def _nesting_outcome(kind: str, depth: int, threshold: int) -> Any:
    with mock.patch.object(framing, "LARGE_BODY_BYTES", threshold):
        try:
            value = decode_body(_nested(kind, depth))
        except FrameError as exc:
            return ("error", exc.message, exc.hint)
    return ("value", _walk(kind, value, depth))


def _nesting_agrees(kind: str) -> list[int]:
    json_only, msgspec_first = 1 << 62, 0
    low, high = 1, 100_000  # the deepest body json.loads parses here
    while low < high:
        middle = (low + high + 1) // 2
        if _nesting_outcome(kind, middle, json_only)[0] == "value":
            low = middle
        else:
            high = middle - 1
    assert _nesting_outcome(kind, low, json_only) == ("value", True)
    assert _nesting_outcome(kind, low + 1, json_only)[1] == "IPC frame nests too deeply to decode"
    return [depth for depth in range(low - 30, low + 5)
            if _nesting_outcome(kind, depth, msgspec_first) != _nesting_outcome(kind, depth, json_only)]


@pytest.mark.parametrize("kind", ["list", "object"])
def test_nesting_near_the_recursion_limit_parses_or_fails_exactly_where_json_loads_does(kind):
    assert _nesting_agrees(kind) == []
    on_a_thread: list[list[int]] = []  # where MessageChannel decodes large bodies
    worker = threading.Thread(target=lambda: on_a_thread.append(_nesting_agrees(kind)))
    worker.start()
    worker.join(timeout=120)
    assert on_a_thread == [[]]


def test_a_body_larger_than_the_kept_buffer_arrives_whole_in_its_own_memory_and_decodes():
    message = {"params": {"text": "é" * (FrameDecoder.KEEP_BIG_BUFFER_BYTES // 2), "n": [1, 2.5, None]}}
    frame = encode_frame(json.dumps(message, ensure_ascii=False).encode())
    decoder, got, pos = FrameDecoder(), [], 0
    while pos < len(frame):  # as recv_into does, in socket-sized pieces
        target = decoder.buffer()
        count = min(len(target), 200_000, len(frame) - pos)
        target[:count] = frame[pos:pos + count]
        pos += count
        got += decoder.commit(count)
    assert len(got) == 1 and len(got[0]) == len(frame) - 4
    assert decode_body(got[0]) == message


@pytest.mark.parametrize("body", [b'{"a": [1, {"b": "c"}]}', b"NaN"], ids=["parsed", "refused"])
def test_a_large_body_leaves_the_garbage_collector_as_it_found_it(body):
    import gc

    assert gc.isenabled()
    decode_large(body)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()  # someone else's choice is kept
    try:
        decode_large(body)
        assert not gc.isenabled()
    finally:
        gc.enable()
    kept = [{"frozen": "by someone else"}]
    gc.freeze()  # and so are objects someone else froze
    try:
        frozen = gc.get_freeze_count()
        decode_large(body)
        # unfreezing would have emptied it (a frozen object that dies leaves it: the count may drop a little)
        assert gc.get_freeze_count() > frozen // 2 > 0 and gc.isenabled()
    finally:
        gc.unfreeze()
    assert kept
