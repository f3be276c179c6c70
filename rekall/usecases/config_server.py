"""An app-server to write Codex's configuration through, as Codex's own ``/hooks`` does.

``rekall setup`` never edits ``config.toml`` itself: Codex's ``config/batchWrite`` request does,
on the app-server that owns the file. That is the running daemon when one listens on the shared
control socket (so its loaded threads see the change), else a private ``codex app-server
--listen unix://…`` started here in a private folder, stopped and removed on exit.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from rekall.adapters.app_server.client import SharedAppServer, open_shared_app_server
from rekall.kernel.errors import CodexError, RekallError
from rekall.transports.base import EndpointMissing
from rekall.transports.control_socket import resolve_control_socket

#: How long a private app-server may take to listen, and to exit once asked.
START_S = 30.0
STOP_S = 5.0


@attrs.frozen
class ConfigServer:
    server: SharedAppServer
    #: In words: ``the running app-server on …`` or ``a private app-server …``.
    described: str


def daemon_runs(env: Mapping[str, str]) -> bool:
    """Whether an app-server listens on the shared control socket (the daemon, as a rule)."""
    try:
        resolve_control_socket(env)
    except EndpointMissing:
        return False
    return True


@asynccontextmanager
async def config_server(codex: str, env: Mapping[str, str]) -> AsyncIterator[ConfigServer]:
    """The app-server to write through: the one on the shared control socket, else a private one."""
    if not daemon_runs(env):
        async with _private_server(codex, env) as private:
            yield ConfigServer(private, "a private app-server (no daemon runs)")
        return
    async with open_shared_app_server(env, timeout_s=START_S) as server:
        yield ConfigServer(server, f"the running app-server on {server.socket.target}")


@asynccontextmanager
async def _private_server(codex: str, env: Mapping[str, str]) -> AsyncIterator[SharedAppServer]:
    folder = Path(tempfile.mkdtemp(prefix="rekall-setup-"))  # 0700
    socket = folder / "app-server.sock"
    with open(folder / "stderr.log", "wb") as log:
        process = subprocess.Popen([codex, "app-server", "--listen", f"unix://{socket}"], env=dict(env),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                   start_new_session=True)
    try:
        _wait_listening(process, socket, folder / "stderr.log")
        async with open_shared_app_server({**env, "REKALL_APP_SERVER_SOCKET": str(socket)},
                                          timeout_s=START_S) as server:
            yield server
    finally:
        _stop(process)
        shutil.rmtree(folder, ignore_errors=True)


def _wait_listening(process: subprocess.Popen[bytes], socket: Path, log: Path) -> None:
    """Until the socket appears (the server's only signal), or the server exits, or ``START_S``."""
    end = time.monotonic() + START_S
    while not socket.exists():
        if process.poll() is not None or time.monotonic() > end:
            said = log.read_text(encoding="utf-8", errors="replace").strip()[-400:]
            raise CodexError(f"`codex app-server --listen` did not start listening ({said or 'no output'})",
                             hint="check that `codex app-server` runs, then run rekall setup again")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """The launcher is a node script that spawns the native binary: signal the whole group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.wait(timeout=STOP_S)
            return
        except subprocess.TimeoutExpired:
            continue


async def write(server: SharedAppServer, edits: list[dict[str, Any]]) -> None:
    """One ``config/batchWrite`` of the user's ``config.toml`` (``value: None`` removes a key)."""
    try:
        await server.request("config/batchWrite", {"edits": edits, "reloadUserConfig": True})
    except RekallError as exc:
        raise CodexError(f"Codex refused to write its configuration: {exc.message}",
                         hint="run `codex mcp list` to see whether config.toml loads, then run rekall setup "
                              "again") from exc


def key(*parts: str) -> str:
    """A ``keyPath`` whose parts may hold dots (``hooks.state."rekall@rekall:hooks/hooks.json:…"``)."""
    return ".".join(part if part.replace("_", "").isalnum() else '"' + part.replace('"', '\\"') + '"'
                    for part in parts)


__all__ = ["ConfigServer", "config_server", "daemon_runs", "key", "write"]
