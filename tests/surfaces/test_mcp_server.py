"""The MCP server: tool surface, argument errors, robustness on stdio, concurrency."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest
from mcp import Client

from rekall.usecases import service
from rekall.surfaces.mcp_server import TOOL_NAMES, build_server
from rekall.sim import SimulatedOwner, start_sim_in_thread
from rekall.store import JobStore
from tests.chaos.rawmcp import RawMcp
from tests.mcpkit import HANDOFF
from tests.support.codex_opening import codex_meta

pytestmark = pytest.mark.anyio

THREAD = "0199a5c2-1111-4000-8000-000000000001"


@pytest.fixture
def jobs_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    jobs = tmp_path / "jobs"
    monkeypatch.setenv("REKALL_JOBS_DIR", str(jobs))
    return jobs


async def test_the_server_lists_four_tools_with_annotations_and_structured_output():
    async with Client(build_server()) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(tools) == sorted(TOOL_NAMES)
    assert tools["probe_compaction"].annotations.read_only_hint is True
    assert tools["compaction_status"].annotations.read_only_hint is True
    # What they are: a compaction drops the conversation's history for good, a cancel ends a job for good.
    for name in ("schedule_compaction", "cancel_compaction"):
        assert tools[name].annotations.read_only_hint is False
        assert tools[name].annotations.destructive_hint is True
    assert tools["schedule_compaction"].annotations.idempotent_hint is False
    assert tools["cancel_compaction"].annotations.idempotent_hint is True
    for tool in tools.values():
        assert tool.annotations.open_world_hint is False
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.input_schema["required"][0] == "threadId"
        assert "Never guess" in tool.input_schema["properties"]["threadId"]["description"]


async def test_tool_descriptions_teach_the_order_and_every_state():
    async with Client(build_server()) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    status = tools["compaction_status"].description
    for state in ("scheduled", "waiting_for_idle", "requesting", "accepted", "waiting_for_resume_idle", "resuming",
                  "completed", "resumed", "skipped", "cancelled", "timed_out", "failed"):
        assert state in status
    assert "before probe and schedule" in status
    assert "finish your turn" in tools["schedule_compaction"].description.lower()
    assert "after compaction_status" in tools["probe_compaction"].description


async def test_the_handoff_schema_declares_the_node_limits():
    async with Client(build_server()) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    schema = tools["schedule_compaction"].input_schema
    handoff = schema["$defs"]["Handoff"]
    assert sorted(handoff["required"]) == ["discard", "nextStep", "preserve", "resume", "summary"]
    assert handoff["additionalProperties"] is False
    assert handoff["properties"]["preserve"]["maxItems"] == 40
    assert handoff["properties"]["discard"]["maxItems"] == 40


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"threadId": "../../config.toml"}, "threadId must be a UUID"),
        ({"threadId": THREAD, "handoff": {**HANDOFF, "extra": 1}}, "extra"),
        ({"threadId": THREAD, "handoff": {**HANDOFF, "resume": "yes"}}, "resume"),
        ({"threadId": THREAD, "handoff": {**HANDOFF, "preserve": ["x"] * 41}}, "preserve"),
        ({"threadId": THREAD, "handoff": {**HANDOFF, "summary": "я" * 32000}}, "32000"),
        ({"threadId": THREAD, "handoff": {**HANDOFF, "summary": "key sk-proj-" + "Ab3" * 14}}, "summary"),
        ({"threadId": THREAD, "handoff": {**HANDOFF, "nextStep": "stop\x1b[2J"}}, "handoff.nextStep holds an escape"),
        ({"threadId": THREAD, "handoff": {**HANDOFF, "preserve": ["a\u202eb"]}},
         "handoff.preserve[0] holds a bidirectional control character"),
    ],
)
async def test_invalid_arguments_give_clear_tool_errors(jobs_env, arguments, expected):
    async with Client(build_server()) as client:
        result = await client.call_tool("schedule_compaction", arguments)
    assert result.is_error
    text = result.content[0].text
    assert expected in text and PROMISED_FORM.match(text), text
    assert "sk-proj-" not in text and "\x1b" not in text  # a credential is named, never echoed


PROMISED_FORM = re.compile(r"\A\[[a-z_]+\] [^\n]+\. Next: [^\n]+\Z")
SECRET = "sk-proj-Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2"


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("compaction_status", {"threadId": SECRET}, "threadId"),
        ("schedule_compaction", {"threadId": THREAD, "handoff": {**HANDOFF, SECRET: 1}}, "handoff.<key>"),
        ("compaction_status", {"threadId": [SECRET]}, "threadId"),
        ("compaction_status", {"threadId": "x" * 500 + SECRET}, "threadId"),
        ("cancel_compaction", {"threadId": THREAD, "jobId": SECRET}, "jobId"),
        ("cancel_compaction", {"threadId": THREAD, "jobId": {"a": SECRET}}, "jobId"),
        ("schedule_compaction", {"threadId": THREAD, "handoff": {**HANDOFF, "extra": SECRET}}, "handoff.extra"),
        ("schedule_compaction", {"threadId": THREAD, "handoff": {**HANDOFF, "resume": SECRET}}, "handoff.resume"),
        ("schedule_compaction", {"threadId": THREAD, "handoff": {**HANDOFF, "preserve": ["ok", 7, SECRET, ""]}},
         "handoff.preserve.1"),
        ("schedule_compaction", {"threadId": THREAD, "handoff": SECRET}, "handoff"),
        ("schedule_compaction", {"threadId": THREAD, "handoff": {**HANDOFF, "summary": SECRET}}, "handoff.summary"),
        ("probe_compaction", {"threadId": "../../" + SECRET}, "threadId"),
    ],
)
async def test_argument_errors_name_the_field_in_the_promised_form_and_never_echo_the_value(
        jobs_env, tool, arguments, field):
    async with Client(build_server()) as client:
        result = await client.call_tool(tool, arguments)
    text = result.content[0].text
    assert result.is_error and PROMISED_FORM.match(text), text
    assert field in text
    for fragment in (SECRET, SECRET[8:20], "input_value", "errors.pydantic.dev", "x" * 20):
        assert fragment not in text


async def test_an_unknown_tool_gets_a_coded_error_that_does_not_repeat_its_name(jobs_env):
    async with Client(build_server()) as client:
        result = await client.call_tool(SECRET, {})
    text = result.content[0].text
    assert result.is_error and PROMISED_FORM.match(text) and text.startswith("[unknown_tool]")
    assert SECRET not in text and "compaction_status" in text


async def test_an_unexpected_exception_inside_a_tool_returns_a_reason_and_a_code(jobs_env, monkeypatch):
    def broken(thread_id):
        raise KeyError(thread_id)  # the value must not come back either

    monkeypatch.setattr("rekall.usecases.service.status_reply", broken)
    async with Client(build_server()) as client:
        result = await client.call_tool("compaction_status", {"threadId": THREAD})
    text = result.content[0].text
    assert result.is_error and PROMISED_FORM.match(text), text
    assert text.startswith("[internal_error] unexpected KeyError") and THREAD not in text


async def test_a_full_disk_inside_a_tool_is_a_coded_error_with_a_next_step(jobs_env, monkeypatch):
    def full(thread_id):
        raise OSError(errno.ENOSPC, "No space left on device", str(jobs_env / "status.json"))

    monkeypatch.setattr("rekall.usecases.service.status_reply", full)
    async with Client(build_server()) as client:
        result = await client.call_tool("compaction_status", {"threadId": THREAD})
    text = result.content[0].text
    assert result.is_error and text.startswith("[no_space] no space left") and "Next: free some space" in text


async def test_an_unknown_job_cannot_be_cancelled(jobs_env):
    async with Client(build_server()) as client:
        result = await client.call_tool("cancel_compaction",
                                         {"threadId": THREAD, "jobId": "0199a5c2-1111-4000-8000-0000000000ff"},
                                         meta=codex_meta(THREAD))
    assert result.is_error and "job_identity_mismatch" in result.content[0].text


async def test_status_of_a_thread_without_jobs_is_not_scheduled(jobs_env):
    async with Client(build_server()) as client:
        result = await client.call_tool("compaction_status", {"threadId": THREAD})
    assert result.structured_content["state"] == "not_scheduled"


async def test_a_slow_probe_does_not_block_compaction_status(jobs_env, monkeypatch):
    async with SimulatedOwner() as sim:
        for name, value in sim.env.items():
            monkeypatch.setenv(name, value)

        # The owner holds back the first snapshot until the test has its status answer.
        sim.ignore_follows(1)
        async with Client(build_server()) as client:
            probe_done = anyio.Event()
            probe_result = {}

            async def probe() -> None:
                probe_result["r"] = await client.call_tool("probe_compaction", {"threadId": sim.thread_id})
                probe_done.set()

            async with anyio.create_task_group() as group:
                group.start_soon(probe)
                await sim.wait_until(lambda s: s.follow_count >= 1, timeout=5)
                with anyio.fail_after(5):
                    status = await client.call_tool("compaction_status", {"threadId": sim.thread_id})
                assert not probe_done.is_set()  # the probe is still waiting for its snapshot
                assert status.structured_content["state"] == "not_scheduled"
                sim.publish_snapshot()
        assert probe_done.is_set()
        result = probe_result["r"].structured_content
        assert result["connected"] is True and result["ownerId"] == sim.owner_id


async def test_a_schedule_waiting_for_the_store_guard_does_not_block_other_calls(jobs_env, monkeypatch):
    monkeypatch.setattr(service, "_spawn_default", lambda *args, **kwargs: os.getpid())  # no worker needed here
    async with SimulatedOwner() as sim:
        for name, value in sim.env.items():
            monkeypatch.setenv(name, value)
        store = JobStore.open()
        with contextlib.ExitStack() as held:
            held.enter_context(store.guarded())  # another rekall process is in the store
            async with Client(build_server()) as client:
                done = anyio.Event()
                result = {}

                async def schedule() -> None:
                    result["r"] = await client.call_tool("schedule_compaction", {"threadId": sim.thread_id},
                                                         meta=codex_meta(sim.thread_id))
                    done.set()

                async with anyio.create_task_group() as group:
                    group.start_soon(schedule)
                    # The schedule has read the thread and closed its connection: next is the store.
                    await sim.wait_until(lambda s: s.follow_count >= 1 and s.clients == 0, timeout=10)
                    with anyio.fail_after(5):
                        tools = await client.list_tools()
                    assert not done.is_set(), result  # still waiting for the guard
                    assert len(tools.tools) == len(TOOL_NAMES)
                    held.close()
        assert result["r"].structured_content["state"] == "scheduled"


def _frame(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def test_malformed_json_rpc_never_kills_the_stdio_server(tmp_path):
    garbage = [b"{broken\n", b"null\n", b"[]\n", b"42\n", b"\xff\xfe not utf-8\n",
               b'{"jsonrpc":"2.0","id":7,"method":"no/such/method"}\n', b"x" * 2_000_000 + b"\n"]
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    unknown_tool = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}
    wrong_type = {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                  "params": {"name": "compaction_status", "arguments": {"threadId": 42}}}
    stdin = b"".join(garbage) + _frame(init) + _frame({"jsonrpc": "2.0", "method": "notifications/initialized"}) \
        + _frame(listing) + _frame(unknown_tool) + _frame(wrong_type)
    env = {"PATH": "/usr/bin:/bin", "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "HOME": str(tmp_path)}
    server = subprocess.Popen([sys.executable, "-m", "rekall", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
    replies: dict = {}
    replies_without_id: list = []
    watchdog = threading.Timer(60, server.kill)  # bounds every read below
    watchdog.start()
    try:
        server.stdin.write(stdin)
        server.stdin.flush()
        # Read until every request with an id was answered; EOF first would mean the server died.
        while not {1, 2, 3, 4, 7} <= replies.keys():
            line = server.stdout.readline()
            assert line, f"server closed stdout early: {server.stderr.read().decode()[-2000:]}"
            message = json.loads(line)
            if message.get("id") is not None:
                replies[message["id"]] = message
            elif "error" in message:
                replies_without_id.append(message)
        server.stdin.close()
        assert server.wait(timeout=30) == 0
    finally:
        watchdog.cancel()
        server.kill()
        server.wait()
    assert replies[1]["result"]["serverInfo"]["name"] == "rekall"
    assert sorted(t["name"] for t in replies[2]["result"]["tools"]) == sorted(TOOL_NAMES)
    assert replies[3]["result"]["isError"] is True
    assert replies[3]["result"]["content"][0]["text"].startswith("[unknown_tool]")
    assert replies[4]["result"]["isError"] is True
    assert replies[7]["error"]["code"] == -32600  # sent before initialize
    assert "initialize first" in replies[7]["error"]["message"]
    # Each garbage line was answered too (with id null: none could be read), and the server
    # stayed up for everything after it.
    nulls = [m for m in replies_without_id if m["error"]["code"] in (-32700, -32600)]
    assert len(nulls) == 6


def test_a_call_in_flight_when_stdin_closes_is_answered_before_the_server_exits(tmp_path):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}}
    with start_sim_in_thread() as sim:
        sim.ignore_follows(1)  # the schedule waits for the thread's snapshot
        call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "schedule_compaction", "arguments": {"threadId": sim.thread_id},
                           "_meta": {"threadId": sim.thread_id}}}
        env = {"PATH": "/usr/bin:/bin", "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "HOME": str(tmp_path), **sim.env}
        server = subprocess.Popen([sys.executable, "-m", "rekall", "mcp"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        watchdog = threading.Timer(60, server.kill)  # bounds every read below
        watchdog.start()
        try:
            server.stdin.write(_frame(init) + _frame({"jsonrpc": "2.0", "method": "notifications/initialized"})
                               + _frame(call))
            server.stdin.close()  # the client leaves while the schedule is in flight
            sim.wait_until(lambda owner: owner.follow_count >= 1, timeout=20)
            # The thread's latest turn was stopped: once the snapshot arrives, schedule refuses.
            sim.user_turn("a new request")
            sim.stop_turn("interrupted")
            sim.call(lambda owner: owner.publish_snapshot())
            replies = {}
            for line in server.stdout:
                message = json.loads(line)
                replies[message.get("id")] = message
            assert server.wait(timeout=30) == 0
        finally:
            watchdog.cancel()
            server.kill()
            server.wait()
    assert 9 in replies, f"the in-flight call was never answered: {replies}"
    assert replies[9]["result"]["isError"] is True and "stopped or failed" in replies[9]["result"]["content"][0]["text"]


@pytest.fixture
def raw_server(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CODEX_HOME": str(tmp_path),
           "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
    server = RawMcp(env)
    yield server
    server.close()


def test_a_small_deeply_nested_call_is_answered_with_a_clear_error_and_the_server_keeps_serving(raw_server):
    deep = "[" * 1500 + "]" * 1500
    line = ('{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{"name":"compaction_status",'
            '"arguments":{"threadId":' + deep + "}}}\n").encode()
    assert len(line) < 3200  # "a 3 KB tools/call"
    raw_server.send_raw(line)
    error = raw_server.reply("deep")["error"]
    assert error["code"] == -32600 and "nested deeper than" in error["message"]
    status = raw_server.call_tool("compaction_status", {"threadId": THREAD})
    assert status["result"]["structuredContent"]["state"] == "not_scheduled"
    assert raw_server.close() == 0
    assert "Traceback" not in raw_server.stderr and "RecursionError" not in raw_server.stderr


def test_the_servers_stderr_never_repeats_a_rejected_value(raw_server):
    for arguments in ({"threadId": SECRET}, {"threadId": THREAD, "handoff": {**HANDOFF, "extra": SECRET}},
                      {"threadId": THREAD, "handoff": {**HANDOFF, "summary": SECRET}}):
        reply = raw_server.call_tool("schedule_compaction", arguments)
        assert reply["result"]["isError"] is True
    raw_server.call_tool(SECRET, {})
    assert raw_server.close() == 0
    assert SECRET not in raw_server.stderr and SECRET[8:20] not in raw_server.stderr


OTHER_THREAD = "0199a5c2-9999-4000-8000-000000000009"


@pytest.mark.parametrize("tool", ["schedule_compaction", "cancel_compaction"])
async def test_an_agent_naming_another_thread_is_refused_before_anything_is_read_written_or_sent(
        jobs_env, monkeypatch, tool):
    async with SimulatedOwner() as sim:
        for name, value in sim.env.items():
            monkeypatch.setenv(name, value)
        arguments = {"threadId": sim.thread_id, "handoff": HANDOFF} if tool == "schedule_compaction" else {
            "threadId": sim.thread_id, "jobId": "0199a5c2-1111-4000-8000-0000000000ff"}
        async with Client(build_server()) as client:
            result = await client.call_tool(tool, arguments, meta=codex_meta(OTHER_THREAD))
        text = result.content[0].text
        assert result.is_error and PROMISED_FORM.match(text), text
        assert text.startswith(f"[not_callers_thread] {tool} names thread {sim.thread_id}, but this call comes "
                               f"from thread {OTHER_THREAD}")
        assert sim.follow_count == 0 and sim.compact_requests == []  # the other thread was not even read
    assert not jobs_env.exists()  # nothing written


@pytest.mark.parametrize(("meta", "because"), [
    (None, "names no thread"),
    ({"progressToken": 1, "callId": "call_1"}, "names no thread"),
    ({"threadId": THREAD, "x-codex-turn-metadata": {"thread_id": OTHER_THREAD}}, "two different threads"),
    ({"threadId": "../../" + THREAD}, "not a thread id"),
    ({"x-codex-turn-metadata": "not an object", "threadId": 7}, "not a thread id"),
])
async def test_a_call_that_does_not_say_which_thread_it_comes_from_acts_on_none(jobs_env, monkeypatch, meta, because):
    async with SimulatedOwner() as sim:  # its thread is idle: no call of the tool in progress there
        for name, value in sim.env.items():
            monkeypatch.setenv(name, value)
        async with Client(build_server()) as client:
            result = await client.call_tool("schedule_compaction", {"threadId": sim.thread_id}, meta=meta)
        assert sim.compact_requests == []
    text = result.content[0].text
    assert result.is_error and PROMISED_FORM.match(text) and text.startswith("[caller_unknown]"), text
    assert because in text and "rekall schedule THREAD" in text and "../" not in text
    assert not [p for p in jobs_env.rglob("*") if p.is_file()]  # nothing written


async def test_either_of_codexs_thread_fields_alone_names_the_caller(jobs_env):
    for meta in ({"threadId": THREAD.upper()}, {"x-codex-turn-metadata": {"thread_id": THREAD}}):
        async with Client(build_server()) as client:
            result = await client.call_tool("cancel_compaction", {"threadId": THREAD,
                                                                  "jobId": "0199a5c2-1111-4000-8000-0000000000ff"},
                                            meta=meta)
        assert result.is_error and result.content[0].text.startswith("[job_identity_mismatch]"), result


async def test_the_read_only_tools_may_read_another_thread(jobs_env):
    async with Client(build_server()) as client:
        result = await client.call_tool("compaction_status", {"threadId": THREAD}, meta=codex_meta(OTHER_THREAD))
    assert not result.is_error and result.structured_content["state"] == "not_scheduled"


@pytest.mark.parametrize(("call", "served"), [("inProgress", True), ("completed", False), (None, False)])
async def test_without_the_callers_thread_in_the_request_the_owner_showing_this_call_in_progress_decides(
        jobs_env, monkeypatch, call, served):
    monkeypatch.setattr(service, "_spawn_default", lambda *args, **kwargs: os.getpid())  # no worker needed here
    async with SimulatedOwner() as sim:
        for name, value in sim.env.items():
            monkeypatch.setenv(name, value)
        sim.backend.user_turn("compact this conversation, then go on")  # the agent's turn, in progress
        if call is not None:
            sim.backend.mcp_tool_call("schedule_compaction", status=call)
        async with Client(build_server()) as client:
            result = await client.call_tool("schedule_compaction", {"threadId": sim.thread_id}, meta=None)
        assert sim.compact_requests == []
    if served:
        assert not result.is_error and result.structured_content["state"] == "scheduled", result
    else:
        text = result.content[0].text
        assert result.is_error and text.startswith("[caller_unknown]") and PROMISED_FORM.match(text), text
        assert "its owner shows no turn in progress calling schedule_compaction" in text
        assert not [p for p in jobs_env.rglob("*") if p.is_file()]  # nothing written


async def test_a_cancel_that_does_not_say_which_thread_it_comes_from_is_refused_without_reading_the_owner(jobs_env):
    async with Client(build_server()) as client:
        result = await client.call_tool("cancel_compaction", {"threadId": THREAD,
                                                              "jobId": "0199a5c2-1111-4000-8000-0000000000ff"})
    text = result.content[0].text
    assert result.is_error and text.startswith("[caller_unknown]") and "owner shows" not in text
    assert "rekall cancel JOB" in text
