"""A simulated owner whose thread is a real ``codex app-server`` thread (``rekall sim --backend codex``).

The scripted backend plays a thread; this one relays to the real engine, the way the VS Code
extension does for the thread it owns:

- follower ``thread-follower-compact-thread`` → ``thread/compact/start`` (answer ``{ok: true}``
  once the engine accepted it; completion arrives later as a ``contextCompaction`` item);
- follower ``thread-follower-start-turn`` → ``turn/start`` with the follower's input and
  ``clientUserMessageId`` and nothing else, so the turn inherits the thread's settings (answer
  ``{result: {turn}}`` with the engine's turn);
- follower approval decisions → the answer to the engine's pending server request;
- every app-server notification and server request → ``conversationState`` patches, through
  :class:`tests.support.conversation.ConversationProjection` (runtime status, turns and items,
  the private ``contextCompaction.completed``, ``latestTokenUsageInfo``, pending ``requests``).

The engine runs with an isolated ``CODEX_HOME`` whose model is the loopback mock
(:class:`tests.support.mock_model.MockModel`), so no network is used. Tests drive the thread
through the backend (:meth:`CodexBackend.user_turn`, :meth:`CodexBackend.answer_request`) and
the mock (``backend.mock.queue_text`` to fill the context, ``queue_tool_call`` with
:func:`~tests.support.mock_model.escalated_command` for an approval).

Engine failures become router errors a follower can classify: a request the engine rejected
carries its message; an engine that went away is ``client-disconnected`` (the outcome is
unknown); an engine that did not answer in time is ``request-timeout``.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.support.appserver import (
    AppServer,
    AppServerClosed,
    AppServerError,
    AppServerTimeout,
    ServerRequest,
    open_app_server,
)
from tests.support.conversation import ConversationProjection
from rekall.kernel.errors import CodexError
from rekall.sim.backend import COMPACT, START_TURN, OwnerPort, RouterError
from rekall.sim.owner import SimulatedOwner
from rekall.sim.threaded import SimHandle
from tests.support.codex_home import make_isolated_home
from tests.support.mock_model import MockModel
from tests.support.pinned import find_real_codex

#: Follower approval replies this relay understands: method → the app-server answer's key.
APPROVAL_DECISIONS = {
    "thread-follower-command-approval-decision": "decision",
    "thread-follower-file-approval-decision": "decision",
}
START_TIMEOUT_S = 60.0
#: ``mcpServer/startupStatus/updated`` statuses after which an MCP server's startup is over.
MCP_STARTUP_OVER = frozenset({"ready", "failed", "cancelled"})


class CodexBackend:
    """The :class:`rekall.sim.backend.Backend` contract, backed by a real app-server thread."""

    def __init__(self, binary: Path, workdir: Path, *, mock: MockModel | None = None,
                 approval_policy: str = "on-request", extra_config: str = "",
                 request_timeout_s: float = 30.0) -> None:
        self.binary = binary
        self.workdir = workdir
        self.mock = mock if mock is not None else MockModel()
        self._owns_mock = mock is None
        self.approval_policy = approval_policy
        self.extra_config = extra_config
        self.request_timeout_s = request_timeout_s
        #: Empty until :meth:`start` has created the thread: nobody can discover it before.
        self.thread_id = ""
        self.codex_home: Path | None = None
        self.server: AppServer | None = None
        self.projection: ConversationProjection | None = None
        #: Server requests the engine is waiting on, by id (answered by a follower or a test).
        self.pending: dict[int | str, ServerRequest] = {}
        self._pending_changed = asyncio.Event()
        #: The engine's latest MCP server startup report for this thread, by server name.
        self.mcp_servers: dict[str, dict[str, Any]] = {}
        self._mcp_changed = asyncio.Event()
        #: Notifications about the engine's other threads (sessions the owner does not relay), in order.
        self.side_messages: list[Any] = []
        self._side_changed = asyncio.Event()
        self._owner: OwnerPort | None = None
        self._runner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._stopping: asyncio.Event | None = None

    # --- the Backend contract -----------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        if self.projection is None:
            return {"id": self.thread_id, "threadRuntimeStatus": {"type": "notLoaded"}, "requests": [],
                    "unconfirmedTurnSubmissions": [], "latestTokenUsageInfo": None, "turns": []}
        return self.projection.snapshot()

    async def start(self, owner: OwnerPort) -> None:
        self._owner = owner
        if self._owns_mock:
            self.mock.start()
        self.codex_home = make_isolated_home(self.workdir / "codex-home", self.mock.base_url, self.extra_config,
                                             approval_policy=self.approval_policy)
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._stopping = asyncio.Event()
        # The app-server's task group must be entered and left by one task: a dedicated runner.
        self._runner = loop.create_task(self._run(), name="codex-backend")
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                await asyncio.shield(self._ready)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            if self._ready is not None and not self._ready.done():
                runner.cancel()  # still starting (perhaps hung): do not wait for it
            await asyncio.gather(runner, return_exceptions=True)
        if self._owns_mock:
            self.mock.close()

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        server = self.server
        if server is None:
            raise RouterError("client-disconnected")
        if params.get("conversationId") not in (None, self.thread_id):
            raise RouterError("no-client-found")
        try:
            if method == COMPACT:
                await server.start_compaction(self.thread_id, timeout=self.request_timeout_s)
                return {"ok": True}
            if method == START_TURN:
                return {"result": {"turn": await self._start_turn(server, _turn_request(params))}}
            if method in APPROVAL_DECISIONS:
                await self.answer_request(params.get("requestId"),
                                          {APPROVAL_DECISIONS[method]: params.get("decision")})
                return {"ok": True}
        except AppServerError as exc:
            raise RouterError(f"codex app-server rejected {exc.method}: {exc.rpc_message}") from exc
        except AppServerTimeout as exc:
            raise RouterError("request-timeout") from exc
        except AppServerClosed as exc:
            raise RouterError("client-disconnected") from exc
        raise RouterError("no-handler-for-request")

    # --- scripting (tests, demos) -------------------------------------------------------

    async def user_turn(self, text: str) -> dict[str, Any]:
        """A user types ``text`` in the owning window: a real ``turn/start``. Returns the turn."""
        return await self._start_turn(self._running(), {"input": [{"type": "text", "text": text}]})

    async def wait_for_mcp_server(self, name: str, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Wait until the engine has started (or failed to start) MCP server ``name``; return its report.

        Codex offers a server's tools to the model only once it is ready, so a test that makes
        the model call one waits for this before the turn.
        """
        async with asyncio.timeout(timeout):
            while self.mcp_servers.get(name, {}).get("status") not in MCP_STARTUP_OVER:
                await self._mcp_changed.wait()
        return self.mcp_servers[name]

    async def side_thread(self, timeout: float = START_TIMEOUT_S) -> str:
        """Another session on the same engine, which this owner does not relay (as another user's
        terminal would run). Returns its thread id once its rekall MCP server started."""
        thread_id = (await self._running().start_thread())["thread"]["id"]
        await self._side_event(lambda m: m.method == "mcpServer/startupStatus/updated" and m.params.get("threadId")
                               == thread_id and m.params.get("status") in MCP_STARTUP_OVER, timeout)
        return thread_id

    async def side_turn(self, thread_id: str, text: str, timeout: float, *,
                        allow_mcp_call: bool = False) -> dict[str, Any]:
        """A user turn on a side thread, run to its end; returns the completed turn. ``allow_mcp_call``:
        its user allows the MCP tool call the engine asks about."""
        start = len(self.side_messages)
        server = self._running()
        turn = await server.start_turn(thread_id, text)
        if allow_mcp_call:
            asked = await self._side_event(lambda m: isinstance(m, ServerRequest) and m.params.get("threadId")
                                           == thread_id and m.method == "mcpServer/elicitation/request", timeout, start)
            await server.respond(asked.id, {"action": "accept", "content": None})
        done = await self._side_event(lambda m: m.method == "turn/completed" and m.params.get("threadId") == thread_id
                                      and m.params["turn"]["id"] == turn["id"], timeout, start)
        return done.params["turn"]

    async def _side_event(self, match: Any, timeout: float, start: int = 0) -> Any:
        async with asyncio.timeout(timeout):
            while True:
                found = next((m for m in self.side_messages[start:] if match(m)), None)
                if found is not None:
                    return found
                start = len(self.side_messages)
                await self._side_changed.wait()

    async def allow_mcp_call(self, timeout: float) -> ServerRequest:
        """Wait for the engine to ask the owning window's user to allow an MCP tool call
        (``mcpServer/elicitation/request``), allow it once, and return what was asked."""
        async with asyncio.timeout(timeout):
            while (asked := next((r for r in self.pending.values()
                                  if r.method == "mcpServer/elicitation/request"), None)) is None:
                await self._pending_changed.wait()
        await self.answer_request(asked.id, {"action": "accept", "content": None})
        return asked

    async def answer_request(self, request_id: Any, result: Any) -> None:
        """Answer a pending server request (an approval) as the user of the owning window would."""
        if request_id not in self.pending:
            raise RouterError("no-handler-for-request")
        await self._running().respond(request_id, result)

    # --- internals ----------------------------------------------------------------------

    def _running(self) -> AppServer:
        if self.server is None:
            raise CodexError("the codex backend is not running", code="codex_backend_stopped",
                             hint="start the simulated owner first")
        return self.server

    async def _start_turn(self, server: AppServer, request: dict[str, Any]) -> dict[str, Any]:
        params = {"input": request.get("input") or []}
        if request.get("clientUserMessageId"):
            params["clientUserMessageId"] = request["clientUserMessageId"]
        result = await server.request("turn/start", {"threadId": self.thread_id, **params},
                                      timeout=self.request_timeout_s)
        turn = result["turn"]
        self._publish(self._projection().note_turn_params(turn["id"], params))
        return turn

    def _projection(self) -> ConversationProjection:
        assert self.projection is not None
        return self.projection

    def _publish(self, patches: list[dict[str, Any]]) -> None:
        if patches and self._owner is not None:
            self._owner.publish(patches)

    async def _run(self) -> None:
        assert self._ready is not None and self._stopping is not None and self.codex_home is not None
        try:
            async with open_app_server(self.binary, self.codex_home, client_name="rekall_sim") as server:
                started = await server.start_thread()
                self.projection = ConversationProjection(started["thread"], model=started.get("model"))
                self.thread_id = self.projection.thread_id
                self.server = server
                self._ready.set_result(None)
                pump = asyncio.get_running_loop().create_task(self._pump(server))
                try:
                    await self._stopping.wait()
                finally:
                    pump.cancel()
                    await asyncio.gather(pump, return_exceptions=True)
                    self.server = None
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)  # start() raises it
                return
            raise

    async def _pump(self, server: AppServer) -> None:
        projection = self._projection()
        async for message in server.messages():
            if isinstance(message, ServerRequest) and message.params.get("threadId") == self.thread_id:
                self.pending[message.id] = message
                self._pending_changed.set()
                self._pending_changed = asyncio.Event()
            elif message.method == "serverRequest/resolved":
                self.pending.pop(message.params.get("requestId"), None)
            elif message.method == "mcpServer/startupStatus/updated" and message.params.get("threadId") in (
                    None, self.thread_id):
                self.mcp_servers[message.params.get("name")] = message.params
                self._mcp_changed.set()
                self._mcp_changed = asyncio.Event()
            if message.params.get("threadId") not in (None, self.thread_id):
                self.side_messages.append(message)
                self._side_changed.set()
                self._side_changed = asyncio.Event()
                continue  # another session's: the owner relays only its own thread
            self._publish(projection.apply(message))


def _turn_request(params: dict[str, Any]) -> dict[str, Any]:
    """The ``turn/start`` request inside a follower start-turn (either known layout)."""
    turn_start = params.get("turnStart")
    if isinstance(turn_start, dict) and isinstance(turn_start.get("request"), dict):
        return turn_start["request"]
    if isinstance(params.get("turnStartParams"), dict):
        return params["turnStartParams"]
    raise RouterError("invalid-request: thread-follower-start-turn needs turnStart.request")


# --- entry points -----------------------------------------------------------------------


def create_backend() -> CodexBackend:
    """For ``rekall sim --backend codex``: the pinned real Codex, in a private temp directory."""
    binary, reason = find_real_codex()
    if binary is None:
        raise CodexError(reason, code="codex_binary_not_found", hint="run scripts/install-codex")
    return _TempDirBackend(binary, Path(tempfile.mkdtemp(prefix="rekall-codex-sim-")))


class _TempDirBackend(CodexBackend):
    """A backend that removes its working directory (and the engine's files) on stop."""

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


class CodexSimHandle(SimHandle):
    """:class:`SimHandle` for the codex backend: ``mock`` and the backend's scripting."""

    def __init__(self, backend: CodexBackend, **owner_options: Any) -> None:
        super().__init__(lambda: SimulatedOwner(backend, **owner_options))
        #: Thread-safe: script replies and read recorded requests from any thread.
        self.mock = backend.mock
        self._backend = backend

    def user_turn(self, text: str, timeout: float = 30.0) -> dict[str, Any]:
        return self.call(lambda owner: self._backend.user_turn(text), timeout)

    def answer_request(self, request_id: Any, result: Any, timeout: float = 30.0) -> None:
        self.call(lambda owner: self._backend.answer_request(request_id, result), timeout)

    def wait_for_mcp_server(self, name: str, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
        return self.call(lambda owner: self._backend.wait_for_mcp_server(name, timeout), timeout + 5)

    def allow_mcp_call(self, timeout: float = 30.0) -> ServerRequest:
        return self.call(lambda owner: self._backend.allow_mcp_call(timeout), timeout + 5)

    def side_thread(self, timeout: float = START_TIMEOUT_S) -> str:
        return self.call(lambda owner: self._backend.side_thread(timeout), timeout + 5)

    def side_turn(self, thread_id: str, text: str, timeout: float = 30.0, *,
                  allow_mcp_call: bool = False) -> dict[str, Any]:
        return self.call(lambda owner: self._backend.side_turn(thread_id, text, timeout, allow_mcp_call=allow_mcp_call),
                         timeout + 5)

    def state(self) -> dict[str, Any]:
        """A copy of the thread's conversationState, taken on the simulator's loop."""
        return self.call(lambda owner: self._backend.snapshot())

    def pending_request_ids(self) -> list[Any]:
        return self.call(lambda owner: list(self._backend.pending))


def start_codex_sim_in_thread(codex_binary: Path, tmp_dir: Path, *, extra_config: str = "",
                              approval_policy: str = "on-request", **owner_options: Any) -> CodexSimHandle:
    """Start a simulated owner relaying to a real app-server on a private thread; return its handle.

    ``tmp_dir`` holds the engine's isolated ``CODEX_HOME``; ``extra_config`` is added to its
    ``config.toml`` (e.g. ``[mcp_servers.rekall]``), whose ``approval_policy`` is given. ``owner_options`` go to
    :class:`SimulatedOwner` (e.g. ``codex_home=True``). Use as a context manager to stop it.
    """
    handle = CodexSimHandle(CodexBackend(codex_binary, tmp_dir, extra_config=extra_config,
                                         approval_policy=approval_policy), **owner_options)
    handle.start(timeout=START_TIMEOUT_S + 5)
    return handle
