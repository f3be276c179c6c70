"""The platform contract: what every place a Codex thread lives in must offer rekall.

A platform is how rekall reaches a thread's owner: the VS Code extension's IPC router
(:mod:`rekall.adapters.extension.platform`) or the shared Codex app-server (:mod:`rekall.adapters.app_server.platform`);
:mod:`rekall.adapters.owners` finds which one has a thread. The worker, the service and ``doctor`` talk only to this contract:

* **follow** a thread and deliver domain events (:mod:`rekall.kernel.events`) until closed;
* **observe** a thread read-only: one snapshot of its facts, with no side effect on the owner
  or other clients (``probe``, ``schedule``'s preflight, ``doctor``);
* **act**: ``compact()`` and ``start_turn(text, job_id)``, each sent at most once, answering
  with a typed :class:`Acted` whose failure says whether the request was delivered;
* **deliver** the handoff without a turn: ``inject(text)`` adds a message to the thread's
  model-visible context, sent at most once; a platform with no way in says so in ``injection_limit``;
* **diagnose**: the platform's own ``doctor`` rows (endpoint, versions, schema), each saying what
  it becomes when another platform serves the thread or answers (:class:`Row`);
* **check compatibility**: the public-schema report of the Codex binary behind it;
* **resume**: the opaque record ``schedule`` journals with the job (:class:`ThreadSnapshot`'s
  ``settled``) is handed back to it as a :class:`rekall.adapters.resume.ResumeToken` when the worker opens it;
* **say** who it is in owner finding's messages (``title``), and when it is not there at all;
* **close** the followed thread.

The platforms are listed in :mod:`rekall.adapters.registry`; the records they share (facts,
``Acted``, ``Failure``) are in :mod:`rekall.kernel.records`.

Nothing here does I/O; an implementation does.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs

from rekall.kernel import events as ev
from rekall.kernel.errors import RekallError
from rekall.kernel.records import Acted, Delivery, Failure, ThreadFacts

Level = Literal["GREEN", "AMBER", "RED"]


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
    #: The platform's own record of where it found the thread, which ``schedule`` journals and the
    #: worker resumes from (a JSON object only the platform reads; ``None``: nothing to keep).
    settled: Mapping[str, Any] | None = None
    #: The MCP tools the thread's turn in progress is calling now (``rekall.kernel.caller``): read by
    #: ``observe`` only, empty in a followed thread's snapshots.
    calls_in_progress: frozenset[str] = frozenset()
    #: How people know the thread: its title, else its first words, as the platform shows them
    #: (``None``: it shows neither). Read by ``observe`` only, for a question put to the user.
    title: str | None = None


#: What a GREEN row can show about its platform, for the rows of the others: it serves the thread
#: (``CODEX_THREAD_ID``), or it answers (so terminal sessions can be served through it).
Shown = Literal["serves_thread", "answers"]


@attrs.frozen
class Row:
    """One ``doctor`` row. GREEN, AMBER (works, but look) or RED, with a hint unless GREEN.

    ``shows`` and ``unless`` tie a platform's rows to the others' without naming them: a GREEN row
    ``shows`` facts about its platform; a row says in ``unless`` what it becomes when another
    platform shows a fact (it does not matter then). Neither is part of the row's JSON."""

    name: str
    level: Level
    detail: str
    #: What to do next; ``None`` exactly when the row is GREEN.
    hint: str | None = None
    shows: frozenset[Shown] = frozenset()
    unless: Mapping[Shown, Row] = attrs.field(factory=dict)

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
        return {"name": self.name, "level": self.level, "detail": self.detail, "hint": self.hint}


@attrs.frozen
class Absence:
    """What a platform that is not there at all adds to another platform's answer."""

    #: Appended to the answer's message (``and no shared Codex app-server: … does not exist …``).
    note: str
    #: Appended to its hint: where such a thread could live instead.
    hint: str


def noted(error: RekallError, notes: Sequence[Absence]) -> RekallError:
    """A platform's own ``error`` with the notes of the absent platforms: a copy of the same type
    and code, so that callers handle it as they handle the error."""
    said = copy.copy(error)
    said.message = "; ".join([error.message, *(n.note for n in notes)])
    said.hint = "; ".join([error.hint or "see the message", *(n.hint for n in notes)])
    said.args = (said.message,)
    return said


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

    @property
    def seen_at(self) -> float | None:
        """When the fact of the event ``events()`` delivered last was known (``time.monotonic()``),
        where the platform can say (the extension: when the frame that showed it arrived); else ``None``."""
        ...

    def connection_note(self) -> dict[str, Any]:
        """What the journal's ``connected`` note records: ``platform``, ``ownerId`` and the
        platform's own identity (``adapter`` for the extension)."""
        ...

    async def reconnect(self) -> None:
        """A new connection and a fresh snapshot; never resends a request. Raises
        :class:`rekall.kernel.errors.IpcError` on failure; the caller decides on backoff."""
        ...

    # A request is sent once; a platform that can writes it before the call returns (the
    # extension's IPC), so that the worker's step puts it on the wire; the answer is awaited.

    def compact(self) -> Awaitable[Acted]: ...

    def start_turn(self, text: str, job_id: str) -> Awaitable[Acted]: ...

    def inject(self, text: str) -> Awaitable[Acted]:
        """Add ``text`` to the thread's model-visible context as a developer message, starting no
        turn. Only called where the platform's ``injection_limit`` is ``None``."""
        ...

    async def aclose(self) -> None: ...


class Platform(Protocol):
    """A place threads live in. ``name`` is what the journal records (``extension-ipc``).

    ``diagnose`` marks the GREEN row that shows the platform reachable with ``shows={"answers"}``:
    ``doctor``'s verdict counts a platform as a host rekall can serve by it."""

    name: str
    #: How messages name it (``the VS Code extension``).
    title: str
    #: What ``doctor``'s verdict says rekall can serve when this platform answers
    #: (``terminal sessions on the shared app-server``).
    host: str
    #: How a thread comes to be served by it, for a hint when no platform serves one.
    serving_hint: str
    #: Following only reads the thread (nobody else is told), so a worker may follow before it has
    #: claimed its job. Otherwise (the app-server's ``thread/resume`` notifies every client) it
    #: follows only once the journal says it has claimed the job.
    follow_only_reads: bool
    #: Why this platform cannot put the handoff into a thread's context without starting a turn
    #: (said in the job's status and by ``doctor``); ``None``: it can (``FollowedThread.inject``).
    injection_limit: str | None

    async def follow(self, thread_id: str, *, request_timeout_s: float) -> FollowedThread: ...

    async def observe(self, thread_id: str, *, request_timeout_s: float) -> ThreadSnapshot: ...

    async def diagnose(self) -> list[Row]: ...

    def compatibility(self) -> dict[str, Any]:
        """The public-schema report of the Codex binary behind the platform (``status`` is
        ``compatible``, ``not_checked``, …). Blocking (it may run the binary): call it off the loop."""
        ...

    def absent(self, error: RekallError) -> Absence | None:
        """What to add to another platform's answer when ``error`` (from :meth:`observe`) means
        that this platform is not there at all; ``None`` otherwise."""
        ...

    def with_notes(self, error: RekallError, notes: Sequence[Absence]) -> RekallError:
        """This platform's own answer ``error``, with what the absent platforms add."""
        ...


__all__ = ["Absence", "Acted", "Delivery", "Failure", "FollowedThread", "Level", "Platform", "Row", "Shown",
           "ThreadSnapshot", "noted"]
