"""rekall registered with the real Codex: its config, its CLI, and the server status it reports.

Codex 0.171 starts a stdio MCP server with a short allowlist of variables (HOME, PATH, LANG,
SHELL, TERM and the CA-bundle ones): ``CODEX_HOME`` and ``REKALL_*`` reach rekall only when
the registration sets them (``env``) or forwards them (``env_vars``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.appserver import AppServer, Message, app_server_env
from tests.support.account_home import account_env

SERVER = "rekall"
READY_TIMEOUT_S = 30.0


def rekall_server_toml(jobs_dir: Path) -> str:
    """``[mcp_servers.rekall]`` running this checkout's ``rekall mcp`` with a private jobs dir."""
    return "\n".join([
        f"[mcp_servers.{SERVER}]",
        f"command = {json.dumps(sys.executable)}",
        'args = ["-m", "rekall", "mcp"]',
        "",
        f"[mcp_servers.{SERVER}.env]",
        f"REKALL_JOBS_DIR = {json.dumps(str(jobs_dir))}",
        *(f"{k} = {json.dumps(v)}" for k, v in account_env().items()),
        "",
    ])


def codex_cli(binary: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``codex ARGS`` against the isolated ``home``; a failure shows its output."""
    result = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60,
                            env=app_server_env(home), cwd=home)
    assert result.returncode == 0, f"codex {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result


def startup_of(name: str):
    def match(message: Message) -> bool:
        return (message.method == "mcpServer/startupStatus/updated" and message.params.get("name") == name
                and message.params.get("status") in ("ready", "failed", "cancelled"))

    return match


async def ready_server_status(server: AppServer, thread_id: str, name: str = SERVER) -> dict[str, Any]:
    """Wait until the thread reports ``name`` started, then return its ``mcpServerStatus/list`` entry."""
    started = await server.wait_for(startup_of(name), timeout=READY_TIMEOUT_S)
    assert started.params["status"] == "ready", f"{name} did not start: {started.params}"
    listing = await server.request("mcpServerStatus/list", {"threadId": thread_id, "serverName": name})
    (entry,) = [e for e in listing["data"] if e["name"] == name]
    return entry
