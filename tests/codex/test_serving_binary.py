"""Who serves the shared app-server socket, and doctor's rows for it, on real files and sockets."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import anyio
import pytest

from rekall.adapters.app_server.platform import diagnose
from rekall.adapters.app_server.serving_binary import served_by
from tests.codex.fakeserver import env_for, folder  # noqa: F401 (a fixture)

pytestmark = pytest.mark.anyio


def _fake_proc(root: Path, pid: int, *argv: str) -> Path:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    return root


def _daemon_pid(home: Path, pid: int) -> None:
    (home / "app-server-daemon").mkdir(parents=True)
    (home / "app-server-daemon" / "daemon.pid").write_text(json.dumps({"pid": pid, "processStartTime": "x"}))


def test_a_live_managed_daemon_is_named_and_its_managed_binary_is_the_one_checked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _daemon_pid(home, 4242)
    proc = _fake_proc(tmp_path / "proc", 4242, "/x/codex", "app-server", "--listen", "unix://", "--managed-daemon")
    served = served_by({"CODEX_HOME": str(home), "PATH": ""}, proc=proc)
    assert served.daemon_managed and served.daemon_pid == 4242
    assert served.binary == str(home / "packages" / "app-server-daemon" / "current" / "bin" / "codex")
    assert "managedCodexPath" in served.note


def test_a_stale_daemon_record_is_not_taken_for_the_server_and_the_codex_on_path_comes_with_a_note(
        tmp_path: Path) -> None:
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    _daemon_pid(home, 4242)
    proc = _fake_proc(tmp_path / "proc", 4242, "/usr/bin/sleep", "100")  # the pid was reused by another program
    bin_dir.mkdir()
    (bin_dir / "codex").write_text("#!/bin/sh\n")
    (bin_dir / "codex").chmod(0o755)
    served = served_by({"CODEX_HOME": str(home), "PATH": str(bin_dir)}, proc=proc)
    assert not served.daemon_managed and served.binary == str(bin_dir / "codex")
    assert served.note == ("the `codex` on PATH (the server is not daemon-managed: it may not be the binary "
                           "serving the socket)")
    assert served_by({"CODEX_HOME": str(home), "PATH": ""}, proc=proc).binary is None


@pytest.mark.parametrize("opened", ["folder", "socket"])
async def test_a_socket_open_to_others_is_red_and_the_server_is_not_contacted(folder: Path, opened: str) -> None:
    path = folder / "app.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    os.chmod(path, 0o600)
    os.chmod(folder if opened == "folder" else path, 0o755 if opened == "folder" else 0o666)
    with listener, anyio.fail_after(10):
        rows = await diagnose({**env_for(path), "CODEX_HOME": str(folder), "PATH": ""})
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    assert [(r.name, r.level) for r in rows] == [("app_server_socket", "RED"), ("app_server", "AMBER"),
                                                 ("app_server_version", "AMBER"), ("app_server_schema", "AMBER")]
    assert "chmod" in rows[0].hint and "fix the app_server_socket row first" in rows[1].hint


async def test_a_link_whose_target_folder_is_not_private_is_red(tmp_path: Path, folder: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o755)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(open_dir / "s"))
    os.chmod(open_dir / "s", 0o600)
    (folder / "app.sock").symlink_to(open_dir / "s")
    with listener, anyio.fail_after(10):
        rows = await diagnose({**env_for(folder / "app.sock"), "CODEX_HOME": str(folder), "PATH": ""})
    assert rows[0].name == "app_server_socket" and rows[0].level == "RED"
    assert str(open_dir) in rows[0].detail


async def test_no_shared_app_server_is_not_an_error_but_a_thread_that_could_be_on_one_is_named(
        tmp_path: Path) -> None:
    rows = await diagnose({"CODEX_HOME": str(tmp_path), "PATH": ""})
    assert [(r.name, r.level) for r in rows] == [("app_server_socket", "GREEN"), ("app_server", "GREEN"),
                                                 ("app_server_version", "GREEN"), ("app_server_schema", "GREEN")]
    assert "a plain `codex` where daemon auto-start is on" in rows[0].detail and "codex --remote" in rows[0].detail
    rows = await diagnose({"CODEX_HOME": str(tmp_path), "PATH": "", "CODEX_THREAD_ID": "t-1"})
    (thread,) = [r for r in rows if r.name == "app_server_thread"]
    assert thread.level == "AMBER" and "thread t-1 is not on a shared app-server: none runs here" in thread.detail
    assert "-c/--config" in thread.detail and "rekall cannot tell which" in thread.detail
    assert "`/status` shows `Server: Local background server`" in thread.hint and "codex --remote unix://" in thread.hint


@pytest.mark.codex
@pytest.mark.slow
def test_a_daemon_left_on_an_older_codex_than_the_cli_is_named_with_both_versions(
        codex_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """What an update leaves behind (openai/codex #46468): the daemon still runs the release it
    started with while `codex` on PATH is newer. Both real releases; CI installs the older one."""
    import subprocess
    import sys

    from tests.codex.daemonkit import start_daemon, stop_daemon
    from tests.support.pinned import cached_codex_launcher

    older = cached_codex_launcher({**os.environ, "REKALL_CODEX_VERSION": "0.163.0"})
    if not older.is_file():
        pytest.skip(f"Codex 0.163.0 is not installed at {older} (scripts/install-codex installs the CI releases)")
    home = tmp_path_factory.mktemp("older") / "c"
    home.mkdir(mode=0o700)
    daemon = start_daemon(older, home)
    try:
        env = {**os.environ, "CODEX_HOME": str(home), "PATH": f"{codex_binary.parent}:/usr/bin:/bin",
               "COLUMNS": "300"}
        done = subprocess.run([sys.executable, "-m", "rekall", "doctor", "--json"], env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        stop_daemon(daemon)
    report = json.loads(done.stdout)
    (row,) = [r for r in report["rows"] if r["name"] == "app_server_version"]
    assert row["level"] == "AMBER" and "the daemon runs Codex 0.163.0" in row["detail"], row
    assert f"({codex_binary}) is Codex 0.171.0" in row["detail"]
    assert row["hint"].startswith("restart the daemon: `codex app-server daemon stop`")
    assert report["next"] == row["hint"]  # the one next step, the extension being absent here
