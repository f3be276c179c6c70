"""ThreadSession: one follower connection to the owner of one thread.

The session does the I/O for a protocol adapter (:mod:`rekall.adapters.extension.ipc`, one per
generation; when the caller has not chosen one, the owner's answer to discovery does): it
connects, runs the handshake (``initialize``, owner discovery, follow), keeps the
:class:`~rekall.thread.mirror.ThreadMirror` up to date from the owner's broadcasts,
turns fact changes into domain events, and sends the two commands rekall needs.

Rules it keeps:

* Never retry. A request is sent at most once; a failure says whether it was delivered.
* Our own request timeout agrees with the ``timeoutMs`` we send: we send
  ``request_timeout_s * 1000`` and wait :data:`RESPONSE_MARGIN_S` longer, so that the
  router's own ``request-timeout`` (which is more informative) normally arrives first.
* State broadcasts count only from the owner, for this thread, at the adapter's version.
  Other versions are counted and reported (``ProtocolChanged``); during the handshake
  they fail the connect at once with ``version_mismatch`` instead of a snapshot timeout.
* A revision gap or an inapplicable patch asks the owner for a fresh snapshot (a
  re-follow): bounded per connection (:data:`MAX_RESYNCS_PER_CONNECTION`), counted in
  :attr:`ThreadSession.resync_count`, reported with ``Resynced``. Patches that arrive
  while we wait for that snapshot are dropped, not answered with more re-follows.
* If the owner asks for followers from another client id (the thread moved to another
  window), or another client broadcasts this thread's state, the session rediscovers the
  owner and follows the new one. It never guesses: the router names the owner. In a
  generation without owner discovery (26.721) the owner is the client that answers our
  follow with the thread's snapshot, or that asks for this thread's followers.
* ``ConnectionLost`` is emitted exactly once per connection that dies (not when we close it).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from rekall import events as ev
from rekall.adapters.extension import messages, registry
from rekall.adapters.extension.contract import Adapter
from rekall.adapters.extension.errors import (
    RESPONSE_MARGIN_S,
    ConnectionLostError,
    HandshakeFailed,
    NoOwner,
    RequestFailed,
    SessionClosed,
    SnapshotTimeout,
    VersionMismatch,
    lost_while_sending,
    lost_while_waiting,
    not_answered,
)
from rekall.adapters.extension.early import EarlyFollow
from rekall.adapters.extension.handshake import Handshaken, handshake
from rekall.errors import InvalidInput, IpcError
from rekall.ids import thread_id as validate_thread_id
from rekall.thread.mirror import RevisionGap, ThreadMirror
from rekall.thread.patches import PatchError
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

MAX_RESYNCS_PER_CONNECTION = 5
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
        adapter: Adapter | None = None,
        candidates: Sequence[Adapter] | None = None,
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
        #: Undecided (no ``adapter``): the owner's answer to discovery chooses among these.
        self._candidates: tuple[Adapter, ...] = () if adapter is not None else tuple(candidates or registry.ADAPTERS)
        self._adapter: Adapter = adapter if adapter is not None else self._candidates[0]
        #: Why this generation is spoken (shown by probe and doctor).
        self.generation_reason = "chosen by the caller" if adapter is not None else "not decided yet"
        #: Whether the generation was found on this connect or reused (set by the platform).
        self.generation_settled = "found anew"
        self._owner_unanswered = False  # discovery said no-client-found; following must find the owner
        self.client_type = client_type
        self.request_timeout_s = request_timeout_s
        self.snapshot_timeout_s = snapshot_timeout_s
        #: How long to wait for any client to answer our follow after owner discovery answered
        #: no-client-found (``None``: the snapshot timeout). Only an owner answers, so silence is how
        #: the router's clients say "none".
        self.owner_answer_s = owner_answer_s
        self.max_resyncs = max_resyncs
        self.tap = tap

        self.client_id: str | None = None
        self.owner_id: str | None = None
        #: When owner discovery last named the owner (monotonic s): a no-client-found soon after
        #: cannot mean that nobody owns the thread.
        self._discovered_at: float | None = None
        self.mirror = ThreadMirror(self._adapter.LAYOUT)
        self.observed_versions: dict[str, set[Any]] = {}
        self.unknown_versions: dict[str, int] = {}
        self.resync_count = 0
        self.owner_changes = 0
        self.foreign_broadcasts = 0
        self.dropped_patches = 0
        self.ignored_messages = 0

        self._events: asyncio.Queue[Any] = asyncio.Queue()
        #: When the fact of the event :meth:`next_event` returned last was known
        #: (``time.monotonic()``): when the frame that showed it arrived, for a fact of the
        #: thread's state; when it was made, for others. The worker's debounces count from it.
        self.last_event_at: float | None = None
        self._link: _Link | None = None
        self._closed = False
        self._snapshot_waiter: asyncio.Future[None] | None = None
        self._emit_first_snapshot = False
        self._awaiting_snapshot = False
        self._resync_reason: str | None = None
        self._rediscovering = False
        self._checked_sources: set[Any] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- public surface ----------------------------------------------------------------

    @property
    def adapter(self) -> str:
        """The protocol generation in use, e.g. ``"26.9xx"``."""
        return self._adapter.NAME

    @property
    def protocol(self) -> Adapter:
        return self._adapter

    @property
    def decided(self) -> bool:
        return not self._candidates

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
        adapter = self._adapter
        return _read(self._request(adapter.COMPACT, adapter.compact_params(self.thread_id)), adapter.check_compact_ack)

    def start_turn(self, text: str, client_user_message_id: str) -> Awaitable[Any]:
        """Start one turn with ``text`` as its only input (sent as :meth:`_request` says); await
        ``StartedTurn(turn_id, status)``."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("continuation text must be a non-empty string", field="text")
        if not isinstance(client_user_message_id, str) or not client_user_message_id:
            raise InvalidInput("client_user_message_id must be a non-empty string (the job id)",
                               field="client_user_message_id")
        adapter = self._adapter
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

    async def _open(self, *, emit: bool, early: EarlyFollow | None = None) -> None:
        """Connect, handshake, follow, and wait for the first snapshot; with ``early``, go on
        from the connection, handshake and follow the worker made before its event loop."""
        if early is None:
            transport = self._transport or transport_for(self.endpoint, peer_uid_lookup=self._peer_uid_lookup)
            stream = await transport.connect()
            backlog: Sequence[tuple[Any, float]] = ()
        else:
            stream, backlog = await early.adopt(), early.backlog
            self._handshaken(early.handshaken)
        self.endpoint = self.endpoint._replace(peer_check=stream.peer_check)
        link = _Link(MessageChannel(stream))
        self._link = link
        link.reader = asyncio.create_task(self._read_loop(link, backlog), name=f"rekall-ipc-reader-{self.thread_id}")
        try:
            if early is None:
                await self._handshake(link)
            await self._follow_and_wait(link, emit=emit, followed=early is not None)
        except BaseException:
            await self._close_link(link)
            raise

    async def _handshake(self, link: _Link) -> None:
        self.client_id = None
        self.owner_id = None
        steps = handshake(self.thread_id, self.client_type, None if self._candidates else self._adapter,
                          self._candidates)
        try:
            ask = next(steps)
            while True:
                response = await self._exchange(link, ask.method, ask.params, targeted=False, adapter=ask.adapter,
                                                source=ask.source)
                ask = steps.send(response)
        except StopIteration as done:
            self._handshaken(done.value)
        except RequestFailed as exc:  # a timeout or a dropped connection during the handshake
            raise HandshakeFailed.because(exc) from exc

    def _handshaken(self, done: Handshaken) -> None:
        if done.decided_because is not None:
            self._decide(done.adapter, done.decided_because)
        if done.owner_unanswered:
            self._owner_unanswered = True
        self.client_id, self.owner_id = done.client_id, done.owner_id
        self._discovered_at = time.monotonic() if done.owner_id is not None and self._adapter.owner_discovery else None
        self._checked_sources = {self.owner_id} if self.owner_id is not None else set()

    def _decide(self, adapter: Adapter, reason: str) -> None:
        if adapter.LAYOUT != self.mirror.layout:
            self.mirror = ThreadMirror(adapter.LAYOUT)
        self._adapter, self._candidates, self.generation_reason = adapter, (), reason

    async def _follow_and_wait(self, link: _Link, *, emit: bool, followed: bool = False) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._snapshot_waiter = waiter
        self._emit_first_snapshot = emit
        self._awaiting_snapshot = True
        self._resync_reason = None
        try:
            if not followed:
                await self._send(link, self._follow_message())
            async with asyncio.timeout(self._snapshot_wait_s()):
                await waiter
        except TimeoutError:
            if self.owner_id is None and not self._adapter.owner_discovery:
                asked = "owner discovery answered no-client-found and " if self._owner_unanswered else ""
                raise NoOwner(f"no client owns thread {self.thread_id}: {asked}no client answered following within "
                              f"{self._snapshot_wait_s():g} s (in generation {self._adapter.NAME}, which has no owner "
                              "discovery, the owner answers following)",
                              hint="open the thread in a VS Code window with the Codex extension; "
                                   "never guess an owner") from None
            raise SnapshotTimeout(self._snapshot_timeout_text(),
                                  hint="the owner did not send the thread's state; check that the thread is open "
                                  "in VS Code and the extension is up to date") from None
        except TransportError as exc:
            raise ConnectionLostError(f"connection lost before the first snapshot: {exc.message}",
                                      hint="reconnect") from exc
        finally:
            if self._snapshot_waiter is waiter:
                self._snapshot_waiter = None

    def _snapshot_wait_s(self) -> float:
        if self.owner_id is None and self._owner_unanswered and self.owner_answer_s is not None:
            return self.owner_answer_s
        return self.snapshot_timeout_s

    def _snapshot_timeout_text(self) -> str:
        text = f"no snapshot of thread {self.thread_id} from owner {self.owner_id} within {self.snapshot_timeout_s:g} s"
        seen = self.observed_versions.get(self._adapter.STATE_CHANGED)
        if self.unknown_versions:
            text += "; " + "; ".join(self.unknown_versions)
        elif seen:
            text += f"; state versions seen: {sorted(seen, key=repr)}"
        else:
            text += "; no state broadcast was seen at all"
        return text

    def _follow_message(self) -> dict[str, Any]:
        assert self.client_id is not None and (self.owner_id is not None or not self._adapter.owner_discovery)
        return self._adapter.follow_broadcast(self.thread_id, source=self.client_id, owner=self.owner_id)

    # -- requests ----------------------------------------------------------------------

    async def _send(self, link: _Link, message: dict[str, Any]) -> None:
        if self.tap is not None:
            self.tap("send", message)
        await link.channel.send(message)

    async def _exchange(self, link: _Link, method: str, params: dict[str, Any], *, targeted: bool,
                        adapter: Adapter | None = None, source: str | None = None) -> Any:
        """Send one request and wait for its response (success or not); in ``adapter``'s envelope
        from ``source`` when given (the handshake), else in the session's."""
        return await self._exchange_now(link, method, params, targeted=targeted, adapter=adapter, source=source)

    def _exchange_now(self, link: _Link, method: str, params: dict[str, Any], *, targeted: bool,
                      adapter: Adapter | None = None, source: str | None = None) -> Awaitable[Any]:
        """:meth:`_exchange`, with the request written before this returns when the link takes it
        at once (a caller's synchronous step puts it on the wire, with no task switch before its
        bytes leave); otherwise it is written when the wait for the response is awaited."""
        if link.dead or link.closing:
            raise RequestFailed(f"{method}: not sent, the IPC connection is closed", code="connection_lost",
                                delivery="not_delivered", method=method, hint="reconnect, then decide again")
        request_id = str(uuid.uuid4())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        link.pending[request_id] = (method, future)
        adapter = adapter or self._adapter
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
            delivery = self._adapter.delivery_of(response.error)
            version_doubt = self._version_doubt(method, response.error)
            if version_doubt is not None:
                raise RequestFailed(f"{method} failed: {response.error}; {version_doubt}; run `rekall protocol` "
                                    "to compare the extension's table with rekall's", code=response.error,
                                    delivery=delivery, method=method,
                                    hint="the owner did not act on it; run `rekall protocol` to compare the "
                                         "extension's table with rekall's before scheduling again")
            hint = ("the owner did not act on it; it is safe to schedule again" if delivery == "not_delivered"
                    else "the owner may have acted on it; check the thread before scheduling again")
            raise RequestFailed(f"{method} failed: {response.error}", code=response.error, delivery=delivery,
                                method=method, hint=hint)
        return response

    def _version_doubt(self, method: str, error: str) -> str | None:
        """What a refusal says about versions: a mismatch, or (routed by discovery, or refused
        although discovery has just named the owner) possibly one."""
        generation = self._adapter.generation
        targeted = generation.follower_envelope_host_id
        discovered = error == "no-client-found" and self._discovered_at is not None
        if error == "request-version-mismatch" or (error == "no-client-found" and not targeted) or discovered:
            sent = self._adapter.METHOD_VERSIONS.get(method)
            base = generation.base(method)
            how = (f"sent at version {sent} (base {base} + 1 for the envelope hostId)" if targeted and base != sent
                   else f"sent at version {sent} (the base version)")
            if error == "request-version-mismatch":
                what = "the extension expects another version"
            elif discovered:
                assert self._discovered_at is not None
                what = (f"owner {self.owner_id} answered owner discovery for this thread "
                        f"{time.monotonic() - self._discovered_at:.1f} s before, so the likely cause is a version "
                        "of this request that the owner does not handle")
            else:
                what = "either no client owns the thread now or the extension expects another version"
            return f"{method} {how}, generation {self._adapter.NAME}: {what}"
        return None

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

    def _emit_all(self, events: list[ev.DomainEvent], known_at: float | None = None) -> None:
        for event in events:
            self._emit(event, known_at)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, link: _Link, message: Any, received_at: float | None = None) -> None:
        adapter = self._adapter
        if isinstance(message, dict) and message.get("type") in ("broadcast", "request"):
            method = message.get("method")
            version = message.get("version")
            if isinstance(method, str):
                self.observed_versions.setdefault(method, set()).add(
                    version if isinstance(version, (int, str, type(None))) else repr(version))
        inbound = adapter.classify(message, thread_id=self.thread_id, owner_id=self.owner_id)
        if isinstance(inbound, adapter.Response):
            _method, future = link.pending.get(inbound.request_id, ("", None))
            if future is not None and not future.done():
                future.set_result(inbound)
        elif isinstance(inbound, adapter.Reply):
            await self._send_quietly(link, inbound.message)
        elif isinstance(inbound, adapter.StateChange):
            await self._on_state_change(link, inbound.change, received_at)
        elif isinstance(inbound, adapter.UnknownVersion):
            self._on_unknown_version(inbound)
        elif isinstance(inbound, adapter.FollowStatusRequested):
            if inbound.source == self.owner_id:
                await self._send_quietly(link, self._follow_message())
            elif not adapter.owner_discovery and isinstance(inbound.source, str):
                # Without owner discovery, the client asking for this thread's followers owns it.
                await self._adopt_owner(link, inbound.source, "another client asked for followers")
            else:
                self._maybe_rediscover(link, inbound.source, "another client asked for followers")
        elif isinstance(inbound, adapter.ForeignState):
            if self._answers_our_follow(inbound):
                self.owner_id = inbound.source
                self._checked_sources = {inbound.source}
                if self._owner_unanswered:
                    self.generation_reason += f"; client {inbound.source} answered following"
                log.info("thread %s: owner %s answered following", self.thread_id, inbound.source)
                await self._on_state_change(link, inbound.change, received_at)
                return
            self.foreign_broadcasts += 1
            if adapter.owner_discovery:
                self._maybe_rediscover(link, inbound.source, "another client broadcast this thread's state")
        else:
            self.ignored_messages += 1

    def _answers_our_follow(self, inbound: Any) -> bool:
        """A snapshot of our thread while we follow without knowing the owner (no discovery)."""
        change = inbound.change
        return (self.owner_id is None and not self._adapter.owner_discovery and self._awaiting_snapshot
                and isinstance(inbound.source, str) and isinstance(change, dict) and change.get("type") == "snapshot")

    async def _adopt_owner(self, link: _Link, owner: str, why: str) -> None:
        log.info("thread %s moved from owner %s to %s (%s)", self.thread_id, self.owner_id, owner, why)
        self.owner_id = owner
        self.owner_changes += 1
        self._checked_sources = {owner}
        await self._resync(link, f"the owner changed to {owner} ({why})")

    async def _send_quietly(self, link: _Link, message: dict[str, Any]) -> None:
        try:
            await self._send(link, message)
        except TransportError:
            pass  # the reader notices the broken connection and reports it once

    def _on_unknown_version(self, inbound: Any) -> None:
        text = self._adapter.protocol_changed_text(inbound.method, inbound.version)
        first = text not in self.unknown_versions
        self.unknown_versions[text] = self.unknown_versions.get(text, 0) + 1
        if first:
            log.warning("%s", text)
            self._emit(ev.ProtocolChanged(inbound.method, inbound.version, text))
        waiter = self._snapshot_waiter
        # Without owner discovery the owner is not known before its first answer: any answer counts.
        from_owner = inbound.from_owner or (self.owner_id is None and not self._adapter.owner_discovery)
        if from_owner and inbound.method == self._adapter.STATE_CHANGED and waiter and not waiter.done():
            waiter.set_exception(VersionMismatch(text, hint="see the message for which side to update; "
                                                            "`rekall protocol` compares the tables"))

    async def _on_state_change(self, link: _Link, change: Any, received_at: float | None = None) -> None:
        """Mirror one change; the facts it shows were known when its frame arrived (``received_at``)."""
        kind = change.get("type") if isinstance(change, dict) else None
        if kind == "snapshot":
            if "conversationState" not in change:
                await self._resync(link, "a snapshot without conversationState")
                return
            events = self.mirror.load_snapshot(change["conversationState"], change.get("revision"))
            self._awaiting_snapshot = False
            waiter = self._snapshot_waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
                if self._emit_first_snapshot:
                    self._emit_all(events, received_at)
                return
            if self._resync_reason is not None:
                self._emit(ev.Resynced(self._resync_reason, self.resync_count, self.mirror.revision))
                self._resync_reason = None
            self._emit_all(events, received_at)
        elif kind == "patches":
            if self._awaiting_snapshot:
                self.dropped_patches += 1
                return
            try:
                events = self.mirror.apply_patches(change.get("patches"), base_revision=change.get("baseRevision"),
                                                   revision=change.get("revision"))
            except (RevisionGap, PatchError) as exc:
                await self._resync(link, exc.message)
                return
            self._emit_all(events, received_at)
        else:
            await self._resync(link, f"a state change of unknown type {kind!r}")

    async def _resync(self, link: _Link, reason: str) -> None:
        link.resyncs += 1
        self.resync_count += 1
        if link.resyncs > self.max_resyncs:
            await self._kill_link(link, f"gave up after {self.max_resyncs} resyncs on one connection "
                                        f"(last: {reason})")
            return
        log.info("resync %d: %s", self.resync_count, reason)
        self._awaiting_snapshot = True
        self._resync_reason = reason
        await self._send_quietly(link, self._follow_message())

    def _maybe_rediscover(self, link: _Link, source: Any, why: str) -> None:
        if self._rediscovering or source in self._checked_sources:
            return
        self._checked_sources.add(source)
        self._rediscovering = True
        self._spawn(self._rediscover(link, why))

    async def _rediscover(self, link: _Link, why: str) -> None:
        adapter = self._adapter
        try:
            response = await self._exchange(link, adapter.OWNER_DISCOVERY,
                                            adapter.owner_discovery_params(self.thread_id), targeted=False)
            owner = adapter.owner_from(response, self.thread_id)
        except IpcError as exc:
            log.warning("owner rediscovery failed (%s): %s", why, exc.message)
            return
        finally:
            self._rediscovering = False
        if owner == self.owner_id or link.dead:
            return
        await self._adopt_owner(link, owner, why)


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
    adapter: str | Adapter | None = None,
    candidates: Sequence[Adapter] | None = None,
    early: EarlyFollow | None = None,
) -> ThreadSession:
    """Connect to the owner of ``thread_id``, follow it and wait for its first snapshot.

    The endpoint is resolved from ``env`` (default ``os.environ``) unless given. The first
    snapshot's facts are readable from ``session.mirror`` on return; no events are emitted
    for them (they are the caller's baseline). ``tap(direction, message)`` sees every
    message sent (``"send"``) and received (``"recv"``, then ``"handled"`` once processed);
    ``adapter`` is the generation to speak (an adapter or its name); without it the owner's
    answer to discovery chooses among ``candidates`` (default: every known generation).
    ``early``: the worker's first follow of this thread (:mod:`rekall.adapters.extension.early`), made with
    the same ``adapter`` and ``candidates``: the session goes on from its connection.
    """
    thread_id = validate_thread_id(thread_id)
    module = registry.adapter_named(adapter) if isinstance(adapter, str) else adapter
    if isinstance(adapter, str) and module is None:
        raise InvalidInput(f"no protocol generation named {adapter!r}", field="adapter",
                           hint=f"known: {', '.join(a.NAME for a in registry.ADAPTERS)}")
    explicit = endpoint is not None or transport is not None
    if early is not None:
        endpoint = early.endpoint
    elif endpoint is None:
        endpoint = resolve_endpoint(env) if transport is None else Endpoint("test", "custom transport")
    session = ThreadSession(
        thread_id, endpoint=endpoint, transport=transport, env=env, explicit_endpoint=explicit,
        client_type=client_type, request_timeout_s=request_timeout_s, snapshot_timeout_s=snapshot_timeout_s,
        owner_answer_s=owner_answer_s, peer_uid_lookup=peer_uid_lookup, adapter=module, candidates=candidates,
        max_resyncs=max_resyncs, tap=tap)
    await session._open(emit=False, early=early)
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
