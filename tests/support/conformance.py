"""Transcripts: recorded conversations with the owner, replayed through an adapter.

A transcript is JSON Lines. The first line is a header ``{"transcript", "adapter",
"threadId", "description"}``; every other line is one of:

``{"send": message}``        a message the client sent
``{"recv": message}``        a message the client received
``{"recv_raw": "hex"}``      bytes the client received that are not a valid frame
``{"close": true}``          the peer closed the connection here
``{"call": n, "name": ..., "args": {...}}``   the client started call ``n``: ``connect``,
                             ``compact`` or ``start_turn``
``{"outcome": n, "result": ...}`` or ``{"outcome": n, "error": {...}}``   how call ``n`` ended
``{"event": {...}}``         a domain event the session emitted (only their order counts)
``{"facts": {...}}``         the mirror's facts at this point

:func:`replay_transcript` plays the peer's side from the transcript over an in-memory
transport, drives the session with the same calls at the same points, and checks that
the client sends the same messages (request ids are mapped), the calls end the same way,
the same events come out in the same order, and the facts match. The simulator records
transcripts (:mod:`tests.support.record`); ``tests/adapters/test_conformance.py`` replays
every file under ``fixtures/ipc/<adapter>/``. Transcripts recorded from the simulator are
regression transcripts: they catch a change in rekall's behaviour, not a difference from
the real extension.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs

from rekall.adapters.extension.errors import RequestFailed
from rekall.kernel.records import ThreadFacts
from rekall.adapters.extension.session import ThreadSession, connect_thread
from rekall.kernel.errors import RekallError
from rekall.transports import ByteStream, MemoryTransport, MessageChannel, encode_message

CALLS = ("connect", "compact", "start_turn")

#: What rekall knows (its version, the known bases and the generations that have them) grows
#: with every generation added: a "which side is behind" text is compared without it, so that
#: adding a generation re-records no other generation's transcripts.
_WHAT_REKALL_KNOWS = re.compile(r"rekall \S+ knows base \S+ \(generations? [^()]*\)")


def without_what_rekall_knows(text: str) -> str:
    return _WHAT_REKALL_KNOWS.sub("rekall knows …", text)


def compared_event(event: dict[str, Any]) -> dict[str, Any]:
    """An event as transcripts compare it (:func:`without_what_rekall_knows` in a ``ProtocolChanged``)."""
    if event.get("type") == "ProtocolChanged" and isinstance(event.get("detail"), str):
        return {**event, "detail": without_what_rekall_knows(event["detail"])}
    return event


class ConformanceError(AssertionError):
    """The adapter did not behave as the transcript recorded."""


# --- JSON forms ---------------------------------------------------------------------


def event_json(event: Any) -> dict[str, Any]:
    return {"type": type(event).__name__, **attrs.asdict(event)}


def facts_json(facts: ThreadFacts) -> dict[str, Any]:
    out = attrs.asdict(facts)
    out["completed_compaction_ids"] = sorted(facts.completed_compaction_ids)
    # Added after the first transcripts were recorded: written (and checked) once there are some.
    running = out.pop("running_compaction_ids")
    if running:
        out["running_compaction_ids"] = sorted(running)
    if out["tokens_before_compaction"] is None:  # the app-server's; the extension's transcripts have none
        del out["tokens_before_compaction"]
    if out["goal"] is None:  # the extension's state shows no goal: transcripts record one only when known
        del out["goal"]
    return out


def error_json(exc: RekallError) -> dict[str, Any]:
    out = {"class": type(exc).__name__, "code": exc.code}
    if isinstance(exc, RequestFailed):
        out["delivery"] = exc.delivery
    return out


def result_json(name: str, value: Any, session: ThreadSession | None) -> Any:
    if name == "connect":
        assert session is not None
        return {"ownerId": session.owner_id, "clientId": session.client_id, "facts": facts_json(session.mirror.facts)}
    if name == "start_turn":
        return {"turnId": value.turn_id, "status": value.status}
    return value


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def dump(entries: Iterable[dict[str, Any]], path: Path) -> None:
    path.write_text("".join(json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n" for e in entries),
                    encoding="utf-8")


# --- replay -------------------------------------------------------------------------


class _Progress:
    """Where the replayed peer is, and how far the client has got; waitable."""

    def __init__(self) -> None:
        self.position = 0  # index of the entry the peer is working on
        self.sent = 0  # frames the peer has sent
        self.handled = 0  # frames the client has finished handling
        self.driven: set[int] = set()  # call, outcome and facts entries the client side has passed
        self._changed = asyncio.Event()

    def bump(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()


async def replay_transcript(entries: list[dict[str, Any]], *, timeout: float = 20.0) -> None:
    """Replay one transcript; raises :class:`ConformanceError` at the first difference."""
    header, body = entries[0], entries[1:]
    progress = _Progress()
    ids: dict[str, str] = {}  # recorded request id -> the id the client used this time
    outcomes = {e["outcome"]: (i, e) for i, e in enumerate(body) if "outcome" in e}
    expected_events = [e["event"] for e in body if "event" in e]

    def tap(direction: str, message: Any) -> None:
        if direction == "handled":
            progress.handled += 1
            progress.bump()

    peer_errors: list[ConformanceError] = []

    async def peer(stream: Any) -> None:
        try:
            await play(stream)
        except Exception as exc:  # noqa: BLE001 - any failure of the peer is a failed replay
            failure = exc if isinstance(exc, ConformanceError) else ConformanceError(f"the replayed peer failed: {exc!r}")
            peer_errors.append(failure)
            await stream.aclose()  # the client's call fails at once instead of waiting for its timeout

    async def play(stream: Any) -> None:
        channel = MessageChannel(stream)
        for index, entry in enumerate(body):
            progress.position = index
            progress.bump()
            if "recv" in entry:
                await stream.send(encode_message(_map_ids(entry["recv"], ids)))
                progress.sent += 1
            elif "recv_raw" in entry:
                await stream.send(bytes.fromhex(entry["recv_raw"]))
            elif "send" in entry:
                live = await channel.receive()
                if live is None:
                    raise ConformanceError(f"entry {index + 2}: the client closed instead of sending {entry['send']}")
                _check_sent(index, live, entry["send"], ids)
            elif "call" in entry or "outcome" in entry or "facts" in entry:
                await progress.wait(lambda: index in progress.driven)  # keep the recorded interleaving
            elif "close" in entry:
                await stream.aclose()
                progress.position = len(body)
                progress.bump()
                return
        progress.position = len(body)
        progress.bump()

    def _mark(index: int) -> None:
        progress.driven.add(index)
        progress.bump()

    transport = MemoryTransport()
    session: ThreadSession | None = None
    peer_task: asyncio.Task[None] | None = None

    async def drive() -> None:
        nonlocal session, peer_task
        for index, entry in enumerate(body):
            if "call" not in entry and "facts" not in entry:
                continue
            await progress.wait(lambda: progress.position >= index and
                                (peer_task is None or progress.handled >= progress.sent))
            if "facts" in entry:
                if session is None or facts_json(session.mirror.facts) != entry["facts"]:
                    raise ConformanceError(f"entry {index + 2}: facts differ:\n  got      "
                                           f"{facts_json(session.mirror.facts) if session else None}\n"
                                           f"  recorded {entry['facts']}")
                _mark(index)
                continue
            name, args = entry["name"], entry.get("args", {})
            if name == "connect":
                peer_task = asyncio.ensure_future(peer(_LazyAccept(transport)))
                call = connect_thread(header["threadId"], transport=transport, tap=tap, adapter=header["adapter"],
                                      **args)
            elif session is None:
                raise ConformanceError(f"entry {index + 2}: {name} before a successful connect")
            else:  # a request that provably was not sent raises when it is called
                call = getattr(session, name)
            _mark(index)
            try:
                value = await (call if name == "connect" else call(**args))
            except RekallError as exc:
                got: dict[str, Any] = {"error": error_json(exc)}
            else:
                if name == "connect":
                    session = value
                got = {"result": result_json(name, value, session)}
            outcome_index, outcome = outcomes[entry["call"]]
            recorded = {k: v for k, v in outcome.items() if k in ("result", "error")}
            _mark(outcome_index)
            if got != recorded:
                raise ConformanceError(f"entry {index + 2}: {name} ended differently:\n  got      {got}\n"
                                       f"  recorded {recorded}")

    async with asyncio.timeout(timeout):
        try:
            try:
                await drive()
                if peer_task is not None:
                    await peer_task
            except ConformanceError:
                if peer_errors:  # the first difference is the one that matters
                    raise peer_errors[0] from None
                raise
            if peer_errors:
                raise peer_errors[0]
        finally:
            events = []
            if session is not None:
                await session.aclose()
                events = [event_json(e) async for e in session.events()]
            if peer_task is not None and not peer_task.done():
                peer_task.cancel()
                await asyncio.gather(peer_task, return_exceptions=True)
    if list(map(compared_event, events)) != list(map(compared_event, expected_events)):
        raise ConformanceError("events differ:\n  got      " + "\n           ".join(map(str, events))
                               + "\n  recorded " + "\n           ".join(map(str, expected_events)))


class _LazyAccept(ByteStream):
    """Stands in for the server stream until the client connects (connect happens inside the call)."""

    def __init__(self, transport: MemoryTransport) -> None:
        self._transport = transport
        self._stream: Any = None

    async def _get(self) -> Any:
        if self._stream is None:
            self._stream = await self._transport.accept()
        return self._stream

    async def send(self, data: bytes) -> None:
        await (await self._get()).send(data)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await (await self._get()).receive(max_bytes)

    async def aclose(self) -> None:
        await (await self._get()).aclose()


def _map_ids(message: Any, ids: dict[str, str]) -> Any:
    if isinstance(message, dict) and message.get("type") == "response" and message.get("requestId") in ids:
        return {**message, "requestId": ids[message["requestId"]]}
    return message


def _check_sent(index: int, live: Any, recorded: Any, ids: dict[str, str]) -> None:
    if isinstance(live, dict) and isinstance(recorded, dict) and live.get("type") == recorded.get("type") == "request":
        ids[recorded["requestId"]] = live["requestId"]
        live = {**live, "requestId": recorded["requestId"]}
    if live != recorded:
        raise ConformanceError(f"entry {index + 2}: the client sent something else:\n  got      {live}\n"
                               f"  recorded {recorded}")


def transcript_paths(root: Path) -> list[Path]:
    """Every transcript under ``root/<adapter>/``."""
    return sorted(root.glob("*/*.jsonl"))
