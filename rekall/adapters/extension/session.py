"""ThreadSession: one follower connection to the owner of one thread.

The session moves bytes, runs timers and reconnects; the protocol's decisions are the
:class:`~rekall.adapters.extension.follower.Follower`'s (sans I/O): the session feeds it each
message and does what it says (send, resolve a request, emit events, finish or fail the
connect, ask discovery, give the connection up). It runs the handshake
(:mod:`rekall.adapters.extension.handshake`) and sends the two commands rekall needs.

Rules it keeps:

* Never retry. A request is sent at most once; a failure says whether it was delivered.
* Our own request timeout agrees with the ``timeoutMs`` we send: we send
  ``request_timeout_s * 1000`` and wait :data:`RESPONSE_MARGIN_S` longer, so that the
  router's own ``request-timeout`` (which is more informative) normally arrives first.
* ``ConnectionLost`` is emitted exactly once per connection that dies (not when we close it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from rekall.kernel import events as ev
from rekall.adapters.extension import generations as gen
from rekall.adapters.extension import ipc, messages
from rekall.adapters.extension.ipc import IpcAdapter
from rekall.adapters.extension.errors import (
    RESPONSE_MARGIN_S,
    ConnectionLostError,
    HandshakeFailed,
    RequestFailed,
    SessionClosed,
    lost_while_sending,
    lost_while_waiting,
    not_answered,
)
from rekall.adapters.extension.choice import GENERATION_VAR, pinned
from rekall.adapters.extension.first_follow import FirstFollow
from rekall.adapters.extension.follower import (
    MAX_RESYNCS_PER_CONNECTION,
    Action,
    Connected,
    ConnectFailed,
    Emit,
    Follower,
    Rediscover,
    Resolve,
    Send,
)
from rekall.adapters.extension.handshake import handshake
from rekall.kernel.errors import InvalidInput, IpcError
from rekall.kernel.ids import thread_id as validate_thread_id
from rekall.thread.mirror import ThreadMirror
from rekall.transports import (
    Endpoint,
    MessageChannel,
    PeerUidLookup,
    Transport,
    TransportError,
    peer_uid,
    resolve_endpoint,
    transport_for,
)

log = logging.getLogger("rekall.adapters")

StartedTurn = messages.StartedTurn
Tap = Callable[[str, Any], None]
T = TypeVar("T")

_CLOSED = object()


class _Link:
    """One connection: its channel, reader task and in-flight requests."""

    def __init__(self, channel: MessageChannel) -> None:
        self.channel = channel
        self.pending: dict[str, tuple[str, asyncio.Future[Any]]] = {}
        self.reader: asyncio.Task[None] | None = None
        self.closing = False  # closed by us: no ConnectionLost event
        self.dead = False
        self.death_detail: str | None = None
        self.resyncs = 0


class ThreadSession:
    """Follow one thread through its owner. Create it with :func:`connect_thread`."""

    def __init__(
        self,
        thread_id: str,
        *,
        endpoint: Endpoint,
        transport: Transport | None = None,
        env: Mapping[str, str] | None = None,
        explicit_endpoint: bool = True,
        client_type: str = "codex-rekall",
        request_timeout_s: float = 10.0,
        snapshot_timeout_s: float = 12.0,
        owner_answer_s: float | None = None,
        peer_uid_lookup: PeerUidLookup = peer_uid,
        adapter: IpcAdapter | None = None,
        candidates: Sequence[IpcAdapter] | None = None,
        max_resyncs: int = MAX_RESYNCS_PER_CONNECTION,
        tap: Tap | None = None,
    ) -> None:
        if request_timeout_s <= 0 or snapshot_timeout_s <= 0:
            raise InvalidInput("timeouts must be positive", field="request_timeout_s")
        self.thread_id = thread_id
        self.endpoint = endpoint
        self._transport = transport
        self._env = env
        self._explicit_endpoint = explicit_endpoint
        self._peer_uid_lookup = peer_uid_lookup
        #: The protocol's decisions and the thread model (sans I/O); the session moves bytes.
        self.follower = Follower(thread_id, adapter, candidates or ipc.ADAPTERS, max_resyncs=max_resyncs)
        #: Whether the generation was found on this connect or reused (set by the platform).
        self.generation_settled = "found anew"
        self.client_type = client_type
        self.request_timeout_s = request_timeout_s
        self.snapshot_timeout_s = snapshot_timeout_s
        #: How long to wait for any client to answer our follow after owner discovery answered
        #: no-client-found (``None``: the snapshot timeout). Only an owner answers, so silence is how
        #: the router's clients say "none".
        self.owner_answer_s = owner_answer_s
        self.tap = tap

        self._events: asyncio.Queue[Any] = asyncio.Queue()
        #: When the fact of the event :meth:`next_event` returned last was known
        #: (``time.monotonic()``): when the frame that showed it arrived, for a fact of the
        #: thread's state; when it was made, for others. The worker's debounces count from it.
        self.last_event_at: float | None = None
        self._link: _Link | None = None
        self._closed = False
        self._snapshot_waiter: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- public surface ----------------------------------------------------------------

    @property
    def generation(self) -> str:
        """The name of the protocol generation in use, e.g. ``"26.9xx"``."""
        return self.follower.adapter.NAME

    @property
    def adapter(self) -> IpcAdapter:
        """The adapter that speaks it."""
        return self.follower.adapter

    @property
    def decided(self) -> bool:
        return self.follower.decided

    @property
    def mirror(self) -> ThreadMirror:
        return self.follower.mirror

    @property
    def owner_id(self) -> str | None:
        return self.follower.owner_id

    @property
    def client_id(self) -> str | None:
        return self.follower.client_id

    @property
    def generation_reason(self) -> str:
        """Why this generation is spoken (shown by probe and doctor)."""
        return self.follower.generation_reason

    @generation_reason.setter
    def generation_reason(self, reason: str) -> None:
        self.follower.generation_reason = reason

    @property
    def resync_count(self) -> int:
        return self.follower.resync_count

    @property
    def connected(self) -> bool:
        return self._link is not None and not self._link.dead

    async def next_event(self) -> ev.DomainEvent:
        """The next domain event. Raises :class:`SessionClosed` once the session is closed."""
        item = await self._events.get()
        if item is _CLOSED:
            self._events.put_nowait(_CLOSED)  # for any other reader
            raise SessionClosed("the IPC session is closed", hint="connect again")
        event, self.last_event_at = item
        return event

    async def events(self) -> AsyncIterator[ev.DomainEvent]:
        """Domain events until the session is closed (it survives reconnects)."""
        while True:
            try:
                yield await self.next_event()
            except SessionClosed:
                return

    def compact(self) -> Awaitable[None]:
        """Ask the owner to compact the thread (sent as :meth:`_request` says); await the answer.
        Success means ``result.ok is True``."""
        adapter = self.adapter
        return _read(self._request(adapter.COMPACT, adapter.compact_params(self.thread_id)), adapter.check_compact_ack)

    def start_turn(self, text: str, client_user_message_id: str) -> Awaitable[Any]:
        """Start one turn with ``text`` as its only input (sent as :meth:`_request` says); await
        ``StartedTurn(turn_id, status)``."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("continuation text must be a non-empty string", field="text")
        if not isinstance(client_user_message_id, str) or not client_user_message_id:
            raise InvalidInput("client_user_message_id must be a non-empty string (the job id)",
                               field="client_user_message_id")
        adapter = self.adapter
        return _read(self._request(adapter.START_TURN,
                                   adapter.start_turn_params(self.thread_id, text, client_user_message_id)),
                     adapter.started_turn_from)

    async def reconnect(self) -> None:
        """New connection, handshake, owner rediscovery and a fresh snapshot.

        Events for facts that differ from before (a compaction completed meanwhile, say)
        are emitted. Raises an :class:`IpcError` on failure; the caller decides on backoff.
        """
        if self._closed:
            raise SessionClosed("the IPC session is closed", hint="connect again")
        if self._link is not None:
            await self._close_link(self._link)
        if not self._explicit_endpoint:  # resolve afresh: the extension may have restarted
            self.endpoint = resolve_endpoint(self._env)
            self._transport = None
        await self._open(emit=True)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._link is not None:
            await self._close_link(self._link)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._events.put_nowait(_CLOSED)

    async def __aenter__(self) -> ThreadSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- connecting --------------------------------------------------------------------

    async def _open(self, *, emit: bool, first_follow: FirstFollow | None = None) -> None:
        """Connect, handshake, follow, and wait for the first snapshot; with ``first_follow``, go on
        from the connection, handshake and follow the worker made before its event loop."""
        if first_follow is None:
            transport = self._transport or transport_for(self.endpoint, peer_uid_lookup=self._peer_uid_lookup)
            stream = await transport.connect()
            backlog: Sequence[tuple[Any, float]] = ()
        else:
            stream, backlog = await first_follow.adopt(), first_follow.backlog
            self.follower.handshaken(first_follow.handshaken, time.monotonic())
        self.endpoint = self.endpoint._replace(peer_check=stream.peer_check)
        link = _Link(MessageChannel(stream))
        self._link = link
        self.follower.connection_opened()
        link.reader = asyncio.create_task(self._read_loop(link, backlog), name=f"rekall-ipc-reader-{self.thread_id}")
        try:
            if first_follow is None:
                await self._handshake(link)
            await self._follow_and_wait(link, emit=emit, followed=first_follow is not None)
        except BaseException:
            await self._close_link(link)
            raise

    async def _handshake(self, link: _Link) -> None:
        follower = self.follower
        follower.handshaking()
        steps = handshake(self.thread_id, self.client_type, None if follower.candidates else follower.adapter,
                          follower.candidates)
        try:
            ask = next(steps)
            while True:
                response = await self._exchange(link, ask.method, ask.params, targeted=False, adapter=ask.adapter,
                                                source=ask.source)
                ask = steps.send(response)
        except StopIteration as done:
            follower.handshaken(done.value, time.monotonic())
        except RequestFailed as exc:  # a timeout or a dropped connection during the handshake
            raise HandshakeFailed.because(exc) from exc

    async def _follow_and_wait(self, link: _Link, *, emit: bool, followed: bool = False) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._snapshot_waiter = waiter
        self.follower.following(emit=emit)
        try:
            if not followed:
                await self._send(link, self.follower.follow_message())
            async with asyncio.timeout(wait_s := self._snapshot_wait_s()):
                await waiter
        except TimeoutError:
            raise self.follower.snapshot_missing(wait_s) from None
        except TransportError as exc:
            raise ConnectionLostError(f"connection lost before the first snapshot: {exc.message}",
                                      hint="reconnect") from exc
        finally:
            self.follower.stop_waiting()
            if self._snapshot_waiter is waiter:
                self._snapshot_waiter = None

    def _snapshot_wait_s(self) -> float:
        if self.owner_answer_s is not None and self.follower.owner_unanswered:
            return self.owner_answer_s
        return self.snapshot_timeout_s

    # -- requests ----------------------------------------------------------------------

    async def _send(self, link: _Link, message: dict[str, Any]) -> None:
        if self.tap is not None:
            self.tap("send", message)
        await link.channel.send(message)

    async def _exchange(self, link: _Link, method: str, params: dict[str, Any], *, targeted: bool,
                        adapter: IpcAdapter | None = None, source: str | None = None) -> Any:
        """Send one request and wait for its response (success or not); in ``adapter``'s envelope
        from ``source`` when given (the handshake), else in the session's."""
        return await self._exchange_now(link, method, params, targeted=targeted, adapter=adapter, source=source)

    def _exchange_now(self, link: _Link, method: str, params: dict[str, Any], *, targeted: bool,
                      adapter: IpcAdapter | None = None, source: str | None = None) -> Awaitable[Any]:
        """:meth:`_exchange`, with the request written before this returns when the link takes it
        at once (a caller's synchronous step puts it on the wire, with no task switch before its
        bytes leave); otherwise it is written when the wait for the response is awaited."""
        if link.dead or link.closing:
            raise RequestFailed(f"{method}: not sent, the IPC connection is closed", code="connection_lost",
                                delivery="not_delivered", method=method, hint="reconnect, then decide again")
        request_id = str(uuid.uuid4())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        link.pending[request_id] = (method, future)
        adapter = adapter or self.adapter
        message = adapter.request(
            method, params, request_id=request_id, source=source or self.client_id or adapter.INITIAL_CLIENT_ID,
            timeout_ms=int(self.request_timeout_s * 1000), target=self.owner_id if targeted else None)
        if self.tap is not None:
            self.tap("send", message)
        try:
            sent = link.channel.send_now(message)
        except TransportError as exc:
            link.pending.pop(request_id, None)
            raise lost_while_sending(method, exc.message) from exc
        return self._response(link, method, request_id, future, None if sent else message)

    async def _response(self, link: _Link, method: str, request_id: str, future: asyncio.Future[Any],
                        unsent: dict[str, Any] | None) -> Any:
        try:
            if unsent is not None:
                try:
                    await link.channel.send(unsent)
                except TransportError as exc:
                    raise lost_while_sending(method, exc.message) from exc
            try:
                async with asyncio.timeout(self.request_timeout_s + RESPONSE_MARGIN_S):
                    return await future
            except TimeoutError:
                raise not_answered(method, self.request_timeout_s + RESPONSE_MARGIN_S) from None
        finally:
            link.pending.pop(request_id, None)

    def _request(self, method: str, params: dict[str, Any]) -> Awaitable[Any]:
        """Send a request to the thread's owner, written before this returns when the link takes it
        at once (:meth:`_exchange_now`), and return the wait for its successful response. A request
        that provably was not sent raises here."""
        link = self._link
        if link is None or self._closed:
            raise RequestFailed(f"{method}: not sent, no IPC connection", code="connection_lost",
                                delivery="not_delivered", method=method, hint="reconnect, then decide again")
        return self._succeeded(method, self._exchange_now(link, method, params, targeted=True))

    async def _succeeded(self, method: str, exchange: Awaitable[Any]) -> Any:
        response = await exchange
        if not response.ok:
            raise self.follower.refused(method, response, time.monotonic())
        return response

    # -- receiving ---------------------------------------------------------------------

    async def _read_loop(self, link: _Link, backlog: Sequence[tuple[Any, float]] = ()) -> None:
        """Handle each message as it arrives; first ``backlog``, what arrived before the link
        existed (during the worker's first follow), with when each frame arrived."""
        detail = "the router closed the connection"
        try:
            async for message, received_at in _arriving(link.channel, backlog):
                if self.tap is not None:
                    self.tap("recv", message)
                await self._handle(link, message, received_at)
                if self.tap is not None:
                    self.tap("handled", message)
        except IpcError as exc:  # a transport failure or a malformed frame
            detail = exc.message
        except Exception as exc:  # a message we could not handle: say so, never die silently
            log.exception("IPC reader failed")
            detail = f"internal error while handling a message: {exc!r}"
        except asyncio.CancelledError:
            detail = "closed"
            raise
        finally:
            self._link_died(link, link.death_detail or detail)

    def _link_died(self, link: _Link, detail: str) -> None:
        if link.dead:
            return
        link.dead = True
        for method, future in link.pending.values():
            if not future.done():
                future.set_exception(lost_while_waiting(method, detail))
        waiter = self._snapshot_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionLostError(f"connection lost before the first snapshot: {detail}",
                                                     hint="reconnect"))
        if not link.closing:
            self._emit(ev.ConnectionLost(detail))
        # Close the stream too, without awaiting here (we may be inside the reader).
        task = asyncio.ensure_future(link.channel.aclose())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close_link(self, link: _Link) -> None:
        link.closing = True
        await link.channel.aclose()
        if link.reader is not None and link.reader is not asyncio.current_task():
            link.reader.cancel()
            await asyncio.gather(link.reader, return_exceptions=True)
        self._link_died(link, "closed by rekall")
        if self._link is link:
            self._link = None

    async def _kill_link(self, link: _Link, detail: str) -> None:
        """Give up on a connection that cannot be trusted any more; emits ConnectionLost."""
        link.death_detail = detail
        log.warning("closing IPC connection: %s", detail)
        await link.channel.aclose()

    def _emit(self, event: ev.DomainEvent, known_at: float | None = None) -> None:
        if not self._closed:
            self._events.put_nowait((event, time.monotonic() if known_at is None else known_at))

    def _emit_all(self, events: Sequence[ev.DomainEvent], known_at: float | None = None) -> None:
        for event in events:
            self._emit(event, known_at)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, link: _Link, message: Any, received_at: float | None = None) -> None:
        """Do what the follower says one message calls for."""
        for action in self.follower.receive(message):
            await self._do(link, action, received_at)

    async def _do(self, link: _Link, action: Action, received_at: float | None) -> None:
        if isinstance(action, Send):
            await self._send_quietly(link, action.message)
        elif isinstance(action, Resolve):
            _method, future = link.pending.get(action.response.request_id, ("", None))
            if future is not None and not future.done():
                future.set_result(action.response)
        elif isinstance(action, Emit):
            self._emit_all(action.events, received_at if action.at_arrival else None)
        elif isinstance(action, Connected | ConnectFailed):
            waiter = self._snapshot_waiter
            if waiter is not None and not waiter.done():
                if isinstance(action, Connected):
                    waiter.set_result(None)
                else:
                    waiter.set_exception(action.error)
        elif isinstance(action, Rediscover):
            self._spawn(self._rediscover(link, action.why))
        else:  # GiveUp
            await self._kill_link(link, action.detail)

    async def _send_quietly(self, link: _Link, message: dict[str, Any]) -> None:
        try:
            await self._send(link, message)
        except TransportError:
            pass  # the reader notices the broken connection and reports it once

    async def _rediscover(self, link: _Link, why: str) -> None:
        adapter = self.adapter
        response = None
        try:
            response = await self._exchange(link, adapter.OWNER_DISCOVERY,
                                            adapter.owner_discovery_params(self.thread_id), targeted=False)
        except IpcError as exc:
            log.warning("owner rediscovery failed (%s): %s", why, exc.message)
        for action in self.follower.rediscovered(None if link.dead else response, why):
            await self._do(link, action, None)


async def connect_thread(
    thread_id: str,
    *,
    endpoint: Endpoint | None = None,
    env: Mapping[str, str] | None = None,
    client_type: str = "codex-rekall",
    request_timeout_s: float = 10.0,
    snapshot_timeout_s: float = 12.0,
    owner_answer_s: float | None = None,
    transport: Transport | None = None,
    peer_uid_lookup: PeerUidLookup = peer_uid,
    max_resyncs: int = MAX_RESYNCS_PER_CONNECTION,
    tap: Tap | None = None,
    adapter: str | IpcAdapter | None = None,
    candidates: Sequence[IpcAdapter] | None = None,
    first_follow: FirstFollow | None = None,
) -> ThreadSession:
    """Connect to the owner of ``thread_id``, follow it and wait for its first snapshot.

    The endpoint is resolved from ``env`` (default ``os.environ``) unless given. The first
    snapshot's facts are readable from ``session.mirror`` on return; no events are emitted
    for them (they are the caller's baseline). ``tap(direction, message)`` sees every
    message sent (``"send"``) and received (``"recv"``, then ``"handled"`` once processed);
    ``adapter`` is the generation to speak (an adapter or its name); without it and without
    ``candidates``, ``REKALL_GENERATION`` in ``env`` when set; otherwise the owner's answer to
    discovery chooses among ``candidates`` (default: every known generation).
    ``first_follow``: the worker's first follow of this thread (:mod:`rekall.adapters.extension.first_follow`), made with
    the same ``adapter`` and ``candidates``: the session goes on from its connection.
    """
    thread_id = validate_thread_id(thread_id)
    pin_reason = None
    if isinstance(adapter, str):
        named = ipc.adapter_named(adapter)
        if named is None:
            raise InvalidInput(f"no protocol generation named {adapter!r}", field="adapter",
                               hint=f"known: {gen.listed(a.NAME for a in ipc.ADAPTERS)}")
        adapter = named
    elif adapter is None and candidates is None and first_follow is None:
        adapter = pinned(os.environ if env is None else env)  # REKALL_GENERATION, as at every door
        pin_reason = f"pinned by {GENERATION_VAR}" if adapter is not None else None
    explicit = endpoint is not None or transport is not None
    if first_follow is not None:
        endpoint = first_follow.endpoint
    elif endpoint is None:
        endpoint = resolve_endpoint(env) if transport is None else Endpoint("test", "custom transport")
    session = ThreadSession(
        thread_id, endpoint=endpoint, transport=transport, env=env, explicit_endpoint=explicit,
        client_type=client_type, request_timeout_s=request_timeout_s, snapshot_timeout_s=snapshot_timeout_s,
        owner_answer_s=owner_answer_s, peer_uid_lookup=peer_uid_lookup, adapter=adapter, candidates=candidates,
        max_resyncs=max_resyncs, tap=tap)
    if pin_reason is not None:
        session.generation_reason = pin_reason
    await session._open(emit=False, first_follow=first_follow)
    return session


async def _arriving(channel: MessageChannel,
                    backlog: Sequence[tuple[Any, float]]) -> AsyncIterator[tuple[Any, float | None]]:
    """``backlog``, then each message ``channel`` receives until the peer closes, each with when
    its frame arrived."""
    for item in backlog:
        yield item
    while (message := await channel.receive()) is not None:
        yield message, channel.received_at


async def _read(response: Awaitable[Any], read: Callable[[Any], T]) -> T:
    """What ``read`` makes of a response, once it has come."""
    return read(await response)
