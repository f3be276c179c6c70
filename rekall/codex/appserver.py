"""An async client for ``codex app-server`` over stdio.

The wire is JSON-RPC 2.0 without the ``jsonrpc`` member, one JSON object per line. Three kinds
of message arrive: responses to our requests (matched by ``id``), notifications
(``{method, params}``) and server requests (``{id, method, params}``, e.g. approvals). The last
two are delivered, in arrival order, on one stream that the caller reads with
:meth:`AppServer.next_message` or :meth:`AppServer.wait_for`; a server request stays pending in
the app-server until the caller answers it with :meth:`AppServer.respond`.

The client owns the process: :func:`open_app_server` starts it with the given ``CODEX_HOME``,
performs the ``initialize``/``initialized`` handshake, and on exit closes stdin (the server exits
at end of input) and reaps it, escalating to terminate and kill if it lingers. Unknown fields and
unknown methods are passed through untouched: Codex adds fields faster than schemas change.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from rekall import __version__
from rekall.errors import CodexError

#: Lines can carry whole threads (``thread/resume``); refuse anything absurd rather than hang.
MAX_LINE_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT_S = 30.0


class AppServerError(CodexError):
    """The app-server answered a request with a JSON-RPC error."""

    code = "app_server_error"

    def __init__(self, method: str, rpc_code: int | None, rpc_message: str, data: Any = None) -> None:
        super().__init__(f"codex app-server rejected {method}: {rpc_message} (code {rpc_code})",
                         hint="check the request parameters and the app-server's stderr log")
        self.method = method
        self.rpc_code = rpc_code
        self.rpc_message = rpc_message
        self.data = data


class AppServerClosed(CodexError):
    """The app-server process ended, or its output could not be read."""

    code = "app_server_closed"


class AppServerTimeout(CodexError):
    """No reply in time. The request may still take effect: its outcome is unknown."""

    code = "app_server_timeout"


@attrs.frozen
class Notification:
    method: str
    params: dict[str, Any]


@attrs.frozen
class ServerRequest:
    """A request from the server (an approval, a question). Answer it with ``respond``."""

    id: int | str
    method: str
    params: dict[str, Any]


Message = Notification | ServerRequest


@attrs.define
class _Pending:
    method: str
    done: anyio.Event = attrs.field(factory=anyio.Event)
    result: Any = None
    error: CodexError | None = None


class AppServer:
    """A running ``codex app-server``. Create it with :func:`open_app_server`."""

    def __init__(self, process: Process, stderr_log: Path, *, exit_grace_s: float = 5.0) -> None:
        self._process = process
        self.stderr_log = stderr_log
        self._exit_grace_s = exit_grace_s
        self._ids = iter(range(1, 2**62))
        self._pending: dict[int | str, _Pending] = {}
        self._send, self._receive = anyio.create_memory_object_stream[Message](math.inf)
        self._closed_reason: str | None = None
        self._write_lock = anyio.Lock()
        #: The ``initialize`` result: ``userAgent``, ``codexHome``, ``platformFamily``, ``platformOs``.
        self.server_info: dict[str, Any] = {}

    # --- outgoing -----------------------------------------------------------------------

    async def _write(self, message: dict[str, Any]) -> None:
        if self._closed_reason is not None:
            raise AppServerClosed(self._closed_reason, hint=f"see {self.stderr_log}")
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        assert self._process.stdin is not None
        async with self._write_lock:
            try:
                await self._process.stdin.send(line)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise AppServerClosed(f"cannot write to codex app-server: {exc!r}",
                                      hint=f"see {self.stderr_log}") from exc

    async def request(self, method: str, params: dict[str, Any] | None = None, *,
                      timeout: float = DEFAULT_TIMEOUT_S) -> Any:
        """Send a request and return its ``result``; raise :class:`AppServerError` on an error reply."""
        request_id = next(self._ids)
        pending = self._pending[request_id] = _Pending(method)
        try:
            await self._write({"id": request_id, "method": method, "params": params or {}})
            with anyio.fail_after(timeout):
                await pending.done.wait()
        except TimeoutError:
            raise AppServerTimeout(f"codex app-server did not answer {method} within {timeout} s",
                                   hint="the outcome is unknown; inspect the thread before acting again") from None
        finally:
            self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        await self._write(message)

    async def respond(self, request_id: int | str, result: Any) -> None:
        """Answer a :class:`ServerRequest`, e.g. ``respond(r.id, {"decision": "accept"})``."""
        await self._write({"id": request_id, "result": result})

    # --- the methods rekall uses --------------------------------------------------------

    async def start_thread(self, **params: Any) -> dict[str, Any]:
        """``thread/start``; returns the result (``thread``, ``model``, …)."""
        return await self.request("thread/start", params)

    async def start_turn(self, thread_id: str, text: str, **params: Any) -> dict[str, Any]:
        """``turn/start`` with one text input; returns the ``turn`` (normally ``inProgress``)."""
        result = await self.request("turn/start", {
            "threadId": thread_id, "input": [{"type": "text", "text": text}], **params})
        return result["turn"]

    async def start_compaction(self, thread_id: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """``thread/compact/start``. Its ``{}`` result is acceptance, not completion."""
        await self.request("thread/compact/start", {"threadId": thread_id}, timeout=timeout)

    # --- incoming -----------------------------------------------------------------------

    async def next_message(self, *, timeout: float = DEFAULT_TIMEOUT_S) -> Message:
        """The next notification or server request; :class:`AppServerClosed` once the server is gone."""
        with anyio.fail_after(timeout):
            try:
                return await self._receive.receive()
            except anyio.EndOfStream:
                raise AppServerClosed(self._closed_reason or "codex app-server closed",
                                      hint=f"see {self.stderr_log}") from None

    async def wait_for(self, predicate: Callable[[Message], bool], *,
                       timeout: float = DEFAULT_TIMEOUT_S, seen: list[Message] | None = None) -> Message:
        """Read messages until one matches; every message read is appended to ``seen`` if given."""
        with anyio.fail_after(timeout):
            while True:
                message = await self.next_message(timeout=math.inf)
                if seen is not None:
                    seen.append(message)
                if predicate(message):
                    return message

    async def messages(self) -> AsyncIterator[Message]:
        """Every notification and server request until the server closes."""
        async for message in self._receive:
            yield message

    async def _read_loop(self) -> None:
        assert self._process.stdout is not None
        reader = BufferedByteReceiveStream(self._process.stdout)
        reason = "codex app-server closed its output"
        try:
            while True:
                line = await reader.receive_until(b"\n", MAX_LINE_BYTES)
                if not line.strip():
                    continue
                message = json.loads(line)
                if not isinstance(message, dict):
                    reason = f"codex app-server sent a message that is not an object: {line[:80]!r}"
                    break
                self._dispatch(message)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
            pass
        except anyio.DelimiterNotFound:
            reason = f"codex app-server sent a line longer than {MAX_LINE_BYTES} bytes"
        except ValueError as exc:
            reason = f"codex app-server sent a line that is not JSON: {exc}"
        finally:
            self._close_with(reason)

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:  # a response
            request_id = message.get("id")
            # Late or unknown ids are dropped: their request already timed out or never existed.
            pending = self._pending.get(request_id) if isinstance(request_id, int | str) else None
            if pending is None:
                return
            if "error" in message:
                err = message["error"] or {}
                pending.error = AppServerError(pending.method, err.get("code"), str(err.get("message")),
                                               err.get("data"))
            else:
                pending.result = message.get("result")
            pending.done.set()
        elif "id" in message:
            self._send.send_nowait(ServerRequest(message["id"], method, message.get("params") or {}))
        else:
            self._send.send_nowait(Notification(method, message.get("params") or {}))

    def _close_with(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        for pending in self._pending.values():
            pending.error = AppServerClosed(f"{self._closed_reason} before answering {pending.method}",
                                            hint=f"the outcome is unknown; see {self.stderr_log}")
            pending.done.set()
        self._send.close()

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
            capabilities: dict[str, Any] = {"experimentalApi": experimental_api}
            if opt_out_notifications:
                capabilities["optOutNotificationMethods"] = list(opt_out_notifications)
            server.server_info = await server.request("initialize", {
                "clientInfo": {"name": client_name, "title": "rekall", "version": __version__},
                "capabilities": capabilities})
            await server.notify("initialized")
            yield server
        finally:
            await server._shutdown()
            tg.cancel_scope.cancel()


__all__ = ["AppServer", "AppServerClosed", "AppServerError", "AppServerTimeout", "Message", "Notification",
           "ServerRequest", "open_app_server"]
