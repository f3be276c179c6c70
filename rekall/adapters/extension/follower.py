"""The follower of one thread, sans I/O: the extension protocol's decisions, in the style of h11.

A :class:`Follower` is fed what the connection brings (:meth:`Follower.receive`, one message at
a time) and what the handshake and the requests answered; it keeps the thread model
(:class:`~rekall.thread.mirror.ThreadMirror`) and the protocol's state, and says what to do
next as a list of actions: messages to :class:`Send`, a :class:`Resolve` of a request waiting
for its response, domain events to :class:`Emit`, the connect :class:`Connected` or
:class:`ConnectFailed`, a :class:`Rediscover` of the owner, or :class:`GiveUp` on the
connection. It never touches a socket, a timer or the event loop:
:class:`~rekall.adapters.extension.session.ThreadSession` does those and nothing else.

Decisions made here:

* which messages count: state broadcasts only from the owner, for this thread, at the
  adapter's version; other versions are counted and reported (``ProtocolChanged``), and fail
  a connect that waits for its first snapshot;
* who the owner is: named by owner discovery, or, in a generation without it, the client
  that answers our follow with the thread's snapshot or asks for this thread's followers;
  another client's state or request for followers makes it ask discovery again, once per
  client;
* when to resync: a revision gap, an inapplicable patch, a snapshot without state, a change
  of unknown type, or a new owner, bounded per connection; patches that arrive while waiting
  for the snapshot are dropped;
* what a refused request proves (delivered or not, and whether versions may disagree), and
  why a first snapshot did not come.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

from rekall.kernel import events as ev
from rekall.adapters.extension import messages as m
from rekall.adapters.extension.errors import NoOwner, RequestFailed, SnapshotTimeout, VersionMismatch
from rekall.adapters.extension.handshake import Handshaken
from rekall.adapters.extension.ipc import IpcAdapter
from rekall.kernel.errors import IpcError
from rekall.thread.mirror import RevisionGap, ThreadMirror
from rekall.thread.patches import PatchError

log = logging.getLogger("rekall.adapters")

MAX_RESYNCS_PER_CONNECTION = 5


class Send(NamedTuple):
    """Write ``message``; a broken connection is noticed (and reported once) by the reader."""

    message: dict[str, Any]


class Resolve(NamedTuple):
    """The response a request is waiting for."""

    response: m.Response


class Emit(NamedTuple):
    """Domain events; ``at_arrival``: their facts were known when the message arrived (else now)."""

    events: tuple[ev.DomainEvent, ...]
    at_arrival: bool


class Connected(NamedTuple):
    """The first snapshot came: the connect is done."""


class ConnectFailed(NamedTuple):
    """The connect must fail with ``error``."""

    error: IpcError


class Rediscover(NamedTuple):
    """Ask owner discovery who owns the thread now; feed the answer to :meth:`Follower.rediscovered`."""

    why: str


class GiveUp(NamedTuple):
    """The connection cannot be trusted any more: close it (the session reports it lost)."""

    detail: str


Action = Send | Resolve | Emit | Connected | ConnectFailed | Rediscover | GiveUp


class Follower:
    """One thread's follower: ``adapter`` is the generation spoken, or ``None`` while the owner's
    answer must choose among ``candidates``."""

    def __init__(self, thread_id: str, adapter: IpcAdapter | None, candidates: Sequence[IpcAdapter], *,
                 max_resyncs: int = MAX_RESYNCS_PER_CONNECTION) -> None:
        self.thread_id = thread_id
        #: Undecided (no ``adapter``): the owner's answer to discovery chooses among these.
        self.candidates: tuple[IpcAdapter, ...] = () if adapter is not None else tuple(candidates)
        self.adapter: IpcAdapter = adapter if adapter is not None else self.candidates[0]
        #: Why this generation is spoken (shown by probe and doctor).
        self.generation_reason = "chosen by the caller" if adapter is not None else "not decided yet"
        self.max_resyncs = max_resyncs
        self.client_id: str | None = None
        self.owner_id: str | None = None
        #: When owner discovery last named the owner (monotonic s): a no-client-found soon after
        #: cannot mean that nobody owns the thread.
        self._discovered_at: float | None = None
        self.mirror = ThreadMirror(self.adapter.LAYOUT)
        self.observed_versions: dict[str, set[Any]] = {}
        self.unknown_versions: dict[str, int] = {}
        self.resync_count = 0
        self.owner_changes = 0
        self.foreign_broadcasts = 0
        self.dropped_patches = 0
        self.ignored_messages = 0
        self._owner_unanswered = False  # discovery said no-client-found; following must find the owner
        self._connection_resyncs = 0
        self._connecting = False  # a connect waits for its first snapshot
        self._emit_first_snapshot = False
        self._awaiting_snapshot = False
        self._resync_reason: str | None = None
        self._rediscovering = False
        self._checked_sources: set[Any] = set()

    @property
    def decided(self) -> bool:
        return not self.candidates

    @property
    def owner_unanswered(self) -> bool:
        """Owner discovery answered no-client-found and no client has answered our follow yet."""
        return self.owner_id is None and self._owner_unanswered

    # -- connecting --------------------------------------------------------------------

    def connection_opened(self) -> None:
        """A new connection: its resyncs count afresh."""
        self._connection_resyncs = 0

    def handshaking(self) -> None:
        self.client_id = None
        self.owner_id = None

    def handshaken(self, done: Handshaken, now: float) -> None:
        """What the handshake learned, ``now`` (monotonic s)."""
        if done.decided_because is not None:
            if done.adapter.LAYOUT != self.mirror.layout:
                self.mirror = ThreadMirror(done.adapter.LAYOUT)
            self.adapter, self.candidates, self.generation_reason = done.adapter, (), done.decided_because
        if done.owner_unanswered:
            self._owner_unanswered = True
        self.client_id, self.owner_id = done.client_id, done.owner_id
        self._discovered_at = now if done.owner_id is not None and self.adapter.owner_discovery else None
        self._checked_sources = {self.owner_id} if self.owner_id is not None else set()

    def following(self, *, emit: bool) -> None:
        """A connect now waits for the first snapshot; ``emit``: its facts' events are emitted."""
        self._connecting = True
        self._emit_first_snapshot = emit
        self._awaiting_snapshot = True
        self._resync_reason = None

    def stop_waiting(self) -> None:
        """The connect ended (or gave up) waiting for its first snapshot."""
        self._connecting = False

    def follow_message(self) -> dict[str, Any]:
        assert self.client_id is not None and (self.owner_id is not None or not self.adapter.owner_discovery)
        return self.adapter.follow_broadcast(self.thread_id, source=self.client_id, owner=self.owner_id)

    def snapshot_missing(self, waited_s: float) -> IpcError:
        """Why no first snapshot came within ``waited_s``."""
        if self.owner_id is None and not self.adapter.owner_discovery:
            asked = "owner discovery answered no-client-found and " if self._owner_unanswered else ""
            return NoOwner(f"no client owns thread {self.thread_id}: {asked}no client answered following within "
                           f"{waited_s:g} s (in generation {self.adapter.NAME}, which has no owner "
                           "discovery, the owner answers following)",
                           hint="open the thread in a VS Code window with the Codex extension; never guess an owner")
        text = f"no snapshot of thread {self.thread_id} from owner {self.owner_id} within {waited_s:g} s"
        seen = self.observed_versions.get(self.adapter.STATE_CHANGED)
        if self.unknown_versions:
            text += "; " + "; ".join(self.unknown_versions)
        elif seen:
            text += f"; state versions seen: {sorted(seen, key=repr)}"
        else:
            text += "; no state broadcast was seen at all"
        return SnapshotTimeout(text, hint="the owner did not send the thread's state; check that the thread is open "
                                          "in VS Code and the extension is up to date")

    # -- requests ----------------------------------------------------------------------

    def refused(self, method: str, response: m.Response, now: float) -> RequestFailed:
        """What a failed response to ``method`` proves, ``now`` (monotonic s), as the error to raise."""
        error = response.error or "request-failed"
        delivery = self.adapter.delivery_of(error)
        discovered = (None if self._discovered_at is None or self.owner_id is None
                      else (self.owner_id, now - self._discovered_at))
        doubt = self.adapter.version_doubt(method, error, discovered=discovered)
        if doubt is not None:
            return RequestFailed(f"{method} failed: {error}; {doubt}; run `rekall protocol` to compare the "
                                 "extension's table with rekall's", code=error, delivery=delivery, method=method,
                                 hint="the owner did not act on it; run `rekall protocol` to compare the "
                                      "extension's table with rekall's before scheduling again")
        hint = ("the owner did not act on it; it is safe to schedule again" if delivery == "not_delivered"
                else "the owner may have acted on it; check the thread before scheduling again")
        return RequestFailed(f"{method} failed: {error}", code=error, delivery=delivery, method=method, hint=hint)

    def rediscovered(self, response: m.Response | None, why: str) -> list[Action]:
        """The answer to a :class:`Rediscover` (``None``: it failed, or the connection is gone)."""
        self._rediscovering = False
        if response is None:
            return []
        try:
            owner = self.adapter.owner_from(response, self.thread_id)
        except IpcError as exc:
            log.warning("owner rediscovery failed (%s): %s", why, exc.message)
            return []
        return [] if owner == self.owner_id else self._adopt_owner(owner, why)

    # -- receiving ---------------------------------------------------------------------

    def receive(self, message: Any) -> list[Action]:
        """What one incoming message means, and what to do about it."""
        adapter = self.adapter
        if isinstance(message, dict) and message.get("type") in ("broadcast", "request"):
            method = message.get("method")
            version = message.get("version")
            if isinstance(method, str):
                self.observed_versions.setdefault(method, set()).add(
                    version if isinstance(version, (int, str, type(None))) else repr(version))
        inbound = adapter.classify(message, thread_id=self.thread_id, owner_id=self.owner_id)
        if isinstance(inbound, m.Response):
            return [Resolve(inbound)]
        if isinstance(inbound, m.Reply):
            return [Send(inbound.message)]
        if isinstance(inbound, m.StateChange):
            return self._state_change(inbound.change)
        if isinstance(inbound, m.UnknownVersion):
            return self._unknown_version(inbound)
        if isinstance(inbound, m.FollowStatusRequested):
            if inbound.source == self.owner_id:
                return [Send(self.follow_message())]
            if not adapter.owner_discovery and isinstance(inbound.source, str):
                # Without owner discovery, the client asking for this thread's followers owns it.
                return self._adopt_owner(inbound.source, "another client asked for followers")
            return self._maybe_rediscover(inbound.source, "another client asked for followers")
        if isinstance(inbound, m.ForeignState):
            if self._answers_our_follow(inbound):
                self.owner_id = inbound.source
                self._checked_sources = {inbound.source}
                if self._owner_unanswered:
                    self.generation_reason += f"; client {inbound.source} answered following"
                log.info("thread %s: owner %s answered following", self.thread_id, inbound.source)
                return self._state_change(inbound.change)
            self.foreign_broadcasts += 1
            if adapter.owner_discovery:
                return self._maybe_rediscover(inbound.source, "another client broadcast this thread's state")
            return []
        self.ignored_messages += 1
        return []

    def _answers_our_follow(self, inbound: m.ForeignState) -> bool:
        """A snapshot of our thread while we follow without knowing the owner (no discovery)."""
        change = inbound.change
        return (self.owner_id is None and not self.adapter.owner_discovery and self._awaiting_snapshot
                and isinstance(inbound.source, str) and isinstance(change, dict) and change.get("type") == "snapshot")

    def _adopt_owner(self, owner: str, why: str) -> list[Action]:
        log.info("thread %s moved from owner %s to %s (%s)", self.thread_id, self.owner_id, owner, why)
        self.owner_id = owner
        self.owner_changes += 1
        self._checked_sources = {owner}
        return self._resync(f"the owner changed to {owner} ({why})")

    def _maybe_rediscover(self, source: Any, why: str) -> list[Action]:
        if self._rediscovering or source in self._checked_sources:
            return []
        self._checked_sources.add(source)
        self._rediscovering = True
        return [Rediscover(why)]

    def _unknown_version(self, inbound: m.UnknownVersion) -> list[Action]:
        text = self.adapter.protocol_changed_text(inbound.method, inbound.version)
        first = text not in self.unknown_versions
        self.unknown_versions[text] = self.unknown_versions.get(text, 0) + 1
        actions: list[Action] = []
        if first:
            log.warning("%s", text)
            actions.append(Emit((ev.ProtocolChanged(inbound.method, inbound.version, text),), at_arrival=False))
        # Without owner discovery the owner is not known before its first answer: any answer counts.
        from_owner = inbound.from_owner or (self.owner_id is None and not self.adapter.owner_discovery)
        if from_owner and inbound.method == self.adapter.STATE_CHANGED and self._connecting:
            self._connecting = False
            actions.append(ConnectFailed(VersionMismatch(text, hint="see the message for which side to update; "
                                                                    "`rekall protocol` compares the tables")))
        return actions

    def _state_change(self, change: Any) -> list[Action]:
        """Mirror one change."""
        kind = change.get("type") if isinstance(change, dict) else None
        if kind == "snapshot":
            if "conversationState" not in change:
                return self._resync("a snapshot without conversationState")
            events = tuple(self.mirror.load_snapshot(change["conversationState"], change.get("revision")))
            self._awaiting_snapshot = False
            if self._connecting:
                self._connecting = False
                return [Connected(), Emit(events, at_arrival=True)] if self._emit_first_snapshot else [Connected()]
            actions: list[Action] = []
            if self._resync_reason is not None:
                actions.append(Emit((ev.Resynced(self._resync_reason, self.resync_count, self.mirror.revision),),
                                    at_arrival=False))
                self._resync_reason = None
            return [*actions, Emit(events, at_arrival=True)]
        if kind == "patches":
            if self._awaiting_snapshot:
                self.dropped_patches += 1
                return []
            try:
                events = tuple(self.mirror.apply_patches(change.get("patches"),
                                                         base_revision=change.get("baseRevision"),
                                                         revision=change.get("revision")))
            except (RevisionGap, PatchError) as exc:
                return self._resync(exc.message)
            return [Emit(events, at_arrival=True)]
        return self._resync(f"a state change of unknown type {kind!r}")

    def _resync(self, reason: str) -> list[Action]:
        self._connection_resyncs += 1
        self.resync_count += 1
        if self._connection_resyncs > self.max_resyncs:
            return [GiveUp(f"gave up after {self.max_resyncs} resyncs on one connection (last: {reason})")]
        log.info("resync %d: %s", self.resync_count, reason)
        self._awaiting_snapshot = True
        self._resync_reason = reason
        return [Send(self.follow_message())]
