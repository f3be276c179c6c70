"""The stdio client against the real ``codex app-server`` with the loopback mock model."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.support.appserver import AppServerError, Message, Notification, ServerRequest, open_app_server
from rekall.kernel.errors import CodexError
from tests.support.mock_model import MockModel, escalated_command

pytestmark = [pytest.mark.codex, pytest.mark.anyio]

FILLER = "context filler " * 8000  # ~120 kB of assistant output: about 30k mock tokens


def is_event(method: str, thread_id: str | None = None):
    def match(message: Message) -> bool:
        return message.method == method and (thread_id is None or message.params.get("threadId") == thread_id)

    return match


def last_total_tokens(seen: list[Message]) -> int:
    usage = [m.params["tokenUsage"] for m in seen if m.method == "thread/tokenUsage/updated"]
    assert usage, "no thread/tokenUsage/updated arrived"
    return usage[-1]["last"]["totalTokens"]


async def test_the_handshake_reports_the_server_version(codex_binary: Path, codex_home: Path) -> None:
    async with open_app_server(codex_binary, codex_home) as server:
        assert server.server_info["userAgent"].startswith("rekall/")
        assert server.server_info["codexHome"] == str(codex_home)


async def test_compaction_is_a_real_item_lifecycle_that_shrinks_the_context(
        codex_binary: Path, codex_home: Path, mock_model: MockModel) -> None:
    with anyio.fail_after(60):
        async with open_app_server(codex_binary, codex_home) as server:
            thread_id = (await server.start_thread())["thread"]["id"]

            mock_model.queue_text(FILLER)
            seen: list[Message] = []
            await server.start_turn(thread_id, "fill the context please")
            await server.wait_for(is_event("turn/completed", thread_id), seen=seen)
            before = last_total_tokens(seen)

            seen = []
            await server.start_compaction(thread_id)
            await server.wait_for(is_event("turn/completed", thread_id), seen=seen)
            lifecycle = [(m.method, m.params["item"]["id"]) for m in seen
                         if m.method in ("item/started", "item/completed")
                         and m.params["item"]["type"] == "contextCompaction"]
            assert [method for method, _ in lifecycle] == ["item/started", "item/completed"]
            assert lifecycle[0][1] == lifecycle[1][1]
            completed = next(m for m in seen if m.method == "turn/completed")
            assert completed.params["turn"]["status"] == "completed"
            after = last_total_tokens(seen)
            assert after < before
            assert [r.kind for r in mock_model.requests] == ["turn", "compaction"]

            seen = []
            turn = await server.start_turn(thread_id, "continue MARK-continuation-1")
            assert turn["status"] == "inProgress"
            await server.wait_for(is_event("turn/completed", thread_id), seen=seen)
    (continuation,) = mock_model.requests_containing("MARK-continuation-1")
    assert continuation.kind == "turn"
    assert continuation.input_tokens < mock_model.requests[0].input_tokens + before // 2
    assert mock_model.summary_text in continuation.text and FILLER not in continuation.text


async def test_an_approval_is_surfaced_pending_and_resolved_by_the_answer(
        codex_binary: Path, codex_home: Path, mock_model: MockModel, tmp_path: Path) -> None:
    target = tmp_path / "never-created"
    with anyio.fail_after(60):
        async with open_app_server(codex_binary, codex_home) as server:
            thread_id = (await server.start_thread())["thread"]["id"]
            mock_model.queue_tool_call("exec_command", escalated_command(f"touch {target}"))
            await server.start_turn(thread_id, "touch a file")
            seen: list[Message] = []
            request = await server.wait_for(lambda m: isinstance(m, ServerRequest), seen=seen)
            assert request.method == "item/commandExecution/requestApproval"
            assert request.params["threadId"] == thread_id
            flags = [m.params["status"].get("activeFlags") for m in seen if m.method == "thread/status/changed"]
            assert flags[-1] == ["waitingOnApproval"]
            status = (await server.request("thread/read", {"threadId": thread_id}))["thread"]["status"]
            assert status == {"type": "active", "activeFlags": ["waitingOnApproval"]}

            await server.respond(request.id, {"decision": "decline"})
            resolved = await server.wait_for(is_event("serverRequest/resolved", thread_id))
            assert resolved.params["requestId"] == request.id
            await server.wait_for(is_event("turn/completed", thread_id))
    assert not target.exists()
    assert mock_model.requests_containing("rejected by user")


async def test_an_error_reply_raises_with_the_servers_code_and_message(codex_binary: Path, codex_home: Path) -> None:
    async with open_app_server(codex_binary, codex_home) as server:
        with pytest.raises(AppServerError) as caught:
            await server.start_compaction("00000000-0000-7000-8000-000000000000")
    assert caught.value.method == "thread/compact/start"
    assert caught.value.rpc_code == -32600 and "thread not found" in caught.value.rpc_message


async def test_leaving_the_context_ends_the_process_and_later_calls_fail_clearly(
        codex_binary: Path, codex_home: Path) -> None:
    async with open_app_server(codex_binary, codex_home) as server:
        pass
    assert server._process.returncode is not None
    with pytest.raises(CodexError, match="closed"):
        await server.request("thread/start")
    buffered = [message async for message in server.messages()]  # what arrived before the end stays readable
    assert all(isinstance(m, Notification) for m in buffered)
    with pytest.raises(CodexError, match="closed"):
        await server.next_message(timeout=1)


async def test_notifications_and_requests_keep_arrival_order(codex_binary: Path, codex_home: Path) -> None:
    async with open_app_server(codex_binary, codex_home) as server:
        thread_id = (await server.start_thread())["thread"]["id"]
        await server.start_turn(thread_id, "hello")
        seen: list[Message] = []
        await server.wait_for(is_event("turn/completed", thread_id), seen=seen)
    methods = [m.method for m in seen if isinstance(m, Notification) and m.params.get("threadId") == thread_id]
    assert methods.index("turn/started") < methods.index("item/completed") < methods.index("turn/completed")


MCP_SERVER = '''
from mcp.server import MCPServer
from mcp.types import ToolAnnotations
server = MCPServer("probe")

@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def compaction_status(threadId: str) -> dict:
    """Report the status."""
    return {"threadId": threadId, "marker": "MCP-RESULT-MARKER"}

server.run()
'''


async def test_the_mock_can_make_codex_call_an_mcp_tool(codex_binary: Path, mock_model: MockModel,
                                                         private_dir: Path) -> None:
    import sys

    from tests.support.codex_home import make_isolated_home
    from tests.codex.rekallkit import ready_server_status

    script = private_dir / "probe_mcp.py"
    script.write_text(MCP_SERVER)
    extra = f'[mcp_servers.probe]\ncommand = "{sys.executable}"\nargs = ["{script}"]\n'
    home = make_isolated_home(private_dir / "mcp-home", mock_model.base_url, extra)
    with anyio.fail_after(60):
        async with open_app_server(codex_binary, home) as server:
            thread_id = (await server.start_thread())["thread"]["id"]
            await ready_server_status(server, thread_id, "probe")  # a turn before that would not see the tool
            mock_model.queue_mcp_call("probe", "compaction_status", {"threadId": thread_id})
            await server.start_turn(thread_id, "what is the status?")
            seen: list[Message] = []
            await server.wait_for(is_event("turn/completed", thread_id), seen=seen)
    calls = [m.params["item"] for m in seen if m.method == "item/completed" and m.params["item"]["type"] == "mcpToolCall"]
    assert [(c["server"], c["tool"], c["status"]) for c in calls] == [("probe", "compaction_status", "completed")]
    (answer,) = mock_model.requests_containing("MCP-RESULT-MARKER")
    assert thread_id in answer.text
