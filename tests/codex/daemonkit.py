"""The real shared app-server daemon for tests: start one, end everything it started.

``codex app-server daemon start`` installs Codex into ``$CODEX_HOME/packages`` (about 424 MB,
a few seconds), starts ``codex app-server --listen unix:// --managed-daemon`` and a
``daemon pid-update-loop`` helper, and prints its status as JSON. ``daemon stop`` ends the
server but leaves the helper running, holding its own socket under ``/tmp/codex-daemon-<uid>/``.
So :func:`stop_daemon` stops the daemon, then ends by pid every process still running a binary
from this ``CODEX_HOME`` (the helper included), removes the sockets they left, and deletes the
installed copy.

:class:`PeerClient` is an independent client (the ``websockets`` library's own asyncio client,
no rekall code) that plays the user's terminal.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs

from tests.support.appserver import app_server_env
from tests.support.account_home import account_env

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0
EXIT_WAIT_S = 5.0


@attrs.frozen
class Daemon:
    binary: Path
    codex_home: Path
    #: What ``daemon start`` printed: ``status``, ``pid``, ``socketPath``, ``managedCodexPath``, versions.
    status: dict[str, Any]
    #: The jobs directory of the ``rekall mcp`` registered in its config (see :func:`rekall_mcp_toml`).
    jobs_dir: Path | None = None
    #: A folder the config trusts (see :func:`trusted_project_toml`): where a terminal UI starts.
    workspace: Path | None = None

    @property
    def env(self) -> dict[str, str]:
        """An environment for rekall that points at this daemon's CODEX_HOME."""
        return {"CODEX_HOME": str(self.codex_home)}

    @property
    def socket_path(self) -> Path:
        return Path(self.status["socketPath"])

    @property
    def version(self) -> str:
        """The release of the binary the daemon was started from (``codex --version``): what the
        server states in ``initialize``, whichever release the test session runs."""
        from rekall.codex.schema import binary_identity

        return binary_identity(self.binary).version

    def daemon_command(self, verb: str, timeout: float = STOP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binary), "app-server", "daemon", verb], env=app_server_env(self.codex_home),
                              capture_output=True, text=True, timeout=timeout, cwd=self.codex_home)


def _last_json_object(text: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    raise AssertionError(f"no JSON status in the daemon's output: {text[-500:]!r}")


#: What the daemon's ``rekall mcp`` is given (Codex forwards only an allowlist of variables).
REKALL_IDLE_STABLE_MS = "50"


def rekall_mcp_toml(codex_home: Path, jobs_dir: Path, args: tuple[str, ...] = ("-m", "rekall", "mcp")) -> str:
    """``[mcp_servers.rekall]``: this checkout's ``rekall mcp`` (Python run with ``args``), its jobs in
    ``jobs_dir``, the daemon's home."""
    env = {"CODEX_HOME": str(codex_home), "REKALL_JOBS_DIR": str(jobs_dir), "REKALL_IDLE_STABLE_MS": REKALL_IDLE_STABLE_MS,
           **account_env()}
    return "\n".join(["[mcp_servers.rekall]", f"command = {json.dumps(sys.executable)}", f"args = {json.dumps(list(args))}",
                      "", "[mcp_servers.rekall.env]", *(f"{k} = {json.dumps(v)}" for k, v in env.items()), ""])


def trusted_project_toml(folder: Path) -> str:
    """``[projects."<folder>"]`` trusted: the terminal UI opens there without its folder-access prompt."""
    return "\n".join([f"[projects.{json.dumps(str(folder))}]", 'trust_level = "trusted"', ""])


def start_daemon(binary: Path, codex_home: Path, jobs_dir: Path | None = None) -> Daemon:
    daemon = Daemon(binary, codex_home, {}, jobs_dir)
    done = daemon.daemon_command("start", timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        end_daemon_processes(codex_home)
        raise AssertionError(f"codex app-server daemon start failed ({done.returncode}): {done.stderr[-2000:]}")
    return attrs.evolve(daemon, status=_last_json_object(done.stdout))


def daemon_processes(codex_home: Path) -> list[int]:
    """Pids of the processes this daemon started (Linux /proc): those running a Codex binary installed
    in ``codex_home``, and its ``rekall mcp`` servers and their workers (``CODEX_HOME`` is theirs)."""
    prefix = str(codex_home / "packages") + os.sep
    ours = f"CODEX_HOME={codex_home}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv[0].decode(errors="replace").startswith(prefix):
                pids.append(int(entry.name))
            elif b"rekall" in argv and ours in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return pids


def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait for ``pid`` (not our child) to exit, on its pidfd: no polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


def end_daemon_processes(codex_home: Path) -> list[int]:
    """SIGTERM, then SIGKILL, each process of :func:`daemon_processes`; returns the pids ended."""
    ended = daemon_processes(codex_home)
    for pid in ended:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            if _wait_gone(pid, EXIT_WAIT_S):
                break
    survivors = daemon_processes(codex_home)
    assert not survivors, f"daemon processes survived SIGKILL: {survivors}"
    return ended


def _link_targets(codex_home: Path) -> list[Path]:
    links = [*codex_home.glob("app-server-control/*.sock"), *codex_home.glob("app-server-daemon/*.sock")]
    return [Path(os.readlink(link)) for link in links if link.is_symlink()]


def stop_daemon(daemon: Daemon) -> None:
    """``daemon stop``, then end the leftovers by pid and remove their sockets and the installed copy."""
    targets = _link_targets(daemon.codex_home)
    try:
        daemon.daemon_command("stop")
    except subprocess.TimeoutExpired:
        pass  # e.g. a turn still waits for an approval: the processes are ended by pid below
    finally:
        end_daemon_processes(daemon.codex_home)
        for target in targets:
            for leftover in (target, target.with_name(target.name + ".lock")):
                leftover.unlink(missing_ok=True)
        shutil.rmtree(daemon.codex_home / "packages", ignore_errors=True)


class PeerClient:
    """Another client of the daemon, written with ``websockets`` alone: it plays the user's terminal."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self._ids = itertools.count(1)
        self._replies: dict[int, anyio.Event] = {}
        self._results: dict[int, dict[str, Any]] = {}
        self.messages: list[dict[str, Any]] = []
        self._arrived = anyio.Event()

    async def _read(self) -> None:
        async for raw in self.connection:
            message = json.loads(raw)
            if "method" not in message and message.get("id") in self._replies:
                self._results[message["id"]] = message
                self._replies.pop(message["id"]).set()
            else:
                self.messages.append(message)
                self._arrived.set()
                self._arrived = anyio.Event()

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request_id = next(self._ids)
        done = self._replies[request_id] = anyio.Event()
        await self.connection.send(json.dumps({"id": request_id, "method": method, "params": params or {}}))
        with anyio.fail_after(30):
            await done.wait()
        reply = self._results.pop(request_id)
        assert "error" not in reply, f"{method} failed: {reply['error']}"
        return reply["result"]

    async def allow_mcp_call(self, thread_id: str, *, start: int = 0, timeout: float = 30) -> dict[str, Any]:
        """As the user of this terminal: wait for Codex to ask to allow an MCP tool call on
        ``thread_id`` (``mcpServer/elicitation/request``), allow it once, and return the request."""
        asked = await self.wait_for(lambda m: m.get("method") == "mcpServer/elicitation/request" and "id" in m
                                    and m["params"].get("threadId") == thread_id, start=start, timeout=timeout)
        await self.connection.send(json.dumps({"id": asked["id"], "result": {"action": "accept", "content": None}}))
        return asked

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], *, start: int = 0,
                       timeout: float = 30) -> dict[str, Any]:
        """The first message at index ``start`` or later that matches."""
        with anyio.fail_after(timeout):
            while True:
                for message in self.messages[start:]:
                    if predicate(message):
                        return message
                start = len(self.messages)
                await self._arrived.wait()


@asynccontextmanager
async def peer_client(socket_path: Path, name: str = "user-terminal") -> AsyncIterator[PeerClient]:
    from websockets.asyncio.client import unix_connect

    async with unix_connect(str(socket_path), uri="ws://localhost/", max_size=None) as connection:
        client = PeerClient(connection)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client._read)
            await client.request("initialize", {"clientInfo": {"name": name, "version": "0"}})
            await connection.send(json.dumps({"method": "initialized"}))
            yield client
            tg.cancel_scope.cancel()
