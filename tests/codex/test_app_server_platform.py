"""The app-server platform, owner selection, probe and doctor against the REAL daemon (one per session).

The user's terminal is the ``websockets`` library's own client (no rekall code); it must hear
nothing while rekall only observes.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall.usecases import service
from rekall.adapters.app_server.platform import SharedAppServerPlatform, ThreadNotServed
from rekall.usecases.doctor import diagnose
from rekall.adapters.owners import OwnerUnknown, find_owner
from tests.codex.daemonkit import Daemon, PeerClient, peer_client
from tests.support.mock_model import MockModel

pytestmark = [pytest.mark.codex, pytest.mark.anyio]


@pytest.fixture
def env(app_server_daemon: Daemon, private_dir: Path) -> dict[str, str]:
    """rekall's environment next to the daemon: its CODEX_HOME; no VS Code extension anywhere."""
    return {**app_server_daemon.env, "TMPDIR": str(private_dir), "PATH": "/usr/bin:/bin",
            "REKALL_JOBS_DIR": str(private_dir / "jobs")}


async def thread_with_a_turn(user: PeerClient, model: MockModel, *, mcp: bool = True) -> str:
    """A thread with one finished turn, and (``mcp``) its MCP servers started (the daemon runs ``rekall mcp``)."""
    start = len(user.messages)
    thread_id = (await user.request("thread/start"))["thread"]["id"]
    if mcp:
        await user.wait_for(lambda m: m.get("method") == "mcpServer/startupStatus/updated"
                            and m["params"].get("threadId") == thread_id and m["params"].get("status") == "ready",
                            start=start, timeout=60)
    start = len(user.messages)
    model.queue_text("noted")
    await user.request("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "hello"}]})
    await user.wait_for(lambda m: m.get("method") == "turn/completed"
                        and m["params"]["threadId"] == thread_id, start=start)
    return thread_id


async def test_probe_finds_the_thread_on_the_shared_app_server_and_the_user_hears_nothing(
        app_server_daemon: Daemon, daemon_model: MockModel, env: dict[str, str]) -> None:
    async with peer_client(app_server_daemon.socket_path) as user:
        thread_id = await thread_with_a_turn(user, daemon_model)
        quiet_from = len(user.messages)
        with anyio.fail_after(60):
            probed = await service.probe(thread_id, env=env)
        await anyio.sleep(0.3)  # nothing to await: give a stray notification time to arrive
        heard: list[dict[str, Any]] = user.messages[quiet_from:]

    assert heard == []  # read-only: no thread/resume, so no thread/goal/cleared for the user
    assert probed["platform"] == "app-server" and probed["idle"] is True and probed["ownerId"] is None
    assert probed["contextTokens"] is None and "unknown until a worker follows" in probed["headroomNote"]
    assert probed["serverVersion"] == app_server_daemon.version and probed["endpoint"]["peerCheck"].endswith("matches ours")
    schema = probed["compatibility"]["publicSchema"]
    assert schema["status"] == "compatible"
    assert schema["binaryPath"] == app_server_daemon.status["managedCodexPath"]
    assert "managedCodexPath" in schema["binaryNote"]


async def test_a_thread_before_its_first_turn_asks_for_a_first_message(
        app_server_daemon: Daemon, env: dict[str, str]) -> None:
    async with peer_client(app_server_daemon.socket_path) as user:
        thread_id = (await user.request("thread/start"))["thread"]["id"]
        platform = SharedAppServerPlatform(env)
        with anyio.fail_after(60):
            with pytest.raises(ThreadNotServed) as observed:
                await platform.observe(thread_id, request_timeout_s=10)
            with pytest.raises(ThreadNotServed) as followed:  # the daemon's own answer: -32600 no rollout found
                await platform.follow(thread_id, request_timeout_s=10)
    for caught in (observed, followed):
        assert "no rollout yet" in caught.value.message and caught.value.hint == "send a first message, then schedule"


async def test_a_thread_no_platform_has_is_reported_with_what_each_said(env: dict[str, str]) -> None:
    unknown = str(uuid.uuid4())
    with anyio.fail_after(60), pytest.raises(OwnerUnknown) as caught:
        await find_owner(unknown, env, request_timeout_s=10)
    message = caught.value.message
    assert message.startswith(f"no platform serves thread {unknown}: the VS Code extension: ")
    assert f"the shared app-server: a shared app-server runs at {env['CODEX_HOME']}" in message
    assert f"does not have thread {unknown} loaded" in message
    # What rekall cannot tell apart, then how the user checks the session and what brings it in reach.
    assert "-c/--config" in message and "daemon_auto_start" in message and "rekall cannot tell which" in message
    assert "`Server: Local background server`" in caught.value.hint and "codex --remote unix://" in caught.value.hint


async def test_doctor_names_the_daemon_its_version_and_the_binary_whose_schema_it_checked(
        app_server_daemon: Daemon, daemon_model: MockModel, env: dict[str, str]) -> None:
    async with peer_client(app_server_daemon.socket_path) as user:
        thread_id = await thread_with_a_turn(user, daemon_model)
        with anyio.fail_after(120):
            report = await diagnose({**env, "CODEX_THREAD_ID": thread_id})
    rows = {row.name: row for row in report.rows}
    assert all(rows[name].level == "GREEN" for name in ("app_server_socket", "app_server", "app_server_thread",
                                                        "app_server_schema")), rows
    assert "is a symbolic link to" in rows["app_server_socket"].detail and "mode 0600" in rows["app_server_socket"].detail
    assert f"Codex {app_server_daemon.version}, served by the daemon (pid {app_server_daemon.status['pid']})" in rows["app_server"].detail
    assert thread_id in rows["app_server_thread"].detail and "idle" in rows["app_server_thread"].detail
    assert app_server_daemon.status["managedCodexPath"] in rows["app_server_schema"].detail
    assert "all 15 checks pass" in rows["app_server_schema"].detail  # the 7 public ones and the 8 of this platform
    assert rows["owner"].level != "GREEN"  # the extension does not have it: said, not hidden
    # No VS Code here: its absence is worth a look, not fatal, while the shared app-server serves.
    assert rows["ipc_endpoint"].level == "AMBER" and "only VS Code chats need it" in rows["ipc_endpoint"].detail
    assert rows["codex_binary"].level == "AMBER" and report.verdict == "AMBER"
    assert report.served == ("terminal sessions on the shared app-server",) and report.ok
    assert report.answer == "rekall can serve terminal sessions on the shared app-server (not the VS Code extension)"


async def test_a_listener_started_by_hand_is_served_and_named_as_not_daemon_managed(
        codex_binary: Path, codex_home: Path, mock_model: MockModel, private_dir: Path) -> None:
    import os
    import subprocess

    from tests.support.appserver import app_server_env

    sock = private_dir / "listener" / "app.sock"
    sock.parent.mkdir(mode=0o700)
    server = subprocess.Popen([str(codex_binary), "app-server", "--listen", f"unix://{sock}"],
                              env=app_server_env(codex_home), cwd=codex_home,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target: Path | None = None
    try:
        with anyio.fail_after(60):
            while not sock.exists():  # the listener announces nothing: its socket appearing is the event
                await anyio.sleep(0.05)
            target = Path(os.readlink(sock)) if sock.is_symlink() else None
            env = {"CODEX_HOME": str(codex_home), "REKALL_APP_SERVER_SOCKET": f"unix://{sock}",
                   "PATH": f"{codex_binary.parent}:/usr/bin:/bin", "TMPDIR": str(private_dir),
                   "REKALL_JOBS_DIR": str(private_dir / "jobs")}
            async with peer_client(sock) as user:
                thread_id = await thread_with_a_turn(user, mock_model, mcp=False)
                probed = await service.probe(thread_id, env=env)
                rows = {row.name: row for row in (await diagnose({**env, "CODEX_THREAD_ID": thread_id})).rows}
    finally:
        server.terminate()
        server.wait(timeout=30)
        if target is not None:
            target.unlink(missing_ok=True)
    assert probed["platform"] == "app-server" and probed["endpoint"]["source"] == "REKALL_APP_SERVER_SOCKET"
    assert "not daemon-managed" in probed["compatibility"]["publicSchema"]["binaryNote"]
    assert "served by an app-server not managed by `codex app-server daemon`" in rows["app_server"].detail
    assert rows["app_server_thread"].level == "GREEN"
    assert f"{codex_binary} (the `codex` on PATH (the server is not daemon-managed" in rows["app_server_schema"].detail
