"""The light path of ``rekall mcp`` answers byte for byte what the SDK server answers.

Both servers run over real stdio with the same request lines; their output lines are compared
(sorted: the SDK may answer concurrent tool calls in any order). Each run also reports which
modules it loaded, so a script the light path must serve is shown to be served without the SDK
(otherwise the comparison would prove nothing), and one it must hand over is shown to reach it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rekall.surfaces import mcp_light
from rekall.store import JobStore
from rekall.testing import FakeClock
from tests.jobkit import new_thread, scheduled_run
from tests.support import codex_opening

#: The light server as ``rekall mcp`` runs it, reporting its modules on stderr when stdin closes.
WARM = ("import json, sys\nfrom rekall.surfaces import mcp_light\n{setup}code = mcp_light.run_stdio()\n"
        "print('MODULES ' + json.dumps(sorted(sys.modules)), file=sys.stderr)\nraise SystemExit(code)")
#: The same without its warm-up, so that the modules it reports are those its answers loaded.
LIGHT = WARM.format(setup="mcp_light.Warmup.start = lambda self: None\n")
UNKNOWN_VERSION = "2099-01-01"
LIGHT_MODULES = ("mcp", "mcp_types", "pydantic", "anyio")


def start(program: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def finish(server: subprocess.Popen[str], lines: list[str]) -> tuple[list[str], set[str]]:
    stdout, stderr = server.communicate("".join(line + "\n" for line in lines), timeout=120)
    assert server.returncode == 0, stderr[-3000:]
    modules = {m for line in stderr.splitlines() if line.startswith("MODULES ") for m in json.loads(line[8:])}
    return stdout.splitlines(), modules


def run_light(lines: list[str], env: dict[str, str]) -> tuple[list[str], set[str]]:
    """The light server's reply lines and the modules it loaded."""
    return finish(start(LIGHT, env), lines)


def run_warm(lines: list[str], env: dict[str, str]) -> tuple[list[str], set[str]]:
    """As :func:`run_light`, the warm-up on, as ``rekall mcp`` runs."""
    return finish(start(WARM.format(setup=""), env), lines)


def both(lines: list[str], env: dict[str, str]) -> tuple[list[str], set[str]]:
    """The light server's reply lines (asserted equal to the SDK's) and the modules it loaded."""
    light_server, sdk_server = start(LIGHT, env), start(mcp_light.SDK_SERVER, env)  # side by side: half the wait
    light, modules = finish(light_server, lines)
    sdk, _ = finish(sdk_server, lines)
    assert sorted(light) == sorted(sdk)
    return light, modules


def sdk_loaded(modules: set[str]) -> bool:
    return any(m == h or m.startswith(h + ".") for m in modules for h in LIGHT_MODULES)


def request(request_id: Any, method: str, params: Any = None) -> str:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message)


def initialize(version: str, request_id: Any = 1) -> list[str]:
    params = {"protocolVersion": version, "capabilities": {"roots": {"listChanged": True}},
              "clientInfo": {"name": "codex-mcp-client", "title": "Codex", "version": "0.1"}}
    return [request(request_id, "initialize", params), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})]


def status_call(request_id: Any, arguments: Any) -> str:
    return request(request_id, "tools/call", {"name": "compaction_status", "arguments": arguments})


@pytest.fixture
def env(jobs_dir: Path) -> dict[str, str]:
    return {**os.environ, "REKALL_JOBS_DIR": str(jobs_dir)}


@pytest.fixture
def finished_thread(jobs_dir: Path, clock: FakeClock) -> str:
    store = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock)
    thread = new_thread()
    for outcome in ("failed", "skipped", "resumed"):
        scheduled_run(store, clock, thread, outcome)
    return thread


def test_the_shipped_data_is_what_the_sdk_server_generates_today():
    # Fails when a tool's description or schema, or the SDK's handshake, changed without
    # `python -m rekall.surfaces.mcp_light --generate`.
    assert mcp_light.generated_text() == mcp_light.DATA_PATH.read_text(encoding="utf-8")


@pytest.mark.parametrize("version", [*mcp_light.load_data()["versions"], UNKNOWN_VERSION])
def test_the_opening_of_a_session_is_served_without_the_sdk_and_equals_its_replies(version, env, finished_thread):
    lines = [*initialize(version, "init-1"), request(2, "tools/list"), status_call(3, {"threadId": finished_thread}),
             status_call(4, {"threadId": new_thread()}), request(5, "tools/list", {})]
    replies, modules = both(lines, env)
    assert not sdk_loaded(modules), "the light path handed a session over that it should serve"
    negotiated = json.loads(replies[0])["result"]["protocolVersion"]
    assert negotiated == (version if version != UNKNOWN_VERSION else mcp_light.load_data()["latestHandshakeVersion"])
    assert json.loads(replies[2])["result"]["structuredContent"]["state"] == "resumed"


@pytest.mark.parametrize("version", [*mcp_light.load_data()["versions"], UNKNOWN_VERSION])
def test_the_opening_real_codex_sends_is_served_without_the_sdk_and_equals_its_replies(version, env, finished_thread):
    # Codex 0.171.0's opening verbatim (at 2025-06-18, as it sends it; the other versions by substitution),
    # then what a session does next in Codex's style: compaction_status with a progress token, prompts/list.
    opening = [codex_opening.OPENING[0].replace('"2025-06-18"', json.dumps(version)), *codex_opening.OPENING[1:]]
    lines = [*opening, codex_opening.tool_call(4, "compaction_status", {"threadId": finished_thread}, 3),
             request(5, "prompts/list", {"_meta": {"progressToken": "p-4"}})]
    replies, modules = both(lines, env)
    assert not sdk_loaded(modules), "the light path handed Codex's opening over to the SDK"
    by_id = {json.loads(line)["id"]: json.loads(line)["result"] for line in replies}
    assert sorted(by_id) == [0, 1, 2, 3, 4, 5]
    assert by_id[4]["structuredContent"]["state"] == "resumed"
    assert "compaction_status" in [tool["name"] for tool in by_id[1]["tools"]]


def test_the_tool_call_real_codex_sends_with_its_turn_metadata_is_served_without_the_sdk(env, finished_thread):
    # Codex 0.171.0's tools/call verbatim (only the thread is this test's, and the id one past the opening's).
    call = codex_opening.TOOL_CALL.replace("01a22ed6-f968-76a0-85e5-6eeac45fb37e", finished_thread) \
        .replace('"id":2,', f'"id":{codex_opening.LAST_ID + 1},', 1)
    assert json.loads(call)["params"]["_meta"]["x-codex-turn-metadata"]["thread_id"] == finished_thread
    replies, modules = both([*codex_opening.OPENING, call], env)
    assert not sdk_loaded(modules), "the light path handed Codex's tool call over to the SDK"
    assert json.loads(replies[-1])["result"]["structuredContent"]["state"] == "resumed"


@pytest.mark.parametrize("tool", ["schedule_compaction", "cancel_compaction"])
def test_an_acting_call_from_another_thread_is_handed_to_the_sdk_and_refused_on_both_paths(
        tool, env, jobs_dir, finished_thread):
    store = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs_dir)})
    before = store.read_status(finished_thread)
    arguments = {"threadId": finished_thread, **({"jobId": before.jobId} if tool == "cancel_compaction" else {})}
    other = new_thread()
    call = codex_opening.tool_call(codex_opening.LAST_ID + 1, tool, arguments, 3, caller=other)
    replies, modules = both([*codex_opening.OPENING, call], env)
    assert sdk_loaded(modules)
    result = json.loads(replies[-1])["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(f"[not_callers_thread] {tool} names thread {finished_thread}, "
                                                   f"but this call comes from thread {other}")
    assert store.read_status(finished_thread) == before and not list(jobs_dir.rglob("*cancel*"))


@pytest.mark.parametrize("bad", [
    "not json", '{"jsonrpc":"2.0","id":7}', '{"jsonrpc":"1.0","id":7,"method":"tools/list"}',
    '{"jsonrpc":"2.0","id":true,"method":"tools/list"}', '{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[]}',
    request(7, "no/such/method"), request(7, "ping"),
    status_call(7, {"threadId": ""}), status_call(7, {}), status_call(7, {"threadId": 7}),
    status_call(7, {"threadId": "not-a-uuid"}), status_call(7, {"threadId": "x" * 201}),
    status_call(7, {"threadId": "019a0000-0000-7000-8000-000000000000", "extra": 1}),
    request(7, "tools/call", {"name": "no_such_tool", "arguments": {}}),
    request(7, "tools/call", {"name": "cancel_compaction",
                              "arguments": {"threadId": "019a0000-0000-7000-8000-000000000000",
                                            "jobId": "019a0000-0000-7000-8000-000000000001"}}),
    request(7, "initialize", {"protocolVersion": "2025-06-18"}),
    request(7, "tools/list", {"cursor": "x"}), request(7, "tools/list", {"_meta": {"progressToken": True}}),
    request(7, "tools/list", {"_meta": {"progressToken": 1.5}}), request(7, "resources/list", {"_meta": []}),
    request(7, "resources/list", {"_meta": {"progressToken": 1, "io.modelcontextprotocol/logLevel": "debug"}}),
    request(7, "tools/call", {"name": "compaction_status", "arguments": {"threadId": new_thread()},
                              "_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}),
    request(7, "resources/read", {"uri": "file:///x"}),
    request(7, "tools/call", {"name": "compaction_status", "arguments": {"threadId": new_thread()},
                              "_meta": {"progressToken": None}}),
    '{"jsonrpc":"2.0","id":{"a":7},"method":"tools/list"}',
    '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"compaction_status","arguments":'
    '{"threadId":"019a0000-0000-7000-8000-000000000000","threadId":"019a0000-0000-7000-8000-000000000001"}}}',
], ids=["not-json", "no-method", "jsonrpc-1", "bool-id", "list-params", "unknown-method", "ping", "empty-thread",
        "no-thread", "int-thread", "bad-thread", "long-thread", "extra-argument", "unknown-tool", "cancel",
        "second-initialize", "cursor", "bool-token", "float-token", "list-meta", "reserved-meta", "reserved-meta-call",
        "resources-read",
        "null-token-call", "object-id", "duplicate-key"])
def test_every_other_request_hands_the_session_to_the_sdk_which_answers_as_if_it_had_served_it_all(bad, env):
    # The SDK must hold the light path's handshake: the tools/list after the hand-over is answered, not refused.
    lines = [*initialize("2025-06-18"), request(2, "tools/list"), bad, request(8, "tools/list"),
             status_call(9, {"threadId": new_thread()})]
    replies, modules = both(lines, env)
    assert sdk_loaded(modules)
    assert [json.loads(line).get("id") for line in replies].count(1) == 1  # the replayed initialize is not answered twice
    assert any(json.loads(line).get("id") == 8 and "result" in json.loads(line) for line in replies)


def test_the_edge_of_a_session_is_answered_as_json_rpc_and_mcp_say(env):
    thread = "019a0000-0000-7000-8000-000000000000"
    lines = [status_call(1, {"threadId": thread}), *initialize("2025-06-18", request_id=2),
             '{"jsonrpc":"2.0","id":{"a":3},"method":"tools/list"}',
             '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"compaction_status","arguments":'
             f'{{"threadId":"{thread}","threadId":"{new_thread()}"}}}}}}',
             status_call(5, {"threadId": thread, "verbose": True}),
             request(6, "tools/call", {"name": "probe_compaction", "arguments": {"threadId": thread, "x": 1}}),
             request(7, "tools/list")]
    replies = [json.loads(line) for line in both(lines, env)[0]]
    by_id = {json.dumps(reply.get("id")): reply for reply in replies}
    assert by_id["1"]["error"]["code"] == -32600 and "initialize first" in by_id["1"]["error"]["message"]
    # An id that is not a string or an integer cannot be read: Invalid Request with a null id.
    assert by_id["null"]["error"] == {"code": -32600, "message": "Invalid Request: id must be a string or an integer"}
    assert by_id["4"]["error"]["code"] == -32600 and "threadId twice in one object" in by_id["4"]["error"]["message"]
    for unknown in ("5", "6"):
        assert by_id[unknown]["result"]["isError"] is True
        assert by_id[unknown]["result"]["content"][0]["text"].startswith("[invalid_arguments]")
        assert "extra inputs are not permitted" in by_id[unknown]["result"]["content"][0]["text"]
    tools = by_id["7"]["result"]["tools"]
    assert all(tool["inputSchema"]["additionalProperties"] is False for tool in tools)
    assert len(replies) == 7  # one answer each, the notification none


@pytest.mark.parametrize("first", [request(1, "tools/list"), status_call(1, {"threadId": new_thread()}),
                                   request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                             "clientInfo": {"name": 5, "version": "1"}}),
                                   *(request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": caps,
                                                               "clientInfo": {"name": "c", "version": "1"}})
                                     for caps in ({"elicitation": {"form": {"applyDefaults": True}}},
                                                  {"experimental": {"codex/auth-change": True}},
                                                  {"tasks": {"list": {}}}, {"sampling": {"tools": []}})),
                                   request(1, "resources/list", {"_meta": {"progressToken": 0}})],
                         ids=["list-before-initialize", "call-before-initialize", "bad-client-info", "rich-elicitation",
                              "experimental-not-an-object", "tasks", "sampling-tools-list", "resources-before-initialize"])
def test_a_session_that_does_not_open_plainly_is_the_sdks_from_its_first_line(first, env):
    replies, modules = both([first, request(2, "tools/list")], env)
    assert sdk_loaded(modules)
    assert len(replies) == 2


def test_a_status_that_might_not_fit_the_output_schema_goes_to_the_sdk():
    schema = mcp_light.load_data()["statusOutputSchema"]
    defs = schema.get("$defs", {})
    good = {"threadId": "t", "state": "not_scheduled"}
    assert mcp_light.fits(good, schema, defs)
    assert not mcp_light.fits({**good, "unknownField": 1}, schema, defs)
    assert not mcp_light.fits({"threadId": "t"}, schema, defs)
    assert not mcp_light.fits({**good, "jobNumber": "1"}, schema, defs)
    assert not mcp_light.fits(good, {**schema, "pattern": "x"}, defs)  # a keyword not known here: unsure
    assert mcp_light._plain_numbers({"a": [0.5, 1]}) and not mcp_light._plain_numbers({"a": [1e-7]})


def test_the_status_of_ended_jobs_or_of_no_job_is_read_from_the_views_without_the_status_code(env, finished_thread):
    # The first compaction_status costs what later ones do: it loads neither the SDK nor rekall's status code.
    lines = [*codex_opening.OPENING, codex_opening.tool_call(4, "compaction_status", {"threadId": finished_thread}, 3),
             codex_opening.tool_call(5, "compaction_status", {"threadId": new_thread()}, 4)]
    replies, modules = both(lines, env)
    assert not sdk_loaded(modules) and "rekall.usecases.service" not in modules and "rekall.store.jobstore" not in modules
    states = [json.loads(line)["result"]["structuredContent"]["state"] for line in replies[-2:]]
    assert states == ["resumed", "not_scheduled"]


def test_the_status_of_a_job_not_over_is_derived_by_the_status_code_and_equals_the_sdks(env, jobs_dir, clock):
    store = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock)
    thread = new_thread()
    scheduled_run(store, clock, thread, "resumed")
    store.create_job(thread, handoff=None, user_fingerprint=None)  # scheduled, its worker not started
    replies, modules = both([*codex_opening.OPENING, codex_opening.tool_call(4, "compaction_status",
                                                                               {"threadId": thread}, 3)], env)
    assert not sdk_loaded(modules) and "rekall.usecases.service" in modules
    assert json.loads(replies[-1])["result"]["structuredContent"]["state"] == "scheduled"


# --- warm on intent ---------------------------------------------------------------------------


def test_a_session_that_calls_no_tool_never_loads_the_sdk(env):
    replies, modules = run_warm([*codex_opening.OPENING, request(4, "prompts/list")], env)
    assert len(replies) == codex_opening.LAST_ID + 2
    assert not sdk_loaded(modules)


def test_a_session_that_ends_while_the_sdk_loads_ends_cleanly(env, finished_thread):
    server = start(WARM.format(setup=""), env)
    lines = [*codex_opening.OPENING, codex_opening.tool_call(4, "compaction_status", {"threadId": finished_thread}, 3)]
    stdout, stderr = server.communicate("".join(line + "\n" for line in lines), timeout=120)
    assert server.returncode == 0 and len(stdout.splitlines()) == codex_opening.LAST_ID + 2
    assert [line for line in stderr.splitlines() if not line.startswith("MODULES ")] == []


class WireServer:
    """``mcp_light.serve`` on a thread of its own over real pipes, as ``rekall mcp`` serves its stdio."""

    def __init__(self) -> None:
        import threading

        to_server, self._into = os.pipe()
        self._out, from_server = os.pipe()
        self._writer = os.fdopen(self._into, "wb")
        self._reader = os.fdopen(self._out, "rb")
        wire_in, wire_out = os.fdopen(to_server, "rb"), os.fdopen(from_server, "wb")
        self.thread = threading.Thread(target=mcp_light.serve, args=(wire_in, wire_out), daemon=True)
        self.thread.start()

    def send(self, *lines: str) -> None:
        self._writer.write("".join(line + "\n" for line in lines).encode())
        self._writer.flush()

    def reply(self) -> dict[str, Any]:
        line = self._reader.readline()
        assert line, "the server closed its output"
        return json.loads(line)

    def close(self) -> None:
        self._writer.close()  # stdin closes: the server returns
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        self._reader.close()


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The name of the thread each build of the SDK server ran on."""
    import threading

    built: list[str] = []
    real = mcp_light._build_sdk_server

    def recorded() -> Any:
        built.append(threading.current_thread().name)
        return real()

    monkeypatch.setattr(mcp_light, "_build_sdk_server", recorded)
    return built


def test_the_first_status_starts_the_sdk_server_on_a_thread_of_its_own_and_the_acting_call_uses_it(
        env, monkeypatch, builds, finished_thread):
    monkeypatch.setenv("REKALL_JOBS_DIR", env["REKALL_JOBS_DIR"])
    server = WireServer()
    try:
        server.send(*codex_opening.OPENING)
        assert sorted(server.reply()["id"] for _ in range(codex_opening.LAST_ID + 1)) == list(range(codex_opening.LAST_ID + 1))
        assert builds == []  # the opening shows no intent
        server.send(codex_opening.tool_call(10, "compaction_status", {"threadId": finished_thread}, 10))
        assert server.reply()["result"]["structuredContent"]["state"] == "resumed"
        # An acting call (its arguments refused, so that it acts on nothing) hands the session over.
        server.send(request(11, "tools/call", {"name": "probe_compaction",
                                               "arguments": {"threadId": finished_thread, "extra": 1}}))
        assert server.reply()["result"]["content"][0]["text"].startswith("[invalid_arguments]")
    finally:
        server.close()
    assert builds == ["rekall-mcp-warmup"]  # built once, by the warm-up, never on the session's thread


def test_an_acting_call_before_any_status_builds_the_sdk_server_where_it_is_handed_over(env, builds):
    server = WireServer()
    try:
        server.send(*initialize("2025-06-18"), request(2, "tools/call", {"name": "probe_compaction",
                                                                          "arguments": {"threadId": "x", "extra": 1}}))
        assert server.reply()["id"] == 1 and server.reply()["result"]["isError"] is True
    finally:
        server.close()
    assert builds == [server.thread.name]


def test_a_warm_up_that_failed_is_built_again_where_the_session_is_handed_over(monkeypatch):
    import threading

    attempts: list[str] = []

    def flaky() -> str:
        attempts.append(threading.current_thread().name)
        if len(attempts) == 1:
            raise OSError("disk hiccup")
        return "server"

    monkeypatch.setattr(mcp_light, "_build_sdk_server", flaky)
    warmup = mcp_light.Warmup()
    warmup.start()
    assert warmup.server() == "server"
    assert attempts == ["rekall-mcp-warmup", threading.current_thread().name]
