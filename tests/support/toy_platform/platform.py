"""The toy platform: threads held by :class:`ToyOwner` objects in this process.

A fake owner compacts when asked (the compaction completes at once and the context shrinks) and
starts the turn it is given; it records both, so that a test can count what reached it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs

from rekall.kernel import events as ev
from rekall.kernel.errors import IpcError, RekallError
from rekall.adapters.contract import Absence, Row, ThreadSnapshot, noted
from rekall.kernel.records import Acted, Failure, ThreadFacts
from rekall.adapters.resume import ResumeToken
from tests.support.toy_platform import NAME

#: The fake owners, by thread id: the test puts its owner here.
OWNERS: dict[str, ToyOwner] = {}


class NotHere(IpcError):
    code = "toy_thread_unknown"


class ToyOwner:
    """A thread's owner on the toy platform: idle, 80 % full until it compacts."""

    def __init__(self, thread_id: str, *, tokens: int = 80_000, window: int = 100_000) -> None:
        self.thread_id = thread_id
        self.facts = ThreadFacts(runtime_status="idle", busy_reason=None, tokens=tokens, window=window,
                                 boundary_fingerprint="toy-user-turn-1", layout_problem=None)
        self.revision = 1
        self.compacts = 0
        self.turns: list[tuple[str, str]] = []
        self.followers: list[ToyThread] = []
        #: The resume tokens the platform was opened with (the worker's: what schedule journaled).
        self.resumed_from: list[ResumeToken | None] = []

    def change(self, *events: ev.DomainEvent, **facts: Any) -> None:
        self.facts = attrs.evolve(self.facts, **facts)
        self.revision += 1
        for follower in self.followers:
            for event in events:
                follower.queue.put_nowait(event)

    def compact(self) -> Acted:
        self.compacts += 1
        done = f"toy-compaction-{self.compacts}"
        asyncio.get_running_loop().call_soon(lambda: self.change(
            ev.CompactionCompleted(done), ev.Telemetry(10_000, self.facts.window),
            completed_compaction_ids=self.facts.completed_compaction_ids | {done}, tokens=10_000))
        return Acted()

    def start_turn(self, text: str, job_id: str) -> Acted:
        self.turns.append((text, job_id))
        return Acted(turn_id=f"toy-turn-{len(self.turns)}", turn_status="inProgress")


def _owner(thread_id: str) -> ToyOwner:
    owner = OWNERS.get(thread_id)
    if owner is None:
        raise NotHere(f"no toy owner holds thread {thread_id}", hint="create a ToyOwner for it")
    return owner


def _snapshot(owner: ToyOwner) -> ThreadSnapshot:
    return ThreadSnapshot(owner.thread_id, owner.facts, owner.revision, "toy-owner", {"toyOwners": len(OWNERS)})


class ToyThread:
    def __init__(self, owner: ToyOwner) -> None:
        self.owner = owner
        self.queue: asyncio.Queue[ev.DomainEvent | None] = asyncio.Queue()
        owner.followers.append(self)

    async def events(self) -> AsyncIterator[ev.DomainEvent]:
        while (event := await self.queue.get()) is not None:
            yield event

    def snapshot(self) -> ThreadSnapshot:
        return _snapshot(self.owner)

    @property
    def seen_at(self) -> float | None:
        return None

    def connection_note(self) -> dict[str, Any]:
        return {"platform": NAME, "ownerId": "toy-owner"}

    async def reconnect(self) -> None:
        pass

    async def compact(self) -> Acted:
        return self.owner.compact()

    async def start_turn(self, text: str, job_id: str) -> Acted:
        return self.owner.start_turn(text, job_id)

    async def inject(self, text: str) -> Acted:
        return Acted(Failure("not_supported", ToyPlatform.injection_limit, "not_delivered"))

    async def aclose(self) -> None:
        self.owner.followers.remove(self)
        self.queue.put_nowait(None)


class ToyPlatform:
    name = NAME
    title = "the toy platform"
    host = "the toy platform's threads"
    serving_hint = "create a ToyOwner for the thread"
    follow_only_reads = True
    injection_limit: str | None = "the toy platform has no way into a thread's context"

    def __init__(self, resume: ResumeToken | None) -> None:
        self.resume = resume

    async def follow(self, thread_id: str, *, request_timeout_s: float) -> ToyThread:
        owner = _owner(thread_id)
        owner.resumed_from.append(self.resume)
        return ToyThread(owner)

    async def observe(self, thread_id: str, *, request_timeout_s: float) -> ThreadSnapshot:
        return attrs.evolve(_snapshot(_owner(thread_id)), settled={"toyOwner": "toy-owner"})

    async def diagnose(self) -> list[Row]:
        return [Row.green("toy_owners", f"the toy platform holds {len(OWNERS)} thread(s)")]

    def compatibility(self) -> dict[str, Any]:
        return {"status": "compatible", "binary": None, "checks": [], "toy": True}

    def absent(self, error: RekallError) -> Absence | None:
        return None

    def with_notes(self, error: RekallError, notes: Sequence[Absence]) -> RekallError:
        return noted(error, notes)
