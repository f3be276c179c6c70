"""rekall under the real Codex MCP client: a real ``codex app-server`` with rekall configured as
an MCP server (isolated ``CODEX_HOME``, loopback mock model).

Codex shows MCP tools to the model in one of two ways: directly, as a ``mcp__rekall``
namespace in the request's tools, or deferred behind its client-side ``tool_search`` tool,
which the model calls first to load them. 0.171 picks by the model's catalog entry
(``supports_search_tool``): the mock model has none, so its tools come directly; a catalog
entry that supports search defers them. The call test runs both ways and follows whichever
exposure the engine chose, so it keeps holding if the default changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall import __version__
from tests.support.appserver import Message, open_app_server
from tests.codex.rekallkit import SERVER, ready_server_status, rekall_server_toml
from tests.pluginkit import listed_tools
from tests.support.codex_home import MOCK_MODEL, make_isolated_home
from tests.support.mock_model import MockModel, RecordedRequest

pytestmark = [pytest.mark.codex, pytest.mark.anyio]

NAMESPACE = f"mcp__{SERVER}"
#: The smallest catalog entry 0.171 accepts for the mock model, with tool search switched on.
SEARCHING_MODEL = {
    "slug": MOCK_MODEL, "display_name": "rekall mock model", "description": "loopback mock",
    "supports_search_tool": True, "supported_reasoning_levels": [], "shell_type": "shell_command",
    "visibility": "list", "supported_in_api": True, "priority": 1, "support_verbosity": True,
    "truncation_policy": {"mode": "tokens", "limit": 10000}, "experimental_supported_tools": [],
    "base_instructions": "You are a test model.",
}


def rekall_home(private_dir: Path, mock_model: MockModel, *, tool_search: bool = False) -> Path:
    extra = rekall_server_toml(private_dir / "jobs")
    if tool_search:
        catalog = private_dir / "model-catalog.json"
        catalog.write_text(json.dumps({"models": [SEARCHING_MODEL]}), encoding="utf-8")
        extra = f"model_catalog_json = {json.dumps(str(catalog))}\n\n{extra}"
    return make_isolated_home(private_dir / "rekall-home", mock_model.base_url, extra)


def is_turn_completed(thread_id: str):
    return lambda m: m.method == "turn/completed" and m.params.get("threadId") == thread_id


def exposure_of(request: RecordedRequest) -> str:
    """How the request shows rekall's tools to the model: "direct" or "tool_search"."""
    tools = request.body["tools"]
    namespaces = {t["name"]: t for t in tools if t.get("type") == "namespace"}
    if NAMESPACE in namespaces:
        assert {t["name"] for t in namespaces[NAMESPACE]["tools"]} == set(listed_tools())
        return "direct"
    assert any(t.get("type") == "tool_search" for t in tools), f"rekall's tools are not offered at all: {tools}"
    return "tool_search"


def input_items(request: RecordedRequest, kind: str) -> list[dict[str, Any]]:
    return [item for item in request.body["input"] if item.get("type") == kind]


async def test_codex_reports_rekall_ready_with_its_four_tools_and_their_schemas(
        codex_binary: Path, mock_model: MockModel, private_dir: Path, real_schema_dir: Path) -> None:
    methods = json.loads((real_schema_dir / "ClientRequest.json").read_text(encoding="utf-8"))["oneOf"]
    assert "mcpServerStatus/list" in {m["properties"]["method"]["enum"][0] for m in methods}
    home = rekall_home(private_dir, mock_model)
    with anyio.fail_after(60):
        async with open_app_server(codex_binary, home) as server:
            thread_id = (await server.start_thread())["thread"]["id"]
            status = await ready_server_status(server, thread_id)
    assert status["runtimeStatus"] == "connected" and status["toolsError"] is None
    assert status["serverInfo"]["name"] == SERVER and status["serverInfo"]["version"] == __version__
    reported = status["tools"]
    assert sorted(reported) == sorted(listed_tools())
    for name, tool in reported.items():
        expected = listed_tools()[name]
        assert tool["inputSchema"] == expected["inputSchema"], name
        assert tool["outputSchema"] == expected["outputSchema"], name
        assert tool["description"] == expected["description"], name
        assert tool["annotations"]["readOnlyHint"] == expected["annotations"]["readOnlyHint"], name
    print("app-server reported:", {n: sorted(t["inputSchema"]["properties"]) for n, t in sorted(reported.items())})


@pytest.mark.parametrize("tool_search", [False, True], ids=["default-model", "searching-model"])
async def test_a_compaction_status_call_from_the_model_runs_through_rekall_and_its_result_reaches_the_model(
        codex_binary: Path, mock_model: MockModel, private_dir: Path,
        tool_search: bool) -> None:
    home = rekall_home(private_dir, mock_model, tool_search=tool_search)
    with anyio.fail_after(90):
        async with open_app_server(codex_binary, home) as server:
            thread_id = (await server.start_thread())["thread"]["id"]
            await ready_server_status(server, thread_id)
            # A first turn shows how this engine offers the tools; the model then acts accordingly.
            await server.start_turn(thread_id, "hello")
            await server.wait_for(is_turn_completed(thread_id))
            exposure = exposure_of(mock_model.requests[0])
            if exposure == "tool_search":
                mock_model.queue_tool_search("compaction status")
            call_id = mock_model.queue_mcp_call(SERVER, "compaction_status", {"threadId": thread_id})
            turn_start = len(mock_model.requests)
            await server.start_turn(thread_id, "is a compaction pending?")
            seen: list[Message] = []
            await server.wait_for(is_turn_completed(thread_id), seen=seen)
    if tool_search:
        assert exposure == "tool_search", "a model that supports search gets rekall's tools deferred"
    turn = mock_model.requests[turn_start:]
    if exposure == "tool_search":
        (search,) = input_items(turn[1], "tool_search_output")
        loaded = {t["name"]: t for t in search["tools"]}
        assert {t["name"] for t in loaded[NAMESPACE]["tools"]} == set(listed_tools())
    (call,) = [m.params["item"] for m in seen
               if m.method == "item/completed" and m.params["item"]["type"] == "mcpToolCall"]
    assert (call["server"], call["tool"], call["status"]) == (SERVER, "compaction_status", "completed")
    assert call["result"]["structuredContent"] == {"threadId": thread_id, "state": "not_scheduled",
                                                   "status": "not_scheduled"}
    (output,) = [o for o in input_items(turn[-1], "function_call_output") if o["call_id"] == call_id]
    assert json.loads(output["output"].split("Output:\n", 1)[-1]) == call["result"]["structuredContent"]
    print(f"exposure={exposure}; the model's next request carried: {output['output']!r}")
