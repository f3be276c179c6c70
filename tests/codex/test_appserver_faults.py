"""The app-server client against a scripted stand-in server: faults real Codex rarely shows."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tests.support.appserver import AppServerClosed, AppServerTimeout, ServerRequest, open_app_server
from rekall.kernel.errors import CodexError

pytestmark = pytest.mark.anyio

# A tiny JSONL server: answers initialize, then behaves as the request's method says.
SERVER = r'''
import json, signal, sys, time
mode = sys.argv[-1] if len(sys.argv) > 2 else ""
def send(obj): sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"id": rid, "result": {"userAgent": "stand-in/0.0.1"}})
    elif method == "echo":
        send({"method": "note", "params": {"n": 1}})
        send({"id": 0, "method": "ask", "params": {"q": "?"}})
        send({"id": 999, "result": "late reply for nobody"})
        send({"id": rid, "result": msg["params"]})
    elif method == "answered":
        send({"method": "got", "params": {"answer": msg.get("result")}})
    elif method == "fail":
        send({"id": rid, "error": {"code": -32600, "message": "nope", "data": {"why": 1}}})
    elif method == "die":
        sys.exit(3)
    elif method == "garbage":
        sys.stdout.write("this is not json\n"); sys.stdout.flush()
    elif method == "list":
        sys.stdout.write("[1, 2]\n"); sys.stdout.flush()
    elif method == "silence":
        pass
    elif "id" in msg and method is None:
        send({"method": "got", "params": {"answer": msg.get("result")}})
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)
'''


def stand_in(tmp_path: Path, mode: str = "") -> Path:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    launcher = tmp_path / "codex"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@" {mode}\n')
    launcher.chmod(0o700)
    return launcher


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return path


async def test_replies_notifications_and_server_requests_are_routed(tmp_path: Path, home: Path) -> None:
    with anyio.fail_after(10):
        async with open_app_server(stand_in(tmp_path), home) as server:
            assert server.server_info == {"userAgent": "stand-in/0.0.1"}
            assert await server.request("echo", {"x": 1}) == {"x": 1}
            note = await server.next_message()
            ask = await server.next_message()
            assert (note.method, note.params) == ("note", {"n": 1})
            assert isinstance(ask, ServerRequest) and (ask.id, ask.method) == (0, "ask")
            await server.respond(ask.id, {"decision": "accept"})
            got = await server.next_message()
            assert got.params == {"answer": {"decision": "accept"}}


async def test_an_error_reply_carries_code_message_and_data(tmp_path: Path, home: Path) -> None:
    from tests.support.appserver import AppServerError

    async with open_app_server(stand_in(tmp_path), home) as server:
        with pytest.raises(AppServerError) as caught:
            await server.request("fail")
    assert (caught.value.rpc_code, caught.value.rpc_message, caught.value.data) == (-32600, "nope", {"why": 1})
    assert "fail" in caught.value.message


async def test_a_server_that_dies_mid_request_fails_it_with_an_unknown_outcome(tmp_path: Path, home: Path) -> None:
    with anyio.fail_after(10):
        async with open_app_server(stand_in(tmp_path), home) as server:
            with pytest.raises(AppServerClosed) as caught:
                await server.request("die")
    assert "before answering die" in caught.value.message and "unknown" in (caught.value.hint or "")


@pytest.mark.parametrize(("method", "reason"), [("garbage", "not JSON"), ("list", "not an object")])
async def test_a_malformed_line_closes_the_client_with_the_reason(tmp_path: Path, home: Path, method: str,
                                                                  reason: str) -> None:
    with anyio.fail_after(10):
        async with open_app_server(stand_in(tmp_path), home) as server:
            with pytest.raises(AppServerClosed, match=reason):
                await server.request(method)
            with pytest.raises(AppServerClosed, match=reason):
                await server.request("echo")


async def test_a_request_without_a_reply_times_out_as_unknown(tmp_path: Path, home: Path) -> None:
    async with open_app_server(stand_in(tmp_path), home) as server:
        with pytest.raises(AppServerTimeout) as caught:
            await server.request("silence", timeout=0.2)
        assert "unknown" in (caught.value.hint or "")
        assert await server.request("echo", {"still": "usable"}) == {"still": "usable"}


async def test_a_server_that_ignores_end_of_input_and_sigterm_is_killed(tmp_path: Path, home: Path) -> None:
    with anyio.fail_after(10):
        async with open_app_server(stand_in(tmp_path, "stubborn"), home, exit_grace_s=0.2) as server:
            pass
    assert server._process.returncode is not None


async def test_the_stderr_log_is_private(tmp_path: Path, home: Path) -> None:
    async with open_app_server(stand_in(tmp_path), home) as server:
        pass
    assert server.stderr_log.stat().st_mode & 0o777 == 0o600


async def test_a_binary_that_cannot_start_is_a_clear_error(tmp_path: Path, home: Path) -> None:
    with pytest.raises(CodexError) as caught:
        async with open_app_server(tmp_path / "missing-codex", home):
            pass
    assert caught.value.code == "app_server_spawn_failed" and "missing-codex" in caught.value.message
