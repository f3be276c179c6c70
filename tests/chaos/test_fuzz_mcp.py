"""The MCP boundary under hostile input, over a real ``rekall mcp`` stdio process.

Malformed JSON-RPC, wrong argument types, unknown tools, bad ids, broken handoffs, huge lines
and invalid UTF-8: the server stays up, and every request it can read is answered, a tool
failure with a clear error in rekall's ``[code] message. Next: hint`` form (argument
validation and unknown tools included), never an unexpected exception.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.chaos.ledger import LEDGER
from tests.chaos.strategies import json_values
from tests.chaos.rawmcp import RawMcp
from tests.mcpkit import HANDOFF

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

TOOLS = ("probe_compaction", "schedule_compaction", "compaction_status", "cancel_compaction")
CLEAR_TOOL_ERROR = re.compile(r"\A\[[a-z_]+\] [^\n]+\. Next: [^\n]+\Z")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawMcp]:
    home = tmp_path_factory.mktemp("mcp-fuzz")  # no IPC socket here: probe and schedule fail cleanly
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CODEX_HOME": str(home),
           "REKALL_JOBS_DIR": str(home / "jobs")}
    raw = RawMcp(env)
    yield raw
    assert raw.close() == 0
    assert "Traceback" not in raw.stderr, raw.stderr[-3000:]


ids = st.one_of(st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()), st.text(max_size=60), st.integers(),
                st.none(),
                st.sampled_from(["../../etc/passwd", "..", "/tmp/x", "x" * 300, "0199a5c2-3333-4000-8000-\n"]))


@st.composite
def handoffs(draw: st.DrawFn) -> Any:
    """Mostly a handoff with one field broken, sometimes anything at all."""
    if draw(st.booleans()):
        return draw(json_values)
    value = dict(HANDOFF)
    key = draw(st.sampled_from([*HANDOFF, "extra"]))
    value[key] = draw(st.one_of(json_values, st.text(min_size=1, max_size=200), st.just("é" * 20_000)))
    return value


arguments = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"threadId": ids, "jobId": ids, "handoff": handoffs(), "other": json_values}),
)
tool_calls = st.builds(lambda name, args: ("tools/call", {"name": name, "arguments": args}),
                       st.sampled_from(TOOLS) | st.text(max_size=20), arguments)
other_requests = st.builds(lambda method, params: (method, params),
                           st.sampled_from(["tools/list", "ping", "resources/list", "prompts/list", "no/such"])
                           | st.text(max_size=20), st.dictionaries(st.text(max_size=8), json_values, max_size=3))
garbage_lines = st.one_of(
    st.binary(max_size=300).map(lambda b: b.replace(b"\n", b" ") + b"\n"),
    json_values.map(lambda v: json.dumps(v).encode() + b"\n"),
    st.just(b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"compaction_status","x":"\xff"}}\n'),
    st.just(b"\xef\xbb\xbf{\n"),
)
moves = st.lists(st.one_of(tool_calls, other_requests, garbage_lines), min_size=1, max_size=6)


def check_reply(method: str, reply: dict[str, Any]) -> None:
    if "error" in reply:  # a protocol-level answer: invalid params, unknown method
        assert isinstance(reply["error"].get("code"), int) and reply["error"].get("message"), reply
        return
    result = reply["result"]
    if method != "tools/call":
        return
    text = result["content"][0]["text"]
    assert "Traceback" not in text
    if result.get("isError"):
        assert CLEAR_TOOL_ERROR.match(text), text[:400]
    else:
        assert isinstance(result.get("structuredContent"), dict), reply


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moves=moves)
def test_the_mcp_server_answers_every_request_and_survives_everything_else(server: RawMcp, moves: list[Any]):
    pending = []
    garbage = [move for move in moves if isinstance(move, bytes) and move.strip()]
    unreadable = sum(1 for line in garbage if not _json(line))
    errors_before = len(server.anonymous_errors)
    for move in moves:
        if isinstance(move, bytes):
            server.send_raw(move)
            continue
        request_id = server.next_id()
        server.send_json({"jsonrpc": "2.0", "id": request_id, "method": move[0], "params": move[1]})
        pending.append((request_id, move[0]))
    LEDGER.fault("hostile MCP input", len(moves))
    for request_id, method in pending:
        check_reply(method, server.reply(request_id))
    assert server.request("ping")["result"] == {}  # answered after every line sent before it
    answered = server.anonymous_errors[errors_before:]
    assert unreadable <= len(answered) <= len(garbage)
    assert sum(1 for e in answered if e["error"]["code"] == -32700) >= unreadable


def _json(line: bytes) -> bool:
    try:
        json.loads(line.decode("utf-8"))
    except ValueError:
        return False
    return True


def test_overlong_lines_are_refused_and_a_huge_handoff_is_answered_and_the_server_stays_up(server: RawMcp):
    before = len(server.anonymous_errors)
    server.send_raw(b"x" * 8_000_000 + b"\n")
    server.send_json({"jsonrpc": "2.0", "id": "overlong", "method": "ping", "params": {"pad": "y" * 5_000_000}})
    huge = {**HANDOFF, "summary": "x" * 2_000_000}  # under the line limit, far over the handoff limit
    reply = server.call_tool("schedule_compaction", {"threadId": "0199a5c2-3333-4000-8000-000000000003",
                                                     "handoff": huge})
    text = reply["result"]["content"][0]["text"]
    assert reply["result"]["isError"] and "32000" in text and "x" * 50 not in text
    # The overlong ping wrote its id before its params: its refusal carries it; the other line has none to read.
    assert server.reply("overlong")["error"]["code"] == -32600
    assert [e["error"]["code"] for e in server.anonymous_errors[before:]] == [-32600]
    LEDGER.fault("huge MCP line", 3)
    assert server.request("ping")["result"] == {}


MALFORMED_WITH_ID = [
    {"jsonrpc": "2.0", "id": "bad-1", "method": "tools/call", "params": [1, 2]},
    {"jsonrpc": "2.0", "id": "bad-2", "method": "tools/call", "params": "x"},
    {"jsonrpc": "1.0", "id": "bad-3", "method": "ping"},
    {"jsonrpc": "2.0", "id": "bad-4", "method": 5},
]


def test_a_malformed_request_that_carries_an_id_gets_an_invalid_request_error_with_that_id(server: RawMcp):
    for message in MALFORMED_WITH_ID:
        server.send_json(message)
    for message in MALFORMED_WITH_ID:
        error = server.reply(message["id"])["error"]
        assert error["code"] == -32600 and error["message"].startswith("Invalid Request: "), message
