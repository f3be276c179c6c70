"""The MCP tools' output schemas are derived from the JobStatus record and are precise.

``tools/list`` is read from the real ``rekall mcp`` over stdio (official SDK client). The SDK
validates every structured result against the tool's ``outputSchema`` (the server through
pydantic, the client through jsonschema), so a field the record does not describe, or a value
of the wrong type, fails the call instead of reaching the agent.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, TextContent

from rekall.states.status import ALWAYS, NAMES
from rekall.store.handoff import MAX_HANDOFF_BYTES, MAX_LIST_ITEMS
from rekall.store.views import unsealed
from tests.jobkit import new_thread, open_store, run, schedule
from tests.support.codex_opening import codex_meta
from tests.store.test_old_status_files import FIXTURE

pytestmark = pytest.mark.anyio

STATUS_TOOLS = ("schedule_compaction", "compaction_status", "cancel_compaction")


@asynccontextmanager
async def rekall_mcp(tmp_path: Path) -> AsyncIterator[Client]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CONTEXT_COMPACT_"))}
    env.update(REKALL_JOBS_DIR=str(tmp_path / "jobs"), CODEX_HOME=str(tmp_path / "codex-home"),
               HOME=str(tmp_path / "user-home"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "rekall", "mcp"], env=env)
    async with Client(params) as client:
        yield client


async def _schemas(client: Client) -> dict[str, dict[str, Any]]:
    return {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    # The SDK validates it against outputSchema; called as Codex calls it, from the thread named.
    result = await client.call_tool(tool, arguments, meta=codex_meta(arguments["threadId"]))
    assert not result.is_error, result.content
    return result.structured_content


async def test_the_output_schemas_list_every_status_field_with_its_type_and_allow_nothing_else(tmp_path):
    async with rekall_mcp(tmp_path) as client:
        schemas = await _schemas(client)
    for tool in STATUS_TOOLS:
        schema = schemas[tool]
        assert schema["additionalProperties"] is False, tool
        # compaction_status adds the thread's checkpoint (rekall.store.checkpoint.summary) to the job's fields.
        assert set(schema["properties"]) == NAMES | ({"checkpoint"} if tool == "compaction_status" else set()), tool
        assert all(prop.get("description") for prop in schema["properties"].values()), tool
    assert set(schemas["compaction_status"]["required"]) == {"threadId", "state"}
    assert set(schemas["schedule_compaction"]["required"]) == ALWAYS | {"alreadyScheduled"}
    assert set(schemas["cancel_compaction"]["required"]) == {"threadId", "jobId", "state", "cancellationRequested",
                                                             "message"}
    props = schemas["compaction_status"]["properties"]
    assert props["contextTokensBefore"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert props["jobNumber"]["type"] == "integer" and props["resume"]["type"] == "boolean"
    assert props["reclaimedFraction"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    entry = schemas["compaction_status"]["$defs"]["HistoryEntry"]
    assert props["history"]["items"] == {"$ref": "#/$defs/HistoryEntry"}
    assert entry["additionalProperties"] is False and "endedAt" in entry["properties"]
    assert schemas["schedule_compaction"]["properties"]["handoff"] == {"$ref": "#/$defs/Handoff",
                                                                       "description": "schedule: the handoff as saved."}


async def test_the_handoff_limits_in_the_input_schema_are_the_stores(tmp_path):
    async with rekall_mcp(tmp_path) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    handoff = tools["schedule_compaction"].input_schema["$defs"]["Handoff"]
    assert handoff["properties"]["preserve"]["maxItems"] == MAX_LIST_ITEMS
    assert handoff["properties"]["discard"]["maxItems"] == MAX_LIST_ITEMS
    assert f"at most {MAX_HANDOFF_BYTES} UTF-8 bytes" in handoff["properties"]["summary"]["description"]


async def test_real_status_answers_validate_against_the_listed_schema(tmp_path, clock):
    store = open_store(tmp_path / "jobs", clock)
    thread, idle_thread = new_thread(), new_thread()
    job = schedule(store, thread).job_id
    run(store, clock, thread, job, "resumed")
    store.release_lock(thread, job)
    async with rekall_mcp(tmp_path) as client:
        schemas = await _schemas(client)
        status = await _call(client, "compaction_status", {"threadId": thread})
        none = await _call(client, "compaction_status", {"threadId": idle_thread})
        ended = await _call(client, "cancel_compaction", {"threadId": thread, "jobId": job})
    assert status["state"] == "resumed" and status["contextTokensBefore"] == 90_000
    assert status == unsealed(json.loads((tmp_path / "jobs" / f"{thread}.json").read_text()))  # the wire is the file
    assert none == {"threadId": idle_thread, "status": "not_scheduled", "state": "not_scheduled"}
    assert ended["cancellationRequested"] is False and ended["jobId"] == job
    for tool, answer in (("compaction_status", status), ("compaction_status", none), ("cancel_compaction", ended)):
        jsonschema.validate(answer, schemas[tool])


async def test_a_status_written_before_the_record_is_answered_whole(tmp_path):
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    for name, text in fixture["files"].items():
        (jobs / name).write_text(text.replace("@ROOT@", str(jobs)), encoding="utf-8")
        os.chmod(jobs / name, 0o600)
    async with rekall_mcp(tmp_path) as client:
        status = await _call(client, "compaction_status", {"threadId": fixture["thread"]})
    assert status == unsealed(json.loads((jobs / f"{fixture['thread']}.json").read_text()))
    assert "fieldsNotShown" not in status


async def test_a_node_status_with_fields_the_schema_does_not_describe_names_what_was_left_out(tmp_path):
    thread = new_thread()
    node = tmp_path / "codex-home" / "tools" / "context-compact" / "jobs"
    node.mkdir(parents=True, mode=0o700)
    (node / f"{thread}.json").write_text(json.dumps({
        "jobId": "11111111-2222-4333-8444-555555555555", "threadId": thread, "status": "completed",
        "createdAt": "2026-01-01T00:00:00.000Z", "jobNumber": "three", "futureField": {"x": 1},
        "history": [{"jobId": "a", "jobNumber": 1, "status": "completed", "completedAt": "2025-12-31T00:00:00Z"}],
    }))
    async with rekall_mcp(tmp_path) as client:
        status = await _call(client, "compaction_status", {"threadId": thread})
    assert status["writtenBy"] == "node" and status["state"] == "completed"
    assert status["fieldsNotShown"] == ["futureField", "jobNumber"]
    assert "futureField" not in status and "jobNumber" not in status
    assert status["history"][0]["completedAt"] == "2025-12-31T00:00:00Z"


async def test_the_sdk_refuses_a_result_with_a_field_the_schema_does_not_describe(tmp_path):
    async with rekall_mcp(tmp_path) as client:
        await client.list_tools()
        answer = {"threadId": new_thread(), "state": "not_scheduled", "notAStatusField": 1}
        result = CallToolResult(content=[TextContent(type="text", text=json.dumps(answer))],
                                structured_content=answer)
        with pytest.raises(RuntimeError, match="notAStatusField"):
            await client.session.validate_tool_result("compaction_status", result)
        wrong_type = {"threadId": answer["threadId"], "state": "completed", "contextTokensBefore": "many"}
        with pytest.raises(RuntimeError, match="many"):
            await client.session.validate_tool_result(
                "compaction_status", CallToolResult(content=[], structured_content=wrong_type))



def test_a_status_without_a_required_field_is_an_internal_error_not_a_partial_answer():
    from rekall.kernel.errors import InternalError
    from rekall.surfaces.mcp_server import StatusResult, _fit

    with pytest.raises(InternalError, match="lacks state"):
        _fit(StatusResult, {"threadId": new_thread(), "jobNumber": "x"})
    fitted = _fit(StatusResult, {"threadId": "t", "state": "completed", "jobNumber": "x", "newField": 1})
    assert fitted == {"threadId": "t", "state": "completed", "fieldsNotShown": ["jobNumber", "newField"]}
