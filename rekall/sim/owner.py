"""SimulatedOwner: the extension's IPC router and the thread's owning window, in one.

It listens on a real Unix socket inside a private temporary directory (0700 directory,
0600 socket) and speaks the wire protocol exactly: length-prefixed JSON frames,
``initialize``, owner discovery, following, snapshots and patches with
``revision``/``baseRevision``, the follower requests, and the router's error strings.
The thread itself comes from a backend (:mod:`rekall.sim.backend`). ``generation`` picks
the build it plays (its own tables in :mod:`rekall.sim.protocol`): ``26.9xx`` answers owner
discovery and takes targeted follower requests; ``26.721`` has no owner discovery, routes
follower requests by discovery and wants start-turn's ``turnStartParams``.

Faults are scripted on the owner (see the *faults* section below): router errors for a
method, slow or missing replies, dropped connections, broken frames, revision gaps,
inapplicable patches, a protocol version bump, and the owner moving to another client.

Use it inside a test's event loop::

    async with SimulatedOwner() as sim:
        session = await connect_thread(sim.thread_id, env=sim.env)

or from synchronous code through :func:`rekall.sim.threaded.start_sim_in_thread`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from rekall.adapters.extension.generations import GENERATION_VAR, GENERATIONS, left_by_the_owners_answer
from rekall.kernel.errors import RekallError
from rekall.sim import protocol as p
from rekall.sim.backend import Backend, RouterError, ScriptedBackend
from rekall.transports import ByteStream, MessageChannel, encode_message
from rekall.transports.framing import MAX_FRAME_BYTES
from rekall.transports.socketstream import SocketStream, serve_unix

#: Broken frames the simulator can send, by name.
GARBAGE: dict[str, bytes] = {
    "zero_length": (0).to_bytes(4, "little"),
    "oversize": (MAX_FRAME_BYTES + 1).to_bytes(4, "little") + b"{}",
    "invalid_utf8": (2).to_bytes(4, "little") + b"\xff\xfe",
    "invalid_json": (5).to_bytes(4, "little") + b"{nope",
}
_SUN_PATH_MAX = 104  # macOS; Linux allows 108
#: A large frame is written in pieces of this size (see ``_write_loop``).
WRITE_PIECE_BYTES = 256 * 1024


class SimError(RekallError):
    code = "sim_error"


@attrs.frozen
class RecordedRequest:
    """A request the owner received: its method, params and the whole envelope."""

    method: str
    params: Any
    envelope: dict[str, Any]
    client_id: str | None


@attrs.define
class _Fault:
    error: str | None = None  # answer with this router error
    deliver: bool = False  # let the backend act anyway (the outcome is then really unknown)
    delay_s: float = 0.0  # delay the reply
    silent: bool = False  # never reply
    drop_connection: bool = False  # close the requesting client's connection
    result: Any = None  # replace the result (e.g. a bad acknowledgement)


class _Client:
    def __init__(self, channel: MessageChannel) -> None:
        self.channel = channel
        self.id: str | None = None
        self.following = False
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False


def pin_for(generation: str) -> dict[str, str]:
    """``REKALL_GENERATION`` for the build ``generation`` where, with no installed table to read,
    the owner's answer cannot tell it from another generation rekall knows; else nothing."""
    discovery = p.OWNER_DISCOVERY in p.BUILDS[generation].table
    alike = left_by_the_owners_answer(discovery, GENERATIONS)
    return {GENERATION_VAR: generation} if len(alike) > 1 else {}


class SimulatedOwner:
    def __init__(
        self,
        backend: Backend | None = None,
        *,
        socket_path: str | os.PathLike[str] | None = None,
        codex_home: bool = False,
        mode: str = "patches",
        router_timeouts: bool = True,
        snapshot_on_connect: bool = False,
        foreign_batches: bool = False,
        generation: str = p.DEFAULT_GENERATION,
        discovery_delay_s: float = 0.0,
        **backend_options: Any,
    ) -> None:
        if mode not in ("patches", "snapshots"):
            raise SimError(f"mode must be 'patches' or 'snapshots', got {mode!r}")
        if generation not in p.BUILDS:
            raise SimError(f"unknown generation {generation!r}", hint=f"choose one of {', '.join(p.BUILDS)}")
        self.generation = generation
        self.build = p.BUILDS[generation]
        #: How long the router takes to answer ``no-client-found`` after discovery probes
        #: (the real router's delay is in docs/adapters.md).
        self.discovery_delay_s = discovery_delay_s
        self.backend: Backend = backend if backend is not None else ScriptedBackend(**backend_options)
        self.mode = mode
        self.router_timeouts = router_timeouts
        #: Like the real owner: an unsolicited snapshot (revision jump) whenever a client connects.
        self.snapshot_on_connect = snapshot_on_connect
        #: Another window broadcasts patch batches for this thread alongside the owner's own.
        self.foreign_batches = foreign_batches
        self.foreign_batches_sent = 0
        self.foreign_client_id = f"client-{uuid.uuid4()}"  # the other window
        self.owner_id = f"owner-{uuid.uuid4()}"
        #: The build's method table (base versions); tests may change it to play another build.
        self.request_versions = dict(self.build.table)
        self.state_version = self.request_versions[p.STATE_CHANGED]
        self.no_owner = False  # owner discovery answers no-client-found
        self.revision = 1
        self._requested_path = Path(socket_path) if socket_path is not None else None
        self._codex_home = codex_home
        self._made_dir: Path | None = None
        self.socket_path: Path | None = None
        self._inode: int | None = None
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[_Client] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._faults: dict[str, list[_Fault]] = {}
        self._drop_updates = 0
        self._ignore_follows = 0
        self._changed = asyncio.Event()

        self.requests: list[RecordedRequest] = []
        #: Every request that reached the router, refused ones included (``requests`` holds
        #: those routed to the owner).
        self.routed: list[RecordedRequest] = []
        self.follow_count = 0
        self.discovery_count = 0
        self.connections = 0
        self.probe_replies: list[dict[str, Any]] = []

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def thread_id(self) -> str:
        return self.backend.thread_id

    @property
    def codex_home(self) -> Path | None:
        """With ``codex_home=True``: a CODEX_HOME whose ``ipc/ipc.sock`` is our socket."""
        return self.socket_path.parent.parent if self._codex_home and self.socket_path else None

    @property
    def env(self) -> dict[str, str]:
        """Environment that points rekall at this simulator. No extension table is installed
        for rekall to read, so where the owner's answer cannot tell this build from another
        generation rekall knows, the generation is pinned (:attr:`pin`), as such a user must."""
        return {**self.endpoint_env, **self.pin}

    @property
    def endpoint_env(self) -> dict[str, str]:
        """Environment that points rekall at this simulator and pins nothing: for tests of
        what the owner's answer decides."""
        if self.codex_home is not None:
            return {"CODEX_HOME": str(self.codex_home)}
        return {"REKALL_PIPE": str(self.socket_path)}

    @property
    def pin(self) -> dict[str, str]:
        """``REKALL_GENERATION`` for this build when rekall needs it (see :attr:`env`), else nothing."""
        return pin_for(self.generation)

    async def start(self) -> SimulatedOwner:
        path = self._prepare_path()
        self._server = await serve_unix(str(path), self._serve_socket)
        os.chmod(path, 0o600)  # the 0700 directory already covers the moment before this
        self.socket_path = path
        self._inode = os.lstat(path).st_ino
        await self.backend.start(self)
        return self

    async def stop(self) -> None:
        await self.backend.stop()
        if self._server is not None:
            self._server.close()
        for client in list(self._clients):
            await self._close_client(client)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.socket_path is not None:
            try:  # unlink only our own socket, never one that replaced it
                if os.lstat(self.socket_path).st_ino == self._inode:
                    os.unlink(self.socket_path)
            except FileNotFoundError:
                pass
        if self._made_dir is not None:
            shutil.rmtree(self._made_dir, ignore_errors=True)
            self._made_dir = None

    async def __aenter__(self) -> SimulatedOwner:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _prepare_path(self) -> Path:
        if self._requested_path is None:
            self._made_dir = Path(tempfile.mkdtemp(prefix="rk-sim-", dir="/tmp" if os.path.isdir("/tmp") else None))
            os.chmod(self._made_dir, 0o700)
            if self._codex_home:
                (self._made_dir / "ipc").mkdir(mode=0o700)
                return self._made_dir / "ipc" / "ipc.sock"
            return self._made_dir / "ipc.sock"
        path = self._requested_path.absolute()
        if len(os.fsencode(path)) >= _SUN_PATH_MAX:
            raise SimError(f"socket path {path} is too long for a Unix socket ({len(os.fsencode(path))} bytes)",
                           hint="choose a shorter path, e.g. under /tmp")
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path.parent)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            raise SimError(f"directory {path.parent} must be a real directory owned by you with mode 0700",
                           hint=f"run: chmod 700 {path.parent}, or choose another --socket")
        if os.path.lexists(path):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise SimError(f"{path} exists and is not a socket", hint="choose another --socket path")
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(str(path))
                except OSError:
                    os.unlink(path)  # a stale socket from a previous run
                else:
                    raise SimError(f"something is already listening on {path}", hint="stop it or choose another path")
        return path

    # -- connections -------------------------------------------------------------------

    async def _serve_socket(self, stream: SocketStream) -> None:
        try:
            await self.serve_stream(stream)
        except asyncio.CancelledError:
            pass  # the root of this connection's task

    async def serve_stream(self, stream: ByteStream) -> None:
        """Run the router for one connected client (also usable with a memory transport)."""
        client = _Client(MessageChannel(stream))
        self._clients.add(client)
        self.connections += 1
        self._notify()
        writer = asyncio.create_task(self._write_loop(client))
        try:
            while (message := await client.channel.receive()) is not None:
                await self._dispatch(client, message)
        except RekallError:
            pass  # a broken client connection ends just that client
        finally:
            await self._close_client(client)
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    async def _write_loop(self, client: _Client) -> None:
        try:
            while (frame := await client.outbox.get()) is not None:
                # In pieces, each written once the previous one is on its way: the real owner
                # (Node) writes a big buffer without copying it, where asyncio's transport
                # copies whatever the socket does not take at once (twice on 3.11), which
                # would delay a large snapshot by more than the follower's whole receive.
                view = memoryview(frame)
                for start in range(0, len(view), WRITE_PIECE_BYTES):
                    await client.channel.send_raw(view[start:start + WRITE_PIECE_BYTES])
        except RekallError:
            await self._close_client(client)

    def _send(self, client: _Client, message: dict[str, Any] | bytes) -> None:
        if not client.closed:
            client.outbox.put_nowait(message if isinstance(message, bytes) else encode_message(message))

    async def _close_client(self, client: _Client) -> None:
        if client.closed:
            return
        client.closed = True
        client.following = False
        self._clients.discard(client)
        client.outbox.put_nowait(None)
        await client.channel.aclose()
        self._notify()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- routing -------------------------------------------------------------------------

    async def _dispatch(self, client: _Client, message: Any) -> None:
        if not isinstance(message, dict):
            return
        kind = message.get("type")
        if kind == "request":
            self._spawn(self._on_request(client, message))
        elif kind == "broadcast":
            self._on_broadcast(client, message)
        elif kind in ("response", "client-discovery-response"):
            self.probe_replies.append(message)
            self._notify()

    async def _on_request(self, client: _Client, message: dict[str, Any]) -> None:
        request_id, method, params = message.get("requestId"), message.get("method"), message.get("params")
        self.routed.append(RecordedRequest(str(method), params, message, client.id))
        if method == p.INITIALIZE:
            fault = self._next_fault(method)  # the router refusing us (scripted with fail_next)
            if fault.error is not None:
                self._send(client, p.failure(request_id, fault.error))
                return
            client.id = f"client-{uuid.uuid4()}"
            self._send(client, p.success(request_id, method, {"clientId": client.id}, "router"))
            if self.snapshot_on_connect:
                self.publish_snapshot(jump=True)
            return
        if not isinstance(method, str):
            self._send(client, p.failure(request_id, "no-handler-for-request"))
            return
        expected = p.accepted_version(self.request_versions, method, message)
        if "targetClientId" not in message and (expected is None or method.startswith("thread-follower-")):
            await self._route_by_discovery(client, message, expected)
            return
        if expected is not None and message.get("version") != expected:
            self._send(client, p.failure(request_id, "request-version-mismatch"))
            return
        if method == p.OWNER_DISCOVERY:
            fault = self._next_fault(method)
            if fault.silent:
                return
            mine = isinstance(params, dict) and params.get("conversationId") == self.thread_id
            self.discovery_count += 1
            self._notify()
            if fault.delay_s:
                await asyncio.sleep(fault.delay_s)
            if fault.drop_connection:
                await self._close_client(client)
            elif fault.error is not None:
                self._send(client, p.failure(request_id, fault.error))
            elif mine and not self.no_owner:
                self._send(client, p.success(request_id, method, {}, self.owner_id))
            else:
                self._send(client, p.failure(request_id, "no-client-found"))
            return
        if message.get("targetClientId") != self.owner_id:
            self._send(client, p.failure(request_id, "no-client-found"))
            return
        self.requests.append(RecordedRequest(str(method), params, message, client.id))
        self._notify()
        await self._answer_owner_request(client, message)

    async def _route_by_discovery(self, client: _Client, message: dict[str, Any], expected: int | None) -> None:
        """An untargeted request: the owner can handle it only when it has a handler at this
        version and owns the conversation; otherwise the router answers ``no-client-found``
        (a wrong version looks exactly like nobody owning the thread)."""
        params = message.get("params")
        mine = isinstance(params, dict) and params.get("conversationId") == self.thread_id
        if expected is not None and message.get("version") == expected and mine and not self.no_owner:
            self.requests.append(RecordedRequest(str(message.get("method")), params, message, client.id))
            self._notify()
            await self._answer_owner_request(client, message)
            return
        if self.discovery_delay_s:
            await asyncio.sleep(self.discovery_delay_s)
        self._send(client, p.failure(message.get("requestId"), "no-client-found"))

    def _malformed(self, method: str, params: Any) -> str | None:
        """What the owner's handler would throw for params of another build's shape."""
        key = self.build.start_turn_key
        if method == p.START_TURN and not (isinstance(params, dict) and isinstance(params.get(key), dict)):
            return f"invalid-request: {p.START_TURN} needs {key}"
        return None

    async def _answer_owner_request(self, client: _Client, message: dict[str, Any]) -> None:
        request_id, method = message.get("requestId"), str(message.get("method"))
        fault = self._next_fault(method)
        if fault.drop_connection and not fault.deliver:
            await self._close_client(client)
            return
        if fault.error is not None and not fault.deliver:
            self._send(client, p.failure(request_id, fault.error))
            return
        if (thrown := self._malformed(method, message.get("params"))) is not None:
            self._send(client, p.failure(request_id, thrown))
            return
        work = asyncio.create_task(self._call_backend(method, message.get("params")))
        self._tasks.add(work)  # it may outlive this request (a router timeout), never the owner
        work.add_done_callback(self._tasks.discard)
        timeout_ms = message.get("timeoutMs")
        budget = timeout_ms / 1000 if self.router_timeouts and isinstance(timeout_ms, (int, float)) else None
        try:
            # The router gives up after timeoutMs; the owner's work goes on (outcome unknown).
            async with asyncio.timeout(budget):
                reply = await asyncio.shield(work)
                if fault.delay_s:
                    await asyncio.sleep(fault.delay_s)
        except TimeoutError:
            self._send(client, p.failure(request_id, "request-timeout"))
            return
        if fault.drop_connection:
            await self._close_client(client)
        elif fault.silent:
            return
        elif fault.error is not None:
            self._send(client, p.failure(request_id, fault.error))
        elif isinstance(reply, RouterError):
            self._send(client, p.failure(request_id, reply.error))
        else:
            result = fault.result if fault.result is not None else reply
            self._send(client, p.success(request_id, method, result, self.owner_id))

    async def _call_backend(self, method: str, params: Any) -> Any:
        try:
            return await self.backend.handle(method, params if isinstance(params, dict) else {})
        except RouterError as exc:
            return exc

    def _on_broadcast(self, client: _Client, message: dict[str, Any]) -> None:
        params = message.get("params")
        if message.get("method") != p.FOLLOWING_CHANGED or not isinstance(params, dict):
            return
        targets = message.get("targetClientIds")  # absent: to every client, the owner included
        if params.get("conversationId") != self.thread_id or (targets is not None and self.owner_id not in targets):
            return
        if params.get("following") is not True:
            client.following = False
            return
        self.follow_count += 1
        if self.no_owner:  # nobody owns the thread: nobody answers
            self._notify()
            return
        client.following = True
        self._notify()
        if self._ignore_follows:
            self._ignore_follows -= 1
            return
        self._send(client, self._snapshot_frame())

    # -- the OwnerPort the backend publishes through ------------------------------------

    def _state_frame(self, change: dict[str, Any], source: str | None = None) -> bytes:
        params = {"hostId": p.HOST_ID, "conversationId": self.thread_id, "change": change}
        return encode_message(p.broadcast(p.STATE_CHANGED, source or self.owner_id, self.state_version, params))

    def _snapshot_frame(self) -> bytes:
        return self._state_frame({"type": "snapshot", "revision": self.revision,
                                  "conversationState": p.renamed_state(self.backend.snapshot(), self.build.renames)})

    def _to_followers(self, frame: bytes) -> None:
        for client in list(self._clients):
            if client.following:
                self._send(client, frame)

    def publish(self, patches: list[dict[str, Any]]) -> None:
        if self.foreign_batches:  # made for the revision the followers hold, and sent first
            self.send_foreign_batch()
        base, self.revision = self.revision, self.revision + 1
        self._notify()
        if self._drop_updates:
            self._drop_updates -= 1
            return
        if self.mode == "snapshots":
            self._to_followers(self._snapshot_frame())
        else:
            self._to_followers(self._state_frame(
                {"type": "patches", "baseRevision": base, "revision": self.revision,
                 "patches": p.renamed_patches(patches, self.build.renames)}))

    def publish_snapshot(self, *, jump: bool = False) -> None:
        """A snapshot to every follower; ``jump`` skips a revision first (1→2→4→5 was seen live)."""
        if jump:
            self.revision += 2
            self._notify()
        self._to_followers(self._snapshot_frame())

    # -- waiting ---------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_until(self, predicate: Callable[[SimulatedOwner], bool], timeout: float = 5.0) -> None:
        """Wait (bounded) until ``predicate(self)`` holds; checked after every change."""
        async with asyncio.timeout(timeout):
            while not predicate(self):
                await self._changed.wait()

    # -- counters ----------------------------------------------------------------------

    def requests_for(self, method: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method]

    @property
    def compact_requests(self) -> list[RecordedRequest]:
        return self.requests_for(p.COMPACT)

    @property
    def start_turn_requests(self) -> list[RecordedRequest]:
        return self.requests_for(p.START_TURN)

    @property
    def followers(self) -> int:
        return sum(1 for c in self._clients if c.following)

    @property
    def clients(self) -> int:
        return len(self._clients)

    # -- faults ----------------------------------------------------------------------------

    def routed_for(self, method: str) -> list[RecordedRequest]:
        """Requests of ``method`` that reached the router, whether or not it routed them."""
        return [r for r in self.routed if r.method == method]

    def armed_faults(self, method: str) -> int:
        """Faults scripted for ``method`` that have not fired yet."""
        return len(self._faults.get(method, []))

    def _next_fault(self, method: str) -> _Fault:
        queue = self._faults.get(method)
        return queue.pop(0) if queue else _Fault()

    def fail_next(self, method: str, error: str, *, deliver: bool | None = None) -> None:
        """Answer the next ``method`` request with router error ``error``. By default the owner
        still acts for ``client-disconnected`` and ``request-timeout`` (outcome unknown) and
        does not for the others (not delivered)."""
        if deliver is None:
            deliver = error in ("client-disconnected", "request-timeout")
        self._faults.setdefault(method, []).append(_Fault(error=error, deliver=deliver))

    def delay_next(self, method: str, seconds: float) -> None:
        """The owner acts at once but answers ``seconds`` later (the router may time out first)."""
        self._faults.setdefault(method, []).append(_Fault(delay_s=seconds))

    def silence_next(self, method: str) -> None:
        """The owner acts but no reply ever comes (not even the router's timeout)."""
        self._faults.setdefault(method, []).append(_Fault(silent=True))

    def drop_connection_on(self, method: str, *, deliver: bool = False) -> None:
        """Close the requester's connection when the next ``method`` request arrives."""
        self._faults.setdefault(method, []).append(_Fault(drop_connection=True, deliver=deliver))

    def reply_next(self, method: str, result: Any) -> None:
        """Answer the next ``method`` request with this result (e.g. a bad acknowledgement)."""
        self._faults.setdefault(method, []).append(_Fault(result=result))

    def send_garbage(self, kind: str) -> None:
        """Send a broken frame (a key of :data:`GARBAGE`) to every connected client."""
        for client in list(self._clients):
            self._send(client, GARBAGE[kind])

    async def disconnect_all(self) -> None:
        for client in list(self._clients):
            await self._close_client(client)

    def drop_updates(self, count: int = 1) -> None:
        """Apply the next ``count`` changes without sending them: a revision gap."""
        self._drop_updates += count

    def ignore_follows(self, count: int = 1) -> None:
        """Register the next ``count`` follows without sending a snapshot."""
        self._ignore_follows += count

    def send_inapplicable_patch(self) -> None:
        """A patch for the current revision that does not fit the state."""
        self._to_followers(self._state_frame({"type": "patches", "baseRevision": self.revision,
                                              "revision": self.revision + 1,
                                              "patches": [{"op": "replace", "path": ["noSuchField"], "value": 1}]}))

    def broadcast_foreign_state(self, source: str | None = None) -> None:
        """A state broadcast for this thread from a client that is not the owner."""
        frame = self._state_frame({"type": "snapshot", "revision": self.revision + 100,
                                   "conversationState": {"bogus": True}}, source or f"client-{uuid.uuid4()}")
        for client in list(self._clients):
            self._send(client, frame)

    def send_foreign_batch(self, source: str | None = None) -> None:
        """A patch batch for this thread from another client, made for the owner's current
        revision: it would start a new user turn if a follower applied it."""
        turn = {"turnId": f"foreign-{uuid.uuid4()}", "turnStartedAtMs": 1 << 50, "status": "inProgress",
                "params": {"input": [{"type": "text", "text": "typed in another window"}]}, "items": []}
        change = {"type": "patches", "baseRevision": self.revision, "revision": self.revision + 1, "patches": [
            {"op": "add", "path": ["turns", "-"], "value": turn},
            {"op": "replace", "path": ["threadRuntimeStatus"], "value": {"type": "active", "activeFlags": []}}]}
        frame = self._state_frame(change, source or self.foreign_client_id)
        for client in list(self._clients):
            self._send(client, frame)
        self.foreign_batches_sent += 1
        self._notify()

    def move_owner(self) -> str:
        """The thread moves to another window: a new owner id that knows no followers and asks
        every client who follows (``thread-stream-following-status-requested``)."""
        self.owner_id = f"owner-{uuid.uuid4()}"
        for client in self._clients:
            client.following = False
        frame = encode_message(p.broadcast(p.FOLLOWING_STATUS_REQUESTED, self.owner_id,
                                           self.request_versions[p.FOLLOWING_STATUS_REQUESTED],
                                           {"hostId": p.HOST_ID, "conversationId": self.thread_id}))
        for client in list(self._clients):
            self._send(client, frame)
        self._notify()
        return self.owner_id

    def probe_clients(self) -> None:
        """Send every client a ``client-discovery-request`` and a request it cannot handle."""
        for client in list(self._clients):
            request = {"type": "request", "requestId": str(uuid.uuid4()), "sourceClientId": self.owner_id,
                       "version": 1, "method": "ide-context", "params": {}}
            self._send(client, {"type": "client-discovery-request", "requestId": str(uuid.uuid4()),
                                "request": request})
            self._send(client, request)
