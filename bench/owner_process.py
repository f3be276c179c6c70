"""The simulated owner in a process of its own, for bench/lifecycle.py.

    python bench/owner_process.py     # one JSON line per command on stdin, one answer per line on stdout

Run as a thread of the bench, the owner would share the bench's interpreter (and its GIL)
while it times the worker. Here it has its own, and records on its own loop, where the
extension would see them, when a client follows, when a compaction completes and when a
request's frame is read (``time.monotonic()``: CLOCK_MONOTONIC, the same in every process).

Commands (``{"op": ...}``): ``info``; ``set_telemetry`` (``tokens``, ``window``);
``follow_count``; ``wait_follows`` (until more than ``above``); ``complete_turn`` (answers
``idleAt``, once the state change is published); ``wait_start_turns`` (until ``count``);
``marks``. Each answers ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``; EOF stops it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rekall.sim import SimulatedOwner  # noqa: E402

WAIT_S = 30.0


def instrument(owner: SimulatedOwner, marks: dict[str, list[float]]) -> None:
    """Record when a request's frame is read, a client follows and a compaction completes."""
    serve, publish, notify = owner._dispatch, owner.publish, owner._notify
    seen = [owner.follow_count]

    def timed_notify() -> None:
        if owner.follow_count != seen[0]:
            seen[0] = owner.follow_count
            marks.setdefault("follow", []).append(time.monotonic())
        notify()

    async def timed_dispatch(client: Any, message: Any) -> None:
        # The owner has the request once its frame is read and decoded, before the simulator routes it.
        if isinstance(message, dict) and message.get("type") == "request":
            marks.setdefault(str(message.get("method")), []).append(time.monotonic())
        await serve(client, message)

    def timed_publish(patches: list[dict[str, Any]]) -> None:
        if any(p.get("path", [])[-1:] == ["completed"] and p.get("value") is True for p in patches):
            marks.setdefault("completed", []).append(time.monotonic())
        publish(patches)

    owner._dispatch = timed_dispatch  # type: ignore[method-assign]
    owner.publish = timed_publish  # type: ignore[method-assign]
    owner._notify = timed_notify  # type: ignore[method-assign]


async def _answer(owner: SimulatedOwner, marks: dict[str, list[float]], command: dict[str, Any]) -> dict[str, Any]:
    op = command.get("op")
    if op == "info":
        return {"env": owner.env, "threadId": owner.thread_id}
    if op == "set_telemetry":
        owner.backend.set_telemetry(command["tokens"], command["window"])
        return {}
    if op == "follow_count":
        return {"value": owner.follow_count}
    if op == "wait_follows":
        await owner.wait_until(lambda o: o.follow_count > command["above"], WAIT_S)
        return {}
    if op == "complete_turn":
        owner.backend.complete_turn("completed")
        return {"idleAt": time.monotonic()}
    if op == "wait_start_turns":
        await owner.wait_until(lambda o: len(o.start_turn_requests) >= command["count"], WAIT_S)
        return {}
    if op == "marks":
        return {"marks": marks}
    raise ValueError(f"unknown command {op!r}")


async def serve(options: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    marks: dict[str, list[float]] = {}
    async with SimulatedOwner(**options) as owner:
        instrument(owner, marks)
        while line := await reader.readline():
            try:
                answer = {"ok": True, **await _answer(owner, marks, json.loads(line))}
            except Exception as exc:  # the bench reports it and stops
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(serve(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
