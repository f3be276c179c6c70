"""An async client for a ``codex app-server`` that rekall starts itself, over stdio.

One JSON-RPC message per line; requests, replies and the message stream are
:class:`rekall.adapters.app_server.rpc.RpcClient`'s. rekall is this server's only client, so a server request
stays pending until the caller answers it with :meth:`AppServer.respond`.

The client owns the process: :func:`open_app_server` starts it with the given ``CODEX_HOME``,
performs the ``initialize``/``initialized`` handshake, and on exit closes stdin (the server exits
at end of input) and reaps it, escalating to terminate and kill if it lingers. Unknown fields and
unknown methods are passed through untouched: Codex adds fields faster than schemas change.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from rekall import __version__
from rekall.adapters.app_server.rpc import (
    MAX_MESSAGE_BYTES,
    AppServerClosed,
    AppServerError,
    AppServerTimeout,
    Message,
    Notification,
    RpcClient,
    ServerRequest,
)
from rekall.kernel.errors import CodexError


class AppServer(RpcClient):
    """A running ``codex app-server`` that rekall started. Create it with :func:`open_app_server`."""

    def __init__(self, process: Process, stderr_log: Path, *, exit_grace_s: float = 5.0) -> None:
        super().__init__()
        self._process = process
        self.stderr_log = stderr_log
        self.diagnosis = f"see {stderr_log}"
        self._exit_grace_s = exit_grace_s
        self._write_lock = anyio.Lock()

    async def _send_message(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        assert self._process.stdin is not None
        async with self._write_lock:
            try:
                await self._process.stdin.send(line)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise AppServerClosed(f"cannot write to codex app-server: {exc!r}",
                                      hint=self.diagnosis) from exc

    async def respond(self, request_id: int | str, result: Any) -> None:
        """Answer a :class:`ServerRequest`, e.g. ``respond(r.id, {"decision": "accept"})``.

        Only this client has it: here rekall owns the server and is its only client."""
        await self._write({"id": request_id, "result": result})

    # --- incoming -----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        assert self._process.stdout is not None
        reader = BufferedByteReceiveStream(self._process.stdout)
        reason = "codex app-server closed its output"
        try:
            while True:
                line = await reader.receive_until(b"\n", MAX_MESSAGE_BYTES)
                if not line.strip():
                    continue
                refusal = self._dispatch(json.loads(line))
                if refusal is not None:
                    reason = refusal
                    break
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
            pass
        except anyio.DelimiterNotFound:
            reason = f"codex app-server sent a line longer than {MAX_MESSAGE_BYTES} bytes"
        except (ValueError, RecursionError):
            reason = "codex app-server sent a line that is not JSON"
        finally:
            self._close_with(reason)

    async def _shutdown(self) -> None:
        self._close_with("the client closed codex app-server")
        process = self._process
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await process.stdin.aclose()
            with anyio.move_on_after(self._exit_grace_s):
                await process.wait()  # the server exits at end of input
                return
            for hard in (False, True):
                _stop_group(process, hard=hard)
                with anyio.move_on_after(self._exit_grace_s):
                    await process.wait()
                    return


def _stop_group(process: Process, *, hard: bool) -> None:
    # The npm launcher is a node script that spawns the native binary; signal them both.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if sys.platform == "win32":
            process.kill() if hard else process.terminate()
        else:
            os.killpg(process.pid, signal.SIGKILL if hard else signal.SIGTERM)


def app_server_env(codex_home: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the child: ``CODEX_HOME`` set, provider credentials removed."""
    env = dict(os.environ if base is None else base)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY", "CODEX_THREAD_ID"):
        env.pop(name, None)
    env["CODEX_HOME"] = str(codex_home)
    return env


@asynccontextmanager
async def open_app_server(binary: Path | str, codex_home: Path, *, client_name: str = "rekall",
                          experimental_api: bool = False,
                          opt_out_notifications: tuple[str, ...] = (),
                          exit_grace_s: float = 5.0) -> AsyncIterator[AppServer]:
    """Start ``<binary> app-server`` with ``codex_home`` and complete the handshake.

    stderr goes to ``<codex_home>/app-server.stderr.log`` (0600) for diagnosis. On exit the
    server gets ``exit_grace_s`` to leave after end of input, then to obey SIGTERM, then SIGKILL.
    """
    stderr_log = codex_home / "app-server.stderr.log"
    fd = os.open(stderr_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        process = await anyio.open_process([str(binary), "app-server"], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=fd, cwd=codex_home,
                                           env=app_server_env(codex_home),
                                           start_new_session=sys.platform != "win32")
    except OSError as exc:
        raise CodexError(f"cannot start {binary} app-server: {exc.strerror or exc}",
                         code="app_server_spawn_failed",
                         hint="check the codex binary path (REKALL_CODEX_BINARY)") from exc
    finally:
        os.close(fd)
    server = AppServer(process, stderr_log, exit_grace_s=exit_grace_s)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server._read_loop)
        try:
            await server.initialize(client_name, __version__, experimental_api=experimental_api,
                                    opt_out_notifications=opt_out_notifications)
            yield server
        finally:
            await server._shutdown()
            tg.cancel_scope.cancel()


__all__ = ["AppServer", "AppServerClosed", "AppServerError", "AppServerTimeout", "Message", "Notification",
           "ServerRequest", "open_app_server"]
