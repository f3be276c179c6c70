"""The platform contract: what every place a Codex thread lives in must offer rekall.

A platform is how rekall reaches a thread's owner: the VS Code extension's IPC router
(:mod:`rekall.adapters.extension.platform`) or the shared Codex app-server (:mod:`rekall.adapters.app_server.platform`);
:mod:`rekall.owners` finds which one has a thread. The worker, the service and ``doctor`` talk only to this contract:

* **follow** a thread and deliver domain events (:mod:`rekall.events`) until closed;
* **observe** a thread read-only: one snapshot of its facts, with no side effect on the owner
  or other clients (``probe``, ``schedule``'s preflight, ``doctor``);
* **act**: ``compact()`` and ``start_turn(text, job_id)``, each sent at most once, answering
  with a typed :class:`Acted` whose failure says whether the request was delivered;
* **diagnose**: the platform's own ``doctor`` rows (endpoint, versions, schema);
* **close** the followed thread.

Nothing here does I/O; an implementation does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, Literal, Protocol

import attrs

from rekall import events as ev
from rekall.thread.facts import ThreadFacts

#: What is known about a failed request: provably never sent, or it may have reached the owner.
Delivery = Literal["not_delivered", "unknown"]
Level = Literal["GREEN", "AMBER", "RED"]


@attrs.frozen
class Failure:
    """Why a request did not succeed. ``code`` is a stable error code (``connection_lost``, …)."""

    code: str
    message: str
    delivery: Delivery


@attrs.frozen
class Acted:
    """The answer to ``compact()`` or ``start_turn()``: exactly one of ``failure`` and success.

    ``turn_id``/``turn_status`` are set for a started turn (the status may be ``None``)."""

    failure: Failure | None = None
    turn_id: str | None = None
    turn_status: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


@attrs.frozen
class ThreadSnapshot:
    """A thread's facts at one revision, as the platform sees them now."""

    thread_id: str
    facts: ThreadFacts
    revision: int | None
    #: The client that owns the thread, as the platform names it (``None`` if it has none).
    owner_id: str | None
    #: What the platform adds to ``probe`` (endpoint, adapter, versions), in display order.
    details: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Row:
    """One ``doctor`` row. GREEN, AMBER (works, but look) or RED, with a hint unless GREEN."""

    name: str
    level: Level
    detail: str
    #: What to do next; ``None`` exactly when the row is GREEN.
    hint: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.level == "GREEN") != (self.hint is None):
            raise ValueError(f"row {self.name}: a hint is required exactly when the level is not GREEN")

    @classmethod
    def green(cls, name: str, detail: str) -> Row:
        return cls(name, "GREEN", detail)

    @classmethod
    def failed(cls, name: str, exc: Any) -> Row:
        return cls(name, "RED", exc.message, exc.hint or "see the detail")

    @classmethod
    def not_checked(cls, name: str, because: str, hint: str) -> Row:
        return cls(name, "AMBER", f"not checked: {because}", hint)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


class FollowedThread(Protocol):
    """One thread followed through its owner; made by :meth:`Platform.follow`."""

    def events(self) -> AsyncIterator[ev.DomainEvent]:
        """Domain events until closed (idle, busy, telemetry, compaction completed, user boundary
        changed, user turn running, owner moved as ``Resynced``, connection lost, …). Survives
        :meth:`reconnect`."""
        ...

    def snapshot(self) -> ThreadSnapshot:
        """The facts as of the last event delivered (no I/O)."""
        ...

    def evidence(self) -> dict[str, Any]:
        """What the journal's ``connected`` note records: ``platform``, ``ownerId`` and the
        platform's own identity (``adapter`` for the extension)."""
        ...

    async def reconnect(self) -> None:
        """A new connection and a fresh snapshot; never resends a request. Raises
        :class:`rekall.errors.IpcError` on failure; the caller decides on backoff."""
        ...

    # A request is sent once; a platform that can writes it before the call returns (the
    # extension's IPC), so that the worker's step puts it on the wire; the answer is awaited.

    def compact(self) -> Awaitable[Acted]: ...

    def start_turn(self, text: str, job_id: str) -> Awaitable[Acted]: ...

    async def aclose(self) -> None: ...


class Platform(Protocol):
    """A place threads live in. ``name`` is what the journal records (``extension-ipc``)."""

    name: str
    #: Following only reads the thread (nobody else is told), so a worker may follow before it has
    #: claimed its job. Otherwise (the app-server's ``thread/resume`` notifies every client) it
    #: follows only once the journal says it owns the job.
    follow_only_reads: bool

    async def follow(self, thread_id: str, *, request_timeout_s: float) -> FollowedThread: ...

    async def observe(self, thread_id: str, *, request_timeout_s: float) -> ThreadSnapshot: ...

    async def diagnose(self) -> list[Row]: ...
