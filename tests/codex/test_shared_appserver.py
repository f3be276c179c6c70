"""rekall's client of the shared app-server against the REAL daemon (one per session).

Client A is the ``websockets`` library's own client playing the user's terminal; client B is
rekall's :func:`open_shared_app_server`. The mock model is shared by the session: tests find
their requests by marker, never by position.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

import rekall

from rekall.adapters.app_server.rpc import AppServerError, Message, ServerRequest
from rekall.adapters.app_server.client import SharedAppServer, open_shared_app_server
from rekall.transports.control_socket import resolve_control_socket
from tests.codex.daemonkit import Daemon, PeerClient, peer_client
from tests.support.mock_model import MockModel, escalated_command

pytestmark = [pytest.mark.codex, pytest.mark.anyio]

FILLER = "context filler " * 8000  # ~120 kB of user text: about 30k mock tokens


def on_thread(method: str, thread_id: str):
    def match(message: Message | dict[str, Any]) -> bool:
        if isinstance(message, dict):
            return message.get("method") == method and message.get("params", {}).get("threadId") == thread_id
        return message.method == method and message.params.get("threadId") == thread_id

    return match


async def filled_thread(user: PeerClient) -> str:
    """A thread started by the user's client, with one finished turn of ~30k tokens."""
    thread_id = (await user.request("thread/start"))["thread"]["id"]
    start = len(user.messages)
    await user.request("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": FILLER}]})
    await user.wait_for(on_thread("turn/completed", thread_id), start=start)
    return thread_id


def usage_steps(messages: list[Message]) -> list[tuple[int, int]]:
    """``(last.totalTokens, last.inputTokens)`` of each token-usage update, in order."""
    return [(m.params["tokenUsage"]["last"]["totalTokens"], m.params["tokenUsage"]["last"]["inputTokens"])
            for m in messages if m.method == "thread/tokenUsage/updated"]


async def test_rekall_connects_through_the_daemons_symlinked_socket_and_reports_every_check(
        app_server_daemon: Daemon) -> None:
    uid = os.geteuid()
    link = app_server_daemon.codex_home / "app-server-control" / "app-server-control.sock"
    assert app_server_daemon.socket_path == link and link.is_symlink()
    with anyio.fail_after(30):
        async with open_shared_app_server(app_server_daemon.env) as server:
            socket = server.socket
            assert (socket.path, socket.source) == (str(link), "CODEX_HOME")
            assert socket.target == os.path.realpath(link) and Path(socket.target).parent.name == f"codex-daemon-{uid}"
            assert socket.checks == (
                f"folder {link.parent}: a real directory, owned by uid {uid}, mode 0700",
                f"{link} is a symbolic link to {socket.target}; read once, never followed further",
                f"target folder {Path(socket.target).parent}: a real directory, owned by uid {uid}, mode 0700",
                f"socket {socket.target}: a socket, owned by uid {uid}, mode 0600",
            )
            assert socket.peer_check == f"uid {uid} matches ours"
            assert server.server_version == app_server_daemon.version
            # The prefix names the daemon's first client (whichever test connected first); the end names us.
            assert re.match(rf"^[^/\s]+/{re.escape(app_server_daemon.version)} ", server.server_info["userAgent"])
            assert server.server_info["userAgent"].endswith(f"(rekall; {rekall.__version__})")
            assert server.server_info["codexHome"] == str(app_server_daemon.codex_home)


async def test_a_thread_started_by_another_client_is_listed_and_read_without_attaching(
        app_server_daemon: Daemon) -> None:
    with anyio.fail_after(60):
        async with peer_client(app_server_daemon.socket_path) as user:
            thread_id = await filled_thread(user)
            mark = len(user.messages)
            async with open_shared_app_server(app_server_daemon.env) as server:
                page = await server.request("thread/loaded/list")
                assert set(page) == {"data", "nextCursor"} and thread_id in page["data"]
                assert thread_id in await server.loaded_threads()
                thread = await server.read_thread(thread_id)
                assert thread["id"] == thread_id and thread["status"] == {"type": "idle"}
                assert thread["turns"] == [] and thread["source"] == "vscode"
                with_turns = await server.read_thread(thread_id, include_turns=True)
                assert [turn["status"] for turn in with_turns["turns"]] == ["completed"]
            # thread/read is an observation: the user's client heard nothing about it. The daemon
            # reports the thread's MCP servers starting (rekall mcp is configured) on its own clock.
            heard = [m for m in user.messages[mark:] if m.get("params", {}).get("threadId") == thread_id]
            assert [m for m in heard if m.get("method") != "mcpServer/startupStatus/updated"] == []


async def test_attaching_with_resume_notifies_every_client_and_excluding_turns_skips_the_token_count(
        app_server_daemon: Daemon) -> None:
    with anyio.fail_after(60):
        async with peer_client(app_server_daemon.socket_path) as user:
            thread_id = await filled_thread(user)
            mark = len(user.messages)
            async with open_shared_app_server(app_server_daemon.env) as quiet:
                resumed = await quiet.resume_thread(thread_id, exclude_turns=True)
                assert resumed["thread"]["id"] == thread_id and resumed["thread"]["turns"] == []
                seen = await until_goal_cleared(quiet, thread_id)
                assert [m.method for m in seen if m.method in WATCHED] == ["thread/goal/cleared"]
            async with open_shared_app_server(app_server_daemon.env) as full:
                await full.resume_thread(thread_id, exclude_turns=False)
                seen = await until_goal_cleared(full, thread_id)
                assert [m.method for m in seen if m.method in WATCHED] == [
                    "deprecationNotice", "thread/tokenUsage/updated", "thread/goal/cleared"]
                notice = next(m for m in seen if m.method == "deprecationNotice")
                assert "Full-history hydration is deprecated" in notice.params["summary"]
            await user.wait_for(on_thread("thread/goal/cleared", thread_id), start=mark)


WATCHED = ("deprecationNotice", "thread/tokenUsage/updated", "thread/goal/cleared")


async def until_goal_cleared(server: SharedAppServer, thread_id: str) -> list[Message]:
    """Messages up to ``thread/goal/cleared``, and any sent before the reply to one more request."""
    seen: list[Message] = []
    await server.wait_for(on_thread("thread/goal/cleared", thread_id), seen=seen)
    await server.loaded_threads()  # a round trip: whatever the server sent before its reply has arrived
    return seen + drain(server)


def drain(server: SharedAppServer) -> list[Message]:
    """Every message already delivered to ``server`` and not yet read."""
    out = []
    while True:
        try:
            out.append(server._receive.receive_nowait())
        except anyio.WouldBlock:
            return out


async def test_rekall_compacts_a_thread_of_another_client_and_both_see_the_compaction_item(
        app_server_daemon: Daemon) -> None:
    with anyio.fail_after(90):
        async with peer_client(app_server_daemon.socket_path) as user:
            thread_id = await filled_thread(user)
            async with open_shared_app_server(app_server_daemon.env) as server:
                await server.resume_thread(thread_id)
                mark = len(user.messages)
                seen: list[Message] = []
                await server.start_compaction(thread_id)
                done = await server.wait_for(on_thread("turn/completed", thread_id), seen=seen)
                assert done.params["turn"]["status"] == "completed"
                items = [(m.method, m.params["item"]["type"], m.params["item"]["id"]) for m in seen
                         if m.method in ("item/started", "item/completed")]
                assert [(method, kind) for method, kind, _ in items] == [
                    ("item/started", "contextCompaction"), ("item/completed", "contextCompaction")]
                assert items[0][2] == items[1][2]
                assert usage_steps(seen), "no thread/tokenUsage/updated during the compaction"
                await user.wait_for(on_thread("turn/completed", thread_id), start=mark)
                user_items = [(m["method"], m["params"]["item"]["type"], m["params"]["item"]["id"])
                              for m in user.messages[mark:] if m["method"] in ("item/started", "item/completed")]
                assert user_items == items


async def test_token_usage_during_a_compaction_repeats_the_old_count_then_the_request_then_the_estimate(
        app_server_daemon: Daemon) -> None:
    """The awkward order real Codex shows: the post-compaction figure is the LAST update before
    ``item/completed``, not the first one after ``item/started``."""
    with anyio.fail_after(90):
        async with peer_client(app_server_daemon.socket_path) as user:
            thread_id = await filled_thread(user)
            async with open_shared_app_server(app_server_daemon.env) as server:
                resume: list[Message] = []
                await server.resume_thread(thread_id, exclude_turns=False)
                await server.wait_for(on_thread("thread/goal/cleared", thread_id), seen=resume)
                ((before, _),) = usage_steps(resume)
                seen: list[Message] = []
                await server.start_compaction(thread_id)
                await server.wait_for(on_thread("turn/completed", thread_id), seen=seen)
    methods = [m.method for m in seen]
    started, completed = methods.index("item/started"), methods.index("item/completed")
    assert usage_steps(seen[:started]) == [] and usage_steps(seen[completed:]) == []
    old, request, estimate = usage_steps(seen[started:completed])
    assert old == (before, old[1])  # 1. the count from before the compaction, repeated
    assert request[0] > before  # 2. the compaction request's own usage: the history plus the prompt
    assert estimate[1] == 0 and estimate[0] < before  # 3. an estimate of the compacted context
    assert seen[completed].params["item"]["type"] == "contextCompaction"


async def test_a_continuation_turn_sent_by_rekall_reaches_the_model_and_the_other_client(
        app_server_daemon: Daemon, daemon_model: MockModel) -> None:
    marker = f"MARK-{uuid.uuid4()}"
    with anyio.fail_after(60):
        async with peer_client(app_server_daemon.socket_path) as user:
            thread_id = await filled_thread(user)
            async with open_shared_app_server(app_server_daemon.env) as server:
                await server.resume_thread(thread_id)
                mark = len(user.messages)
                turn = await server.start_turn(thread_id, f"continue {marker}")
                started = await user.wait_for(on_thread("turn/started", thread_id), start=mark)
                assert started["params"]["turn"]["id"] == turn["id"]
                await server.wait_for(on_thread("turn/completed", thread_id))
    (request,) = daemon_model.requests_containing(marker)
    assert request.kind == "turn"


async def test_a_server_request_for_the_user_is_surfaced_to_rekall_and_left_for_the_user(
        app_server_daemon: Daemon, daemon_model: MockModel, tmp_path: Path) -> None:
    target = tmp_path / "never-created"
    with anyio.fail_after(60):
        async with peer_client(app_server_daemon.socket_path) as user:
            thread_id = await filled_thread(user)
            async with open_shared_app_server(app_server_daemon.env) as server:
                await server.resume_thread(thread_id)
                daemon_model.queue_tool_call("exec_command", escalated_command(f"touch {target}"))
                mark = len(user.messages)
                await user.request("turn/start", {"threadId": thread_id,
                                                  "input": [{"type": "text", "text": "touch the file"}]})
                ask = await server.wait_for(lambda m: isinstance(m, ServerRequest))
                assert ask.method == "item/commandExecution/requestApproval"
                assert ask.params["threadId"] == thread_id
                assert not hasattr(server, "respond")  # rekall cannot answer for the user
                status = (await server.read_thread(thread_id))["status"]
                assert status == {"type": "active", "activeFlags": ["waitingOnApproval"]}
                user_ask = await user.wait_for(lambda m: m.get("method") == ask.method and "id" in m, start=mark)
                await user.connection.send(
                    '{"id": %s, "result": {"decision": "decline"}}' % json_id(user_ask["id"]))
                resolved = await server.wait_for(on_thread("serverRequest/resolved", thread_id))
                assert resolved.params["requestId"] == ask.id
                await server.wait_for(on_thread("turn/completed", thread_id))
    assert not target.exists()


async def test_a_thread_before_its_first_turn_is_listed_but_cannot_be_resumed(app_server_daemon: Daemon) -> None:
    with anyio.fail_after(30):
        async with peer_client(app_server_daemon.socket_path) as user:
            thread_id = (await user.request("thread/start"))["thread"]["id"]
            async with open_shared_app_server(app_server_daemon.env) as server:
                assert thread_id in await server.loaded_threads()
                with pytest.raises(AppServerError) as caught:
                    await server.resume_thread(thread_id)
    assert caught.value.rpc_code == -32600
    assert caught.value.rpc_message == f"no rollout found for thread id {thread_id}"


def json_id(value: int | str) -> str:
    return str(value) if isinstance(value, int) else f'"{value}"'
