"""Who serves the shared app-server socket, and which binary's schema to check.

``codex app-server daemon start`` records its server in ``$CODEX_HOME/app-server-daemon/daemon.pid``
(JSON: ``pid``, ``processStartTime``, ...) and runs the binary it installed under
``$CODEX_HOME/packages/app-server-daemon/current/bin/codex`` (what ``daemon version`` prints as
``managedCodexPath``). A server started by hand (``codex app-server --listen unix://PATH``) has
neither: its schema is checked against the ``codex`` on ``PATH``, with a note that it may not be
the binary that serves the socket.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from rekall.adapters.app_server.releases import RANGE, Release
from rekall.kernel.environment import env_value
from rekall.transports.control_socket import START_HINT
from rekall.transports.endpoint import absolute_codex_home

DAEMON_PID = Path("app-server-daemon") / "daemon.pid"
MANAGED_CODEX = Path("packages") / "app-server-daemon" / "current" / "bin" / "codex"


@attrs.frozen
class ServedBy:
    """Whether the daemon serves the socket, and the binary whose schema stands for the server's."""

    daemon_pid: int | None
    binary: str | None
    #: Where ``binary`` came from, in words (and why it may differ from the server's).
    note: str

    @property
    def daemon_managed(self) -> bool:
        return self.daemon_pid is not None


def _running_daemon(pid_file: Path, proc: Path) -> int | None:
    """The daemon's pid when its record names a live ``codex app-server --managed-daemon``."""
    try:
        pid = json.loads(pid_file.read_text(encoding="utf-8"))["pid"]
        argv = (proc / str(int(pid)) / "cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return int(pid) if b"app-server" in argv and b"--managed-daemon" in argv else None


def served_by(env: Mapping[str, str], *, proc: Path = Path("/proc")) -> ServedBy:
    home = Path(absolute_codex_home(env))
    pid = _running_daemon(home / DAEMON_PID, proc)
    if pid is not None and env_value(env, "REKALL_APP_SERVER_SOCKET") is None:
        return ServedBy(pid, str(home / MANAGED_CODEX), f"the daemon's managedCodexPath (daemon pid {pid})")
    on_path = shutil.which("codex", path=env.get("PATH"))
    why = ("the server is not daemon-managed" if pid is None
           else "REKALL_APP_SERVER_SOCKET names a socket the daemon may not serve")
    if on_path is None:
        return ServedBy(pid, None, f"{why}, and no `codex` is on PATH")
    return ServedBy(pid, on_path, f"the `codex` on PATH ({why}: it may not be the binary serving the socket)")


def schema_report(env: Mapping[str, str], server_version: str | None) -> dict[str, Any]:
    """The public schema check for the shared app-server's binary (cached by binary identity), with
    where the server's own version stands (``release``). A schema that could not be checked is
    taken on trust only for a release in the declared range: otherwise the report carries the
    ``refusal`` that ``schedule`` raises."""
    from rekall.codex.schema import check_compatibility, default_cache_dir

    release = Release.of(server_version)
    served = served_by(env)
    if served.binary is None:
        report: dict[str, Any] = {"status": "not_checked", "reason": "no_binary", "note": served.note}
    else:
        report = check_compatibility(Path(served.binary), cache_dir=default_cache_dir(env),
                                     suite="app-server").to_json()
        report.update(binaryPath=served.binary, binaryNote=served.note)
    report["release"] = release.to_json()
    if report["status"] == "not_checked" and release.standing != "supported":
        report["refusal"] = {"message": f"{release.words}, and its schema could not be checked ({served.note})",
                             "hint": f"put the Codex that serves the socket on PATH, or run Codex {RANGE}"}
    return report


__all__ = ["ServedBy", "schema_report", "served_by"]
