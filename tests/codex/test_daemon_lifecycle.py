"""What the real daemon leaves behind, and that the test kit ends it (a second, short-lived daemon)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rekall.usecases.doctor import diagnose
from rekall.transports import EndpointMissing
from rekall.transports.control_socket import resolve_control_socket
from tests.codex.daemonkit import daemon_processes, start_daemon, stop_daemon
from tests.support.codex_home import make_isolated_home
from tests.support.mock_model import MockModel

pytestmark = pytest.mark.codex


def env_of(home: Path, tmp_path: Path) -> dict[str, str]:
    return {"CODEX_HOME": str(home), "TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin",
            "REKALL_JOBS_DIR": str(tmp_path / "jobs")}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Codex 0.156.0 connects to its daemon through ``$CODEX_HOME/app-server-control/…``
    itself, which must fit in a socket address (108 bytes): pytest's own folders are too long."""
    path = Path(tempfile.mkdtemp(prefix="rkdl", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_daemon_stop_leaves_the_pid_update_loop_and_the_kit_ends_it_by_pid(
        codex_binary: Path, mock_model: MockModel, tmp_path: Path, short_dir: Path) -> None:
    home = make_isolated_home(short_dir / "home", mock_model.base_url)
    link = home / "app-server-control" / "app-server-control.sock"
    daemon = start_daemon(codex_binary, home)
    try:
        assert (daemon.status["status"], daemon.status["socketPath"]) == ("started", str(link))
        assert daemon.status["managedCodexPath"] == str(home / "packages" / "app-server-daemon" / "current" / "bin"
                                                         / "codex")
        helper = json.loads((home / "app-server-daemon" / "daemon-updater.pid").read_text())["pid"]
        assert sorted(daemon_processes(home)) == sorted([daemon.status["pid"], helper])
        target = Path(os.readlink(link))
        assert target.parent == Path(os.environ.get("TMPDIR") or "/tmp") / f"codex-daemon-{os.geteuid()}"

        running = {row.name: row for row in asyncio.run(diagnose(env_of(home, tmp_path))).rows}
        assert running["app_server"].level == "GREEN"
        assert f"served by the daemon (pid {daemon.status['pid']})" in running["app_server"].detail

        stopped = daemon.daemon_command("stop")
        assert stopped.returncode == 0 and json.loads(stopped.stdout)["status"] == "stopped"
        assert daemon_processes(home) == [helper]
        assert b"pid-update-loop" in Path(f"/proc/{helper}/cmdline").read_bytes()
        assert not os.path.lexists(link) and not target.exists()
        with pytest.raises(EndpointMissing, match="so none listens there"):
            resolve_control_socket({"CODEX_HOME": str(home)})
        after = {row.name: row for row in asyncio.run(diagnose(env_of(home, tmp_path))).rows}
        assert after["app_server_socket"].level == "GREEN" and "so none listens there" in after["app_server_socket"].detail
        assert after["app_server"].detail == "not applicable: no shared app-server runs"
    finally:
        stop_daemon(daemon)
    assert daemon_processes(home) == []
    assert not (home / "packages").exists()
