"""The VS Code extension's IPC router as a platform (:mod:`rekall.adapters.contract`).

:class:`ExtensionIpc` follows a thread with a :class:`~rekall.adapters.extension.session.ThreadSession`,
observes it with one short-lived session, checks the bundled Codex binary's public schema, and
contributes the ``ipc_endpoint``, ``extension_protocol``, ``router``, ``owner``, ``codex_binary``
and ``public_schema`` rows to ``doctor``.
"""

from __future__ import annotations

import asyncio
import os
import stat
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rekall.kernel import events as ev
from rekall.adapters.extension import NAME, ipc
from rekall.adapters.extension import choice
from rekall.adapters.extension.discovery import CodexBinary, discover_codex_binary
from rekall.adapters.extension.first_follow import FirstFollow
from rekall.adapters.extension.generations import COMPARED_METHODS
from rekall.adapters.extension.session import ThreadSession, connect_thread
from rekall.kernel.errors import RekallError
from rekall.kernel.environment import env_value
from rekall.adapters.contract import Absence, Row, ThreadSnapshot, noted
from rekall.kernel.records import Acted, ConnectionLostError, Failure
from rekall.transports import Endpoint, MessageChannel, resolve_endpoint, transport_for
from rekall.transports.endpoint import override_endpoint

#: The extension's router has no request that adds an item to a thread's context without a turn.
INJECTION_LIMIT = ("the VS Code extension's IPC router has no way to add the handoff to a thread's context "
                   "without starting a turn (no injection request yet); only a continuation carries it there")
_COMPARED = frozenset(COMPARED_METHODS)

#: Bounds for the doctor's IPC checks: generous, since a healthy router answers at once.
ROUTER_TIMEOUT_S = 5.0
OWNER_TIMEOUT_S = 8.0
#: How long a read-only look (probe, schedule's preflight) waits for an owner to answer our follow
#: after owner discovery answered no-client-found while the generation was undecided: only a
#: generation without discovery (26.721) could still own the thread, and its owner sends the
#: thread's state at once. An unknown thread must not hold probe for the whole snapshot timeout
#: (12 s); the worker, following a thread that schedule found, still waits all of it.
OWNER_ANSWER_S = 0.8


def _failure(exc: RekallError) -> Failure:
    return Failure(exc.code, exc.message, getattr(exc, "delivery", "unknown"))


async def _acted(answer: Awaitable[Any], acted: Callable[[Any], Acted]) -> Acted:
    try:
        result = await answer
    except RekallError as exc:
        return Acted(_failure(exc))
    return acted(result)


async def _at_once(acted: Acted) -> Acted:
    return acted


def _snapshot(session: ThreadSession, details: Mapping[str, Any] | None = None) -> ThreadSnapshot:
    mirror = session.mirror
    return ThreadSnapshot(session.thread_id, mirror.facts, mirror.revision, session.owner_id, details or {})


class IpcThread:
    """A thread followed through the extension's router (implements ``FollowedThread``)."""

    def __init__(self, session: ThreadSession) -> None:
        self.session = session

    def events(self) -> AsyncIterator[ev.DomainEvent]:
        return self.session.events()

    def snapshot(self) -> ThreadSnapshot:
        return _snapshot(self.session)

    @property
    def seen_at(self) -> float | None:
        """When the fact of the event ``events()`` delivered last was known (``time.monotonic()``):
        when the frame that showed it arrived."""
        return self.session.last_event_at

    def connection_note(self) -> dict[str, Any]:
        return {"platform": NAME, "ownerId": self.session.owner_id, "adapter": self.session.generation,
                "generationReason": self.session.generation_reason,
                "generationSettled": self.session.generation_settled}

    async def reconnect(self) -> None:
        await self.session.reconnect()

    # The request is written before these return (the session's ``_request``): the worker's step
    # puts it on the wire; the answer is awaited.

    def compact(self) -> Awaitable[Acted]:
        try:
            answer = self.session.compact()
        except RekallError as exc:
            return _at_once(Acted(_failure(exc)))
        return _acted(answer, lambda _: Acted())

    def start_turn(self, text: str, job_id: str) -> Awaitable[Acted]:
        try:
            answer = self.session.start_turn(text, client_user_message_id=job_id)
        except RekallError as exc:
            return _at_once(Acted(_failure(exc)))
        return _acted(answer, lambda turn: Acted(turn_id=turn.turn_id, turn_status=turn.status))

    def inject(self, text: str) -> Awaitable[Acted]:
        return _at_once(Acted(Failure("not_supported", INJECTION_LIMIT, "not_delivered")))

    async def aclose(self) -> None:
        await self.session.aclose()


class ExtensionIpc:
    """The extension's IPC router, found from ``env`` (implements ``Platform``)."""

    name = NAME
    title = "the VS Code extension"
    host = "the VS Code extension"
    serving_hint = "open the thread in a VS Code window with the Codex extension"
    follow_only_reads = True  # a follower subscribes to the owner's broadcasts; nothing else is told
    injection_limit: str | None = INJECTION_LIMIT

    def __init__(self, env: Mapping[str, str] | None = None, *, settled: choice.Settled | None = None,
                 first_follow: FirstFollow | BaseException | None = None) -> None:
        self.env = os.environ if env is None else env
        #: The grounds of the last connect's choice (probe shows them).
        self.last_choice: choice.Choice = choice.Choice(None, (), "not connected yet")
        #: What ``schedule`` settled, from the job (the worker reuses it for the same owner).
        self.settled_at_schedule = settled
        #: The worker's first follow (:mod:`rekall.adapters.extension.first_follow`), or why it failed: the next
        #: connect to its thread goes on from it.
        self.first_follow = first_follow

    async def connect(self, thread_id: str, *, request_timeout_s: float, write_cache: bool,
                      snapshot_timeout_s: float = 12.0, endpoint: Endpoint | None = None,
                      reuse: bool = True, owner_answer_s: float | None = None) -> ThreadSession:
        """Connect speaking the generation the grounds support (:mod:`rekall.adapters.extension.choice`);
        on the connection the worker's first follow made, if it was made for this thread."""
        first, self.first_follow = self.first_follow, None  # used once: a reconnect connects anew
        if isinstance(first, BaseException):
            raise first  # the first follow failed: the job fails with its error, nothing is tried again
        if first is not None:
            decision = first.decision
        else:
            where = endpoint.path if endpoint is not None else _endpoint_path(self.env)
            decision = choice.decide(self.env, thread_id, router=where, write_cache=write_cache,
                                       at_schedule=self.settled_at_schedule, reuse=reuse)
        self.last_choice = decision.chosen
        adapter, earlier = decision.adapter, decision.earlier
        session = await connect_thread(thread_id, env=self.env, endpoint=endpoint, request_timeout_s=request_timeout_s,
                                       snapshot_timeout_s=snapshot_timeout_s, owner_answer_s=owner_answer_s,
                                       adapter=adapter,
                                       candidates=decision.candidates or None, first_follow=first)
        if earlier is not None and session.owner_id != earlier.owner:
            # Another owner answered than the one whose answer was remembered (a reload, perhaps
            # an update): the memory proves nothing about it, so ask the owner again.
            await session.aclose()
            choice.forget(earlier.router, thread_id)
            return await self.connect(thread_id, request_timeout_s=request_timeout_s, write_cache=write_cache,
                                      snapshot_timeout_s=snapshot_timeout_s, endpoint=endpoint, reuse=False,
                                      owner_answer_s=owner_answer_s)
        reason = decision.reason
        session.generation_reason = reason if adapter is not None else f"{reason}: {session.generation_reason}"
        session.generation_settled = decision.source
        if decision.chosen.adapter is None and earlier is None and (settled := settled_by(session)) is not None:
            choice.remember(thread_id, settled)  # (b) now
        return session

    async def follow(self, thread_id: str, *, request_timeout_s: float) -> IpcThread:
        return IpcThread(await self.connect(thread_id, request_timeout_s=request_timeout_s, write_cache=True))

    async def observe(self, thread_id: str, *, request_timeout_s: float) -> ThreadSnapshot:
        session = await self.connect(thread_id, request_timeout_s=request_timeout_s, write_cache=False,
                                     owner_answer_s=OWNER_ANSWER_S)
        try:
            # The generation settled, with its grounds: probe shows them (its reply's key is still
            # generationEvidence), schedule journals them.
            settled = None if (found := settled_by(session)) is None else found.to_json()
            seen = _snapshot(session, {
                "endpoint": session.endpoint._asdict(),
                "adapter": session.generation,
                "generationReason": session.generation_reason,
                "generationSettled": session.generation_settled,
                **({"generationEvidence": settled} if settled is not None else {}),
                "extensions": [i.to_json() for i in self.last_choice.installs],
                "methodVersions": dict(session.adapter.METHOD_VERSIONS),
                "observedVersions": {method: sorted(versions)
                                     for method, versions in session.follower.observed_versions.items()},
            })
            return attrs.evolve(seen, settled=settled, calls_in_progress=_calls_in_progress(session))
        finally:
            await session.aclose()

    async def diagnose(self) -> list[Row]:
        endpoint_row, endpoint = check_endpoint(self.env)
        router_row = await check_router(endpoint)
        if router_row.level == "GREEN":
            router_row = attrs.evolve(router_row, shows=frozenset({"answers"}))
        rows = [endpoint_row, check_extension(self.env), router_row]
        if (owner_row := await check_owner(self, endpoint)) is not None:
            rows.append(attrs.evolve(owner_row, shows=frozenset({"serves_thread"})) if owner_row.level == "GREEN"
                        else owner_row)
        binary_row, binary = check_codex_binary(self.env)
        rows += [binary_row, await asyncio.to_thread(check_schema, self.env, binary)]
        absent = endpoint_row.detail.startswith(_ABSENT_EXTENSION["ipc_endpoint"])
        return [_optional(row) if absent else _optional_when_another_answers(row) for row in rows]

    def compatibility(self) -> dict[str, Any]:
        """The public schema check of the extension's bundled Codex. Cached by binary identity, so
        scheduling does not regenerate the schema each time. A custom test transport
        (``REKALL_PIPE``) has no extension behind it: not checked."""
        if uses_test_transport(self.env):
            return {"status": "not_checked", "reason": "custom_test_transport"}
        from rekall.codex.schema import check_compatibility, default_cache_dir

        found = discover_codex_binary(self.env)
        report = check_compatibility(Path(found.path), cache_dir=default_cache_dir(self.env)).to_json()
        report["binaryPath"] = found.path
        report["extensionVersion"] = found.extension.version if found.extension else None
        return report

    def absent(self, error: RekallError) -> Absence | None:
        return None  # the extension's answer is always its own news, even without a socket

    def with_notes(self, error: RekallError, notes: Sequence[Absence]) -> RekallError:
        return noted(error, notes)


def uses_test_transport(env: Mapping[str, str]) -> bool:
    return env_value(env, "REKALL_PIPE", "CONTEXT_COMPACT_PIPE") is not None


def _calls_in_progress(session: ThreadSession) -> frozenset[str]:
    """What the live turns of the owner's state are calling now (a paginated history: nothing known)."""
    from rekall.kernel.caller import calls_in_progress

    state = session.mirror.state
    return calls_in_progress(state.get(session.mirror.layout.turns)) if isinstance(state, dict) else frozenset()


def settled_by(session: ThreadSession) -> choice.Settled | None:
    """The generation a connected session speaks, with its grounds; ``None`` without an owner."""
    if session.owner_id is None:
        return None
    path = session.endpoint.path
    return choice.Settled(session.generation, session.owner_id, path, choice.socket_identity(path),
                            session.generation_reason)


def _endpoint_path(env: Mapping[str, str]) -> str | None:
    try:
        return resolve_endpoint(env).path
    except RekallError:
        return None  # connecting reports it


# --- doctor's rows ------------------------------------------------------------------------


def check_endpoint(env: Mapping[str, str]) -> tuple[Row, Endpoint | None]:
    """The endpoint row, and the endpoint when it may be used."""
    try:
        endpoint = resolve_endpoint(env)
    except RekallError as exc:
        return Row.failed("ipc_endpoint", exc), None
    if endpoint.kind == "test":
        return Row("ipc_endpoint", "AMBER",
                   f"test endpoint {endpoint.path} ({endpoint.note}): owner, mode and symlink checks are skipped; "
                   "the peer uid is still checked on connect",
                   "unset REKALL_PIPE and CONTEXT_COMPACT_PIPE to use the extension's own socket"), endpoint
    if endpoint.kind == "pipe":
        return Row.green("ipc_endpoint", f"named pipe {endpoint.path} (no filesystem checks apply)"), endpoint
    sock = Path(endpoint.path)
    modes = f"directory {_mode(sock.parent)}, socket {_mode(sock)}, both owned by you, neither a symlink"
    note = f"; {endpoint.note}" if endpoint.note else ""
    return Row.green("ipc_endpoint", f"{endpoint.kind} socket {sock}: {modes}{note}"), endpoint


def _mode(path: Path) -> str:
    try:
        return f"{stat.S_IMODE(os.lstat(path).st_mode):04o}"
    except OSError:
        return "unknown (it changed while being checked)"


async def _initialize(endpoint: Endpoint) -> tuple[str, str]:
    """Connect and run ``initialize``; return our client id and the peer check."""
    adapter = ipc.ADAPTERS[0]  # initialize is the same in every generation
    stream = await transport_for(endpoint).connect()
    channel = MessageChannel(stream)
    try:
        request_id = str(uuid.uuid4())
        await channel.send(adapter.request(
            adapter.INITIALIZE, adapter.initialize_params("codex-rekall"), request_id=request_id,
            source=adapter.INITIAL_CLIENT_ID, timeout_ms=int(ROUTER_TIMEOUT_S * 1000)))
        while (message := await channel.receive()) is not None:
            inbound = adapter.classify(message, thread_id="", owner_id=None)
            if isinstance(inbound, adapter.Reply):
                await channel.send(inbound.message)  # e.g. a discovery probe: we handle nothing
            elif isinstance(inbound, adapter.Response) and inbound.request_id == request_id:
                return adapter.client_id_from(inbound), stream.peer_check
        raise ConnectionLostError("the router closed the connection before answering initialize",
                                  hint="reload the VS Code window so that the extension restarts its router")
    finally:
        await channel.aclose()


async def check_router(endpoint: Endpoint | None) -> Row:
    if endpoint is None:
        return Row.not_checked("router", "no usable IPC endpoint", "fix the ipc_endpoint row first")
    try:
        async with asyncio.timeout(ROUTER_TIMEOUT_S):
            client_id, peer_check = await _initialize(endpoint)
    except TimeoutError:
        return Row("router", "RED", f"no answer to initialize on {endpoint.path} within {ROUTER_TIMEOUT_S:g} s",
                   "the extension may be hung; reload the VS Code window")
    except RekallError as exc:
        return Row.failed("router", exc)
    return Row.green("router", f"initialize answered on {endpoint.path} (client id {client_id}); "
                               f"peer check: {peer_check}")


def check_extension(env: Mapping[str, str]) -> Row:
    """The installed extension: where, its version, the table read, the generation chosen and why."""
    try:
        chosen = choice.choose(env, write_cache=False)
    except RekallError as exc:
        return Row.failed("extension_protocol", exc)
    if chosen.refusal is not None:
        return Row("extension_protocol", "RED", chosen.refusal, "rekall will not speak to this extension; "
                   "`rekall protocol` shows the differences")
    found = "; ".join(_install_text(i) for i in chosen.installs) or (
        "no installed extension found in the known places (`rekall protocol` lists them)")
    decided = (f"generation {chosen.adapter.NAME}" if chosen.adapter is not None
               else f"generation from the owner's answer among {' and '.join(a.NAME for a in chosen.candidates)}")
    detail = f"{found}; {decided}: {chosen.reason}"
    if not chosen.installs:  # nothing is wrong, but nothing was checked: VS Code chats need the extension
        return Row("extension_protocol", "AMBER", detail, "install the Codex extension for VS Code chats; terminal "
                   "sessions on the shared app-server do not need it")
    unread = [i for i in chosen.installs if i.table is None]
    if unread:
        return Row("extension_protocol", "AMBER", detail, "rekall did not read exactly one table from an installed "
                   "extension (see the detail); the owner's answer (or REKALL_GENERATION) decides instead")
    return Row.green("extension_protocol", detail)


def _install_text(install: Any) -> str:
    head = f"{install.what} {install.version} at {install.path}"
    if install.table is None:
        tables = "; ".join(", ".join(f"{m} {v}" for m, v in t.items() if m in _COMPARED) for t in install.tables)
        return f"{head}: {install.problem}" + (f" ({tables})" if tables else "")
    return f"{head}: table " + ", ".join(f"{m} {v}" for m, v in install.table.items()
                                         if m in _COMPARED)


async def check_owner(platform: ExtensionIpc, endpoint: Endpoint | None) -> Row | None:
    """Owner discovery for ``CODEX_THREAD_ID``; ``None`` (no row) when it is not set."""
    env = platform.env
    thread = env_value(env, "CODEX_THREAD_ID")
    if thread is None:
        return None
    if endpoint is None:
        return Row.not_checked("owner", f"no usable IPC endpoint to find the owner of {thread}",
                               "fix the ipc_endpoint row first")
    try:
        session = await platform.connect(thread, endpoint=endpoint, request_timeout_s=OWNER_TIMEOUT_S,
                                         snapshot_timeout_s=OWNER_TIMEOUT_S, write_cache=False)
    except RekallError as exc:
        return Row.failed("owner", exc)
    try:
        mirror = session.mirror
        found = (f"thread {session.thread_id} is owned by client {session.owner_id}; generation {session.generation} "
                 f"({session.generation_reason}), runtime {mirror.runtime_status or 'unknown'}")
        if mirror.layout_problem:
            return Row("owner", "RED", f"{found}; unsupported state layout: {mirror.layout_problem}",
                       "update rekall: the extension changed its conversation state")
        return Row.green("owner", found)
    finally:
        await session.aclose()


# --- the codex binary and its schema -----------------------------------------------------


def check_codex_binary(env: Mapping[str, str]) -> tuple[Row, CodexBinary | None]:
    """The binary row, and the binary when one was found."""
    try:
        found = discover_codex_binary(env)
    except RekallError as exc:
        # With a test endpoint there is no extension, and probe and schedule skip the schema check.
        test = override_endpoint(env)
        if test is not None and exc.code == "codex_binary_not_found":
            return Row("codex_binary", "AMBER", f"{exc.message} (not needed with the test endpoint {test.path})",
                       exc.hint or "set REKALL_CODEX_BINARY"), None
        return Row.failed("codex_binary", exc), None
    origin = "REKALL_CODEX_BINARY" if found.source == "override" else "PATH"
    if found.extension is None:
        # The schema check then covers this CLI, which may not be the engine the extension runs.
        return Row("codex_binary", "AMBER", f"{found.path} (from {origin}) is not inside an extension folder, "
                   "so the extension's version is unknown",
                   "point REKALL_CODEX_BINARY at the extension's own …/openai.chatgpt-<version>/bin/<platform>/codex"
                   ), found
    ext = found.extension
    return Row.green("codex_binary", f"{found.path} (from {origin}; extension {ext.publisher}.{ext.name} "
                                     f"{ext.version})"), found


def check_schema(env: Mapping[str, str], binary: CodexBinary | None) -> Row:
    from rekall.codex.schema import check_compatibility, default_cache_dir

    if binary is None:
        return Row.not_checked("public_schema", "no codex binary", "fix the codex_binary row first")
    try:
        report = check_compatibility(Path(binary.path), cache_dir=default_cache_dir(env))
    except RekallError as exc:
        return Row.failed("public_schema", exc)
    source = "from the cache" if report.from_cache else "generated now"
    if report.verdict != "compatible":
        failed = "; ".join(f"{c.name}: {c.detail} ({c.file}#{c.pointer})" for c in report.failed)
        return Row("public_schema", "RED", f"Codex {report.binary.version} ({source}) fails {failed}",
                   "use a Codex version rekall supports, or update rekall; schedule refuses until then")
    return Row.green("public_schema", f"Codex {report.binary.version}: all {len(report.checks)} checks pass "
                                      f"({', '.join(c.name for c in report.checks)}; {source})")


#: Rows that only say the extension is absent (their details start so), not that it is unsafe.
_ABSENT_EXTENSION = {"ipc_endpoint": "no Codex IPC socket", "codex_binary": "no extension-bundled Codex binary"}


def _optional(row: Row) -> Row:
    """A missing VS Code extension is a host the user may not have, not a fault: AMBER, not RED."""
    if not (row.level == "RED" and row.detail.startswith(_ABSENT_EXTENSION.get(row.name, "\0"))):
        return row
    return Row(row.name, "AMBER", f"{row.detail} (only VS Code chats need it)", row.hint)


def _optional_when_another_answers(row: Row) -> Row:
    """With the extension's socket there but another platform answering, a missing piece of the
    extension is not fatal either."""
    optional = _optional(row)
    return row if optional is row else attrs.evolve(row, unless={"answers": optional})
