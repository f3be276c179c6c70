"""The shared Codex app-server as a platform (:mod:`rekall.adapters.contract`), named ``app-server``.

The daemon (which a plain ``codex`` starts and joins where daemon auto-start is on, and
``codex --remote unix://`` attaches to), like any ``codex app-server --listen unix://``, is shared
by several clients; the user's terminal is one, rekall another. What rekall does there:

* **observe** read-only: ``thread/loaded/list``, ``thread/read``, ``thread/turns/list`` and
  ``thread/goal/get``. Never ``thread/resume``, which notifies every client. ``thread/read`` carries no token usage
  on 0.171.0, so an observation reports the context size as unknown.
* **follow** with ``thread/resume`` and ``excludeTurns`` (full-history hydration is deprecated
  for paginated threads: the server answers it with a ``deprecationNotice``); the baseline
  (which compactions exist, where the user's latest turn is) comes from ``thread/turns/list``,
  as for an observation. Such a resume replays no token count, so the size before the
  compaction is the server's own: the first ``thread/tokenUsage/updated`` of the compaction
  turn (:mod:`rekall.adapters.app_server.thread_model`). Only a thread the server has loaded is resumed:
  resuming an unloaded one would load it.
* **act**: ``thread/compact/start`` and ``turn/start`` (with ``clientUserMessageId`` = the
  job id, as on the extension), each sent at most once. Server requests (approvals,
  questions) are the user's: :class:`~rekall.adapters.app_server.client.SharedAppServer` cannot answer them.
* **deliver** the handoff with ``thread/inject_items``: one developer message (a raw Responses
  API item) appended to the thread's model-visible history, no turn started; sent at most once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rekall.kernel import events as ev
from rekall.adapters.app_server import NAME
from rekall.adapters.app_server.releases import Release, UnsupportedCodex
from rekall.adapters.app_server.serving_binary import ServedBy, schema_report, served_by
from rekall.adapters.app_server.rpc import AppServerClosed, AppServerError, AppServerTimeout
from rekall.adapters.app_server.client import SharedAppServer, open_shared_app_server
from rekall.adapters.app_server.thread_model import TITLE_SOURCE, ThreadModel
from rekall.kernel.errors import IpcError, RekallError
from rekall.adapters.contract import Absence, Row, ThreadSnapshot, noted
from rekall.kernel.records import Acted, ConnectionLostError, Failure
from rekall.transports.base import EndpointMissing
from rekall.transports.control_socket import START_HINT, resolve_control_socket
from rekall.kernel.environment import env_value

log = logging.getLogger("rekall.codex.platform")

#: The newest turns an observation lists, with their items ("full": the "summary" view shows no
#: ``contextCompaction`` item, so a compaction, done or running, would be invisible): enough to find
#: the latest user turn behind compactions.
TURNS_OBSERVED = 10
#: How long each of ``doctor``'s app-server rows waits for the server.
DOCTOR_TIMEOUT_S = 8.0
#: How 0.171.0 says a thread has no first turn yet (``thread/resume``; ``thread/turns/list``).
NO_ROLLOUT = ("no rollout found", "is not materialized yet")
#: The terminal sessions rekall reaches (Codex 0.171.0; docs/app-server.md says what was measured).
SERVED_SESSIONS = ("terminal sessions on the shared app-server: a plain `codex` where daemon auto-start is on "
                   "(it starts the daemon and joins it; on by default in 0.171.0) and `codex --remote unix://`")
#: What makes a terminal session run its own app-server in-process, out of rekall's reach: causes
#: rekall cannot tell apart from outside the session.
OWN_APP_SERVER = ("a terminal session runs its own app-server, out of rekall's reach, when it was started with a "
                  "flag that needs one (-c/--config, --search, -p/--profile, --strict-config, --approve-for-me, "
                  "--dangerously-bypass-hook-trust, --worktree, --oss, --no-daemon, CODEX_EXEC_SERVER_URL set, or "
                  "--enable/--disable of a feature the daemon does not share, run without it), when no shared "
                  "app-server ran as it started and daemon auto-start is off or experimental in its Codex release "
                  "(`codex features list`: daemon_auto_start), when its release has no shared app-server, or for "
                  "`codex exec` without --remote; it may also run under another CODEX_HOME. rekall cannot tell which")
#: How the user checks a session, and how to bring it within reach: with a shared app-server running
#: (a plain `codex` joins one whatever its auto-start setting), and with none.
CHECK = ("in the session, `/status` shows `Server: Local background server` when it is on the shared "
         "app-server and no `Server:` line when it runs its own, and a startup warning (F2) names the flag "
         "that kept it off")
FIX_WITH_SERVER = "restart it without that flag (put the setting in config.toml), or as `codex --remote unix://`"
CHECK_AND_FIX = (f"{CHECK}; restart it without that flag (put the setting in config.toml), with "
                 "`[features] daemon_auto_start = true` in config.toml, or as `codex --remote unix://` after "
                 "`codex app-server daemon start`")


def out_of_reach(seen: str, *, server_runs: bool = False) -> tuple[str, str]:
    """The message and hint for a terminal thread rekall cannot reach: ``seen`` (what rekall saw), the
    causes it cannot tell apart, how the user checks the session and how to fix it (a running server
    needs no starting)."""
    return f"{seen}; {OWN_APP_SERVER}", f"{CHECK}; {FIX_WITH_SERVER}" if server_runs else CHECK_AND_FIX


HEADROOM_UNKNOWN = ("unknown until a worker follows the thread: thread/read reports no token usage on the "
                    "shared app-server")


class ThreadNotServed(IpcError):
    """The shared app-server does not have the thread loaded (or cannot serve it yet)."""

    code = "thread_not_loaded"


class NotAConversation(IpcError):
    """The thread is the terminal UI's title request, not the user's conversation."""

    code = "not_a_conversation"


def unwrap(exc: BaseException) -> BaseException:
    """The client's task group wraps an error raised inside it; rekall's own error is inside."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _reached_error(exc: BaseException) -> RekallError:
    """What went wrong talking to the server, as an :class:`IpcError` (the worker's reconnect rule
    handles those): a refusal keeps the server's words, anything else is a lost connection."""
    exc = unwrap(exc)
    if isinstance(exc, IpcError | UnsupportedCodex):
        return exc
    if isinstance(exc, AppServerError):
        return IpcError(exc.message, hint=exc.hint, code=exc.code)
    if isinstance(exc, RekallError):
        return ConnectionLostError(exc.message, hint=exc.hint)
    raise exc


def _not_loaded(thread_id: str, socket_path: str) -> ThreadNotServed:
    message, hint = out_of_reach(f"a shared app-server runs at {socket_path} and does not have thread {thread_id} "
                                 "loaded (the session may also have ended, or the id may be wrong)",
                                 server_runs=True)
    return ThreadNotServed(message, hint=hint)


def _check_conversation(thread_id: str, thread: Mapping[str, Any]) -> None:
    if thread.get("threadSource") == TITLE_SOURCE:
        raise NotAConversation(f"thread {thread_id} is the terminal UI's title request (threadSource "
                               f"{TITLE_SOURCE!r}), not a conversation",
                               hint="use the conversation's own id (CODEX_THREAD_ID in the agent's shell)")


def _no_rollout(thread_id: str) -> ThreadNotServed:
    return ThreadNotServed(f"thread {thread_id} has no rollout yet (its first turn has not run)",
                           hint="send a first message, then schedule")


def details_of(server: SharedAppServer) -> dict[str, Any]:
    socket = server.socket
    return {"endpoint": {"path": socket.path, "target": socket.target, "source": socket.source,
                         "checks": list(socket.checks), "peerCheck": socket.peer_check},
            "serverVersion": server.server_version}


class _Link:
    """One connection, held open by its own task: the client's task group lives in that task,
    so the worker may reconnect from any task and close from another."""

    def __init__(self) -> None:
        self.server: SharedAppServer | None = None
        self.closing = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, env: Mapping[str, str], timeout_s: float) -> _Link:
        link = cls()
        ready: asyncio.Future[SharedAppServer] = asyncio.get_running_loop().create_future()

        async def hold() -> None:
            try:
                async with open_shared_app_server(env, timeout_s=timeout_s) as server:
                    ready.set_result(server)
                    await link._stop.wait()
            except BaseException as exc:  # handed to the opener; after that, closing is best effort
                if not ready.done():
                    ready.set_exception(unwrap(exc) if isinstance(exc, Exception) else exc)
                elif not isinstance(exc, asyncio.CancelledError):
                    log.debug("closing the shared app-server connection: %r", exc)

        link._task = asyncio.ensure_future(hold())
        try:
            link.server = await ready
        except BaseException:
            await link.aclose()
            raise
        return link

    async def aclose(self) -> None:
        self.closing = True
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._task


class AppServerThread:
    """A thread followed on the shared app-server (implements ``FollowedThread``)."""

    def __init__(self, env: Mapping[str, str], thread_id: str, request_timeout_s: float) -> None:
        self.env = env
        self.thread_id = thread_id
        self.request_timeout_s = request_timeout_s
        self.model = ThreadModel(thread_id)
        self.link: _Link | None = None
        self.resyncs = 0
        self._queue: asyncio.Queue[ev.DomainEvent | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def server(self) -> SharedAppServer | None:
        return None if self.link is None else self.link.server

    async def attach(self) -> list[ev.DomainEvent]:
        """Connect, check the thread is loaded, resume it without its turns, then list them."""
        try:
            link = await _Link.open(self.env, self.request_timeout_s)
        except BaseException as exc:
            raise _reached_error(exc) from None
        server = link.server
        assert server is not None
        try:
            if self.thread_id not in await server.loaded_threads(timeout=self.request_timeout_s):
                raise _not_loaded(self.thread_id, server.socket.path)
            # Read first: resuming notifies every client, so a thread we must refuse is never resumed.
            _check_conversation(self.thread_id, await server.read_thread(self.thread_id,
                                                                         timeout=self.request_timeout_s))
            # Read-only too. A change after it arrives as thread/goal/updated once resumed: the resume
            # broadcasts the thread's goal (or its absence) to every client.
            goal = await server.thread_goal(self.thread_id, timeout=self.request_timeout_s)
            try:
                result = await server.resume_thread(self.thread_id, timeout=self.request_timeout_s)
            except AppServerError as exc:
                if any(words in exc.rpc_message for words in NO_ROLLOUT):
                    raise _no_rollout(self.thread_id) from None
                raise
            _check_conversation(self.thread_id, result["thread"])
            # Listed after the resume: what changes meanwhile is also on the message stream, which
            # the reader applies after this (in order, so the facts end where the server is).
            turns = await _latest_turns(server, self.thread_id, self.request_timeout_s)
        except BaseException as exc:
            await link.aclose()
            if isinstance(exc, NotAConversation | ThreadNotServed):
                raise
            raise _reached_error(exc) from None
        self.link = link
        events = self.model.load(result["thread"], turns)
        if goal is not None:
            events += self.model.load_goal(goal)
        self._reader = asyncio.ensure_future(self._read(link, server))
        return events

    async def _read(self, link: _Link, server: SharedAppServer) -> None:
        async for message in server.messages():
            for event in self.model.apply(message):
                self._queue.put_nowait(event)
            if message.method == "thread/closed" and message.params.get("threadId") == self.thread_id:
                # Gone from the server, not busy: end this link; reconnecting says whether it is back.
                self._queue.put_nowait(ev.ConnectionLost(f"thread {self.thread_id} was closed on the shared "
                                                         "app-server (thread/closed)"))
                return
        if not link.closing and not self._closed:
            self._queue.put_nowait(ev.ConnectionLost(server.closed_reason or "the shared app-server closed"))

    # --- FollowedThread ---------------------------------------------------------------------

    async def events(self) -> AsyncIterator[ev.DomainEvent]:
        while (event := await self._queue.get()) is not None:
            yield event

    def snapshot(self) -> ThreadSnapshot:
        return ThreadSnapshot(self.thread_id, self.model.facts, self.model.revision, None)

    @property
    def seen_at(self) -> float | None:
        return None  # the messages carry no time, and the reader hands them on at once

    def connection_note(self) -> dict[str, Any]:
        server = self.server
        return {"platform": NAME, "ownerId": None,
                "serverVersion": None if server is None else server.server_version,
                "endpoint": None if server is None else server.socket.target}

    async def reconnect(self) -> None:
        """A new connection and a fresh resume; the facts that changed meanwhile become events."""
        await self._drop_link()
        events = await self.attach()
        self.resyncs += 1
        for event in [ev.Resynced("reconnected", self.resyncs, self.model.revision), *events]:
            self._queue.put_nowait(event)

    async def compact(self) -> Acted:
        return await self._act("thread/compact/start", {"threadId": self.thread_id})

    async def start_turn(self, text: str, job_id: str) -> Acted:
        if not isinstance(text, str) or not text.strip() or not isinstance(job_id, str) or not job_id:
            return Acted(Failure("invalid_input", "the continuation needs a non-empty text and job id",
                                 "not_delivered"))
        acted = await self._act("turn/start", {"threadId": self.thread_id, "input": [{"type": "text", "text": text}],
                                               "clientUserMessageId": job_id})
        return acted

    async def inject(self, text: str) -> Acted:
        if not isinstance(text, str) or not text.strip():
            return Acted(Failure("invalid_input", "the injected handoff needs a non-empty text", "not_delivered"))
        return await self._act("thread/inject_items", {"threadId": self.thread_id, "items": [developer_message(text)]})

    async def _act(self, method: str, params: dict[str, Any]) -> Acted:
        server = self.server
        if server is None or server.closed_reason is not None:  # provably never sent
            reason = "not connected" if server is None else server.closed_reason
            return Acted(Failure("connection_lost", f"{method} not sent: {reason}", "not_delivered"))
        try:
            result = await server.request(method, params, timeout=self.request_timeout_s)
        except AppServerError as exc:  # the server refused it: nothing was done
            return Acted(Failure("request_failed", exc.message, "not_delivered"))
        except AppServerTimeout as exc:
            return Acted(Failure("request_timeout", exc.message, "unknown"))
        except AppServerClosed as exc:
            return Acted(Failure("connection_lost", exc.message, "unknown"))
        turn = result.get("turn") if isinstance(result, dict) else None
        if isinstance(turn, dict):
            return Acted(turn_id=turn.get("id"), turn_status=turn.get("status"))
        return Acted()

    async def _drop_link(self) -> None:
        link, self.link = self.link, None
        if link is not None:
            link.closing = True
            await link.aclose()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._drop_link()
        self._queue.put_nowait(None)


class SharedAppServerPlatform:
    """The shared app-server found from ``env`` (implements ``Platform``)."""

    name = NAME
    title = "the shared app-server"
    host = "terminal sessions on the shared app-server"
    serving_hint = CHECK_AND_FIX
    follow_only_reads = False  # following resumes the thread, which notifies every client
    injection_limit: str | None = None  # thread/inject_items

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = os.environ if env is None else env
        #: The version the server stated when this platform last observed a thread (``None``
        #: before): :meth:`compatibility` judges it against the declared range.
        self.server_version: str | None = None

    async def follow(self, thread_id: str, *, request_timeout_s: float) -> AppServerThread:
        thread = AppServerThread(self.env, thread_id, request_timeout_s)
        await thread.attach()  # the first facts are the snapshot; no event for them
        return thread

    async def observe(self, thread_id: str, *, request_timeout_s: float) -> ThreadSnapshot:
        try:
            async with open_shared_app_server(self.env, timeout_s=request_timeout_s) as server:
                self.server_version = server.server_version
                return await observe_on(server, thread_id, request_timeout_s)
        except BaseException as exc:
            raise _reached_error(exc) from None

    async def diagnose(self) -> list[Row]:
        return [_tied(row) for row in await diagnose(self.env)]

    def compatibility(self) -> dict[str, Any]:
        return schema_report(self.env, self.server_version)

    def absent(self, error: RekallError) -> Absence | None:
        if not isinstance(error, EndpointMissing):
            return None
        # Its own words, which say where rekall looked (and which CODEX_HOME that was).
        note, check = out_of_reach(f"no shared app-server runs here either ({error.message})")
        return Absence(note, f"for a terminal session: {check}")

    def with_notes(self, error: RekallError, notes: Sequence[Absence]) -> RekallError:
        return noted(error, notes)


def _tied(row: Row) -> Row:
    """What the rows show other platforms, and the thread row that says nothing new when another
    platform serves the thread."""
    if row.level == "GREEN" and (row.name == "app_server_thread"
                                 or (row.name == "app_server" and row.detail.startswith("initialize"))):
        return attrs.evolve(row, shows=frozenset({"serves_thread" if row.name == "app_server_thread" else "answers"}))
    if row.name == "app_server_thread" and row.level != "GREEN":
        return attrs.evolve(row, unless={"serves_thread": Row.green(
            row.name, "not needed: a VS Code window owns the thread (see the owner row)")})
    return row


def developer_message(text: str) -> dict[str, Any]:
    """A developer message as a raw Responses API item (what ``thread/inject_items`` appends)."""
    return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}


async def _latest_turns(server: SharedAppServer, thread_id: str, timeout_s: float) -> list[Any]:
    """The newest turns with their items (``thread/turns/list``), oldest first."""
    try:
        page = await server.request("thread/turns/list", {"threadId": thread_id, "sortDirection": "desc",
                                                          "limit": TURNS_OBSERVED, "itemsView": "full"},
                                    timeout=timeout_s)
    except AppServerError as exc:
        if any(words in exc.rpc_message for words in NO_ROLLOUT):
            raise _no_rollout(thread_id) from None
        raise
    turns = list(reversed(page.get("data") or []))
    if not turns:
        raise _no_rollout(thread_id)
    return turns


async def observe_on(server: SharedAppServer, thread_id: str, timeout_s: float) -> ThreadSnapshot:
    """One read-only look at ``thread_id`` on ``server``: nobody else is notified."""
    if thread_id not in await server.loaded_threads(timeout=timeout_s):
        raise _not_loaded(thread_id, server.socket.path)
    thread = await server.read_thread(thread_id, timeout=timeout_s)
    _check_conversation(thread_id, thread)
    model = ThreadModel(thread_id)
    turns = await _latest_turns(server, thread_id, timeout_s)
    model.load(thread, turns)
    goal = await server.thread_goal(thread_id, timeout=timeout_s)
    if goal is not None:
        model.load_goal(goal)
    from rekall.kernel.caller import calls_in_progress

    return ThreadSnapshot(thread_id, model.facts, model.revision, None,
                          {**details_of(server), "headroomNote": HEADROOM_UNKNOWN},
                          calls_in_progress=calls_in_progress(turns), title=_title(thread))


def _title(thread: Mapping[str, Any]) -> str | None:
    """``thread/read``'s ``name`` (the title), else its ``preview`` (usually the first user message)."""
    for key in ("name", "preview"):
        value = thread.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


# --- doctor ---------------------------------------------------------------------------------


async def diagnose(env: Mapping[str, str]) -> list[Row]:
    """``app_server_socket``, ``app_server`` and ``app_server_schema`` (and ``app_server_thread``
    when CODEX_THREAD_ID is set)."""
    thread = env_value(env, "CODEX_THREAD_ID")
    later = ["app_server", "app_server_version", *(["app_server_thread"] if thread is not None else []),
             "app_server_schema"]
    try:
        socket = resolve_control_socket(env)
    except EndpointMissing as exc:
        # Not an error: only threads of terminal sessions need it. A thread that is nobody's is the owner rows' news.
        rows = [Row.green("app_server_socket", f"{exc.message}; only {SERVED_SESSIONS} need it")]
        for name in later:
            if name == "app_server_thread":
                rows.append(Row("app_server_thread", "AMBER", *out_of_reach(
                    f"thread {thread} is not on a shared app-server: none runs here")))
            else:
                rows.append(Row.green(name, "not applicable: no shared app-server runs"))
        return rows
    except RekallError as exc:
        return [Row.failed("app_server_socket", exc)] + [
            Row.not_checked(name, "the socket failed its checks", "fix the app_server_socket row first")
            for name in later]
    rows = [Row.green("app_server_socket", "; ".join(socket.checks))]
    served = served_by(env)
    version: str | None = None
    try:
        async with asyncio.timeout(DOCTOR_TIMEOUT_S):
            async with open_shared_app_server(env, socket=socket, timeout_s=DOCTOR_TIMEOUT_S) as server:
                version = server.server_version
                who = (f"the daemon (pid {served.daemon_pid})" if served.daemon_managed
                       else "an app-server not managed by `codex app-server daemon`")
                rows.append(Row.green("app_server", f"initialize answered on {socket.target}: Codex "
                                                    f"{server.server_version or 'version unknown'}, served by {who}; "
                                                    f"peer check: {server.socket.peer_check}"))
                rows.append(await asyncio.to_thread(version_row, env, served, version))
                if thread is not None:
                    rows.append(await _thread_row(server, thread))
    except TimeoutError:
        rows.append(Row("app_server", "RED", f"no answer on {socket.target} within {DOCTOR_TIMEOUT_S:g} s",
                        "the app-server may be hung; restart it (`codex app-server daemon restart`)"))
    except BaseException as exc:
        inner = unwrap(exc)
        if not isinstance(inner, RekallError):
            raise
        if isinstance(inner, UnsupportedCodex):
            version = inner.release.version
        rows.append(Row.failed("app_server", inner))
    if rows[-1].name == "app_server":  # the server did not answer
        rows += [Row.not_checked(name, "the app-server did not answer", "fix the app_server row first")
                 for name in later[1:-1]]
    rows.append(await asyncio.to_thread(_schema_row, env, version))
    return rows


#: After a CLI update the daemon often keeps serving the old release until it is stopped
#: (openai/codex #46468, #47482, #47495).
RESTART_DAEMON = "restart the daemon: `codex app-server daemon stop`, then start any `codex` (it starts the new one)"


def version_row(env: Mapping[str, str], served: ServedBy, server_version: str | None) -> Row:
    """The daemon's Codex against the ``codex`` on PATH that the user runs."""
    if not served.daemon_managed:
        return Row.green("app_server_version", "not compared: the app-server is not the daemon")
    cli = shutil.which("codex", path=env.get("PATH"))
    if cli is None:
        return Row.green("app_server_version", "not compared: no `codex` on PATH")
    from rekall.codex.schema import binary_identity

    try:
        cli_version = binary_identity(Path(cli)).version
    except RekallError as exc:
        return Row("app_server_version", "AMBER", f"the version of {cli} is unknown: {exc.message}",
                   "check that the `codex` on PATH runs")
    if server_version is None or cli_version != server_version:
        return Row("app_server_version", "AMBER", f"the daemon runs Codex {server_version or 'of an unknown version'}, "
                   f"the `codex` on PATH ({cli}) is Codex {cli_version}: the daemon still serves the release it "
                   "started with", RESTART_DAEMON)
    return Row.green("app_server_version", f"the daemon and the `codex` on PATH ({cli}) are both Codex {cli_version}")


async def _thread_row(server: SharedAppServer, thread: str) -> Row:
    try:
        seen = await observe_on(server, thread, DOCTOR_TIMEOUT_S)
    except RekallError as exc:
        return Row("app_server_thread", "AMBER", exc.message, exc.hint or "see the detail")
    facts = seen.facts
    return Row.green("app_server_thread", f"thread {thread} is loaded in the shared app-server; status "
                                          f"{facts.runtime_status}, {'idle' if facts.idle else facts.busy_reason}")


def _schema_row(env: Mapping[str, str], version: str | None) -> Row:
    try:
        report = schema_report(env, version)
    except RekallError as exc:
        return Row.failed("app_server_schema", exc)
    if "refusal" in report:
        return Row("app_server_schema", "RED", report["refusal"]["message"],
                   f"{report['refusal']['hint']}; schedule refuses until then")
    if report["status"] == "not_checked":
        return Row("app_server_schema", "AMBER", f"not checked: {report['note']}; {Release.of(version).words}",
                   "put the Codex that serves the socket on PATH")
    binary = f"{report['binaryPath']} ({report['binaryNote']})"
    if report["status"] != "compatible":
        failed = "; ".join(f"{c['name']}: {c['detail']}" for c in report["checks"] if not c["passed"])
        return Row("app_server_schema", "RED", f"Codex {report['binary']['version']} at {binary} fails {failed}",
                   "use a Codex version rekall supports, or update rekall; schedule refuses until then")
    return Row.green("app_server_schema", f"Codex {report['binary']['version']} at {binary}: all "
                                          f"{len(report['checks'])} checks pass")


__all__ = ["CHECK_AND_FIX", "NAME", "OWN_APP_SERVER", "SERVED_SESSIONS", "START_HINT", "AppServerThread",
           "NotAConversation", "SharedAppServerPlatform", "ThreadNotServed", "diagnose", "observe_on", "out_of_reach"]
