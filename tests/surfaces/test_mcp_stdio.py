"""stdio for `rekall mcp`: every malformed line gets the JSON-RPC error it calls for."""

from __future__ import annotations

import io
import json

import pytest

from rekall.surfaces.mcp_stdio import INVALID_REQUEST, PARSE_ERROR, CheckedLines, LineWriter, check_line

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"{broken", (None, PARSE_ERROR)),
        (b"\xff\xfe", (None, PARSE_ERROR)),
        (b"42", (None, INVALID_REQUEST)),
        (b'{"jsonrpc":"2.0","id":14,"method":"tools/call","params":[1,2]}', (14, INVALID_REQUEST)),
        (b'{"jsonrpc":"1.0","id":"a","method":"ping"}', ("a", INVALID_REQUEST)),
        (b'{"jsonrpc":"2.0","id":4,"method":5}', (4, INVALID_REQUEST)),
        (b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"arguments":' + b"[" * 1500 + b"]" * 1500 + b"}}",
         (5, INVALID_REQUEST)),
        (b'{"jsonrpc":"2.0","method":"ping","params":{"a":' + b"{}" * 10 + b"[" * 100_000, (None, INVALID_REQUEST)),
        (b'{"jsonrpc":"2.0","id":6,"method":"ping","params":{"a":"\x01"}}', (None, PARSE_ERROR)),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}', (None, INVALID_REQUEST)),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', (None, INVALID_REQUEST)),
        (b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', (None, INVALID_REQUEST)),
        (b'{"jsonrpc":"2.0","id":8,"method":"ping","params":{"a":1,"a":2}}', (8, INVALID_REQUEST)),
    ],
)
def test_a_malformed_line_is_answered_with_its_id_when_one_can_be_read(line, expected):
    text, problem = check_line(line)
    assert text is None
    assert problem[:2] == expected
    assert problem[2].startswith(("Parse error", "Invalid Request"))
    assert " at at " not in problem[2]


def test_nesting_is_refused_before_decoding_while_deep_text_inside_strings_is_not_nesting():
    deep = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"a":' + b"[" * 65 + b"]" * 65 + b"}}"
    assert "nested deeper than 64 levels" in check_line(deep)[1][2]
    text = '{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":"' + "[" * 5000 + '"}}'
    assert check_line(text.encode()) == (text, None)


def test_a_valid_message_passes_through_unchanged():
    line = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    assert check_line(line) == (line.decode(), None)


async def test_an_overlong_line_is_refused_and_the_next_line_still_served():
    wire_out = io.BytesIO()
    writer = LineWriter(wire_out)
    good = b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n'
    lines = CheckedLines(io.BytesIO(b"x" * 300 + b"\n" + b"\n" + good), writer, max_line_bytes=100, drain_s=0)
    passed = [line async for line in lines]
    assert passed == [good.decode()]
    reply, unanswered = map(json.loads, wire_out.getvalue().splitlines())
    assert reply["id"] is None and reply["error"]["code"] == INVALID_REQUEST
    assert "longer than 100 bytes" in reply["error"]["message"]
    # Nothing answered the ping before stdin closed: it gets an error rather than silence.
    assert unanswered["id"] == 2 and "stdin closed" in unanswered["error"]["message"]


async def test_an_overlong_line_is_answered_with_its_id_when_it_comes_before_params():
    wire_out = io.BytesIO()
    long_call = b'{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"a":"' + b"x" * 300 + b'"}}\n'
    lines = CheckedLines(io.BytesIO(long_call), LineWriter(wire_out), max_line_bytes=100, drain_s=0)
    assert [line async for line in lines] == []
    reply = json.loads(wire_out.getvalue())
    assert reply["id"] == 31 and reply["error"]["code"] == INVALID_REQUEST


async def test_a_request_before_initialize_is_told_to_initialize_first_while_ping_and_initialize_pass():
    wire_out = io.BytesIO()
    sent = [b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n', b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n',
            b'{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}\n',
            b'{"jsonrpc":"2.0","id":4,"method":"tools/list"}\n']
    lines = CheckedLines(io.BytesIO(b"".join(sent)), LineWriter(wire_out), drain_s=0)
    passed = [line async for line in lines]
    assert passed == [line.decode() for line in sent[1:]]
    refused = json.loads(wire_out.getvalue().splitlines()[0])
    assert refused["id"] == 1 and refused["error"]["code"] == INVALID_REQUEST
    assert refused["error"]["message"] == "Invalid Request: initialize first: 'tools/list' came before the " \
                                          "session's initialize request"
