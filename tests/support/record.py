"""Record protocol transcripts from the simulator (``fixtures/ipc/<adapter>/*.jsonl``).

Each scenario drives a real :class:`~rekall.adapters.extension.session.ThreadSession` against a
:class:`~rekall.sim.owner.SimulatedOwner` over a real socket and writes down what was
sent and received, the calls and how they ended, the events and the final facts, in the
format :mod:`tests.support.conformance` replays. Regenerate with::

    python -m tests.support.record --generation 26.9xx --out fixtures/ipc/26.9xx             # every scenario
    python -m tests.support.record --generation 26.721 --out fixtures/ipc/26.721 compaction  # just one
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs

from rekall.kernel import events as ev
from rekall.adapters.extension import connect_thread
from rekall.adapters.extension.session import ThreadSession
from rekall.kernel.errors import RekallError
from rekall.sim import protocol as p
from rekall.sim.owner import GARBAGE, SimulatedOwner
from tests.support.conformance import dump, error_json, event_json, facts_json, result_json

THREAD_ID = "0199a5c2-7e11-4000-8000-0000000000b1"
COMPACT = "thread-follower-compact-thread"
START_TURN = "thread-follower-start-turn"
#: A state version newer than any build the simulator plays.
NEWER_STATE = max(table[p.STATE_CHANGED] for table in p.TABLES.values()) + 1


class Recorder:
    def __init__(self, name: str, description: str, env: dict[str, str], generation: str) -> None:
        self.env = env
        self.generation = generation
        self.entries: list[dict[str, Any]] = [{"transcript": name, "adapter": generation,
                                               "threadId": THREAD_ID, "description": description}]
        self.session: ThreadSession | None = None
        self.events: list[Any] = []
        self._calls = 0
        self._changed = asyncio.Event()
        self._collector: asyncio.Task[None] | None = None

    def tap(self, direction: str, message: Any) -> None:
        if direction in ("send", "recv"):  # a copy now: the mirror changes the snapshot in place later
            self.entries.append({direction: json.loads(json.dumps(message))})

    async def call(self, name: str, args: dict[str, Any] | None = None) -> Any:
        args = args or {}
        self._calls += 1
        number = self._calls
        self.entries.append({"call": number, "name": name, "args": args})
        try:
            if name == "connect":
                value = await connect_thread(THREAD_ID, env=self.env, tap=self.tap, adapter=self.generation, **args)
                self.session = value
                self._collector = asyncio.create_task(self._collect(value))
            else:
                assert self.session is not None
                value = await getattr(self.session, name)(**args)
        except RekallError as exc:
            self.entries.append({"outcome": number, "error": error_json(exc)})
            return exc
        self.entries.append({"outcome": number, "result": result_json(name, value, self.session)})
        return value

    async def _collect(self, session: ThreadSession) -> None:
        async for event in session.events():
            self.events.append(event)
            self.entries.append({"event": event_json(event)})
            self._changed.set()
            self._changed = asyncio.Event()

    async def until(self, kind: type, count: int = 1, timeout: float = 10.0) -> None:
        """Wait until ``count`` events of ``kind`` have been seen in total."""
        async with asyncio.timeout(timeout):
            while sum(isinstance(e, kind) for e in self.events) < count:
                await self._changed.wait()

    def closed_by_peer(self) -> None:
        """The peer closed the connection in answer to the last message we sent."""
        last_send = max(i for i, e in enumerate(self.entries) if "send" in e)
        self.entries.insert(last_send + 1, {"close": True})

    async def finish(self) -> None:
        if self.session is not None:
            self.entries.append({"facts": facts_json(self.session.mirror.facts)})
            await self.session.aclose()
            if self._collector is not None:
                await self._collector


Scenario = Callable[[Recorder, SimulatedOwner], Awaitable[None]]


@attrs.frozen
class _Entry:
    description: str
    run: Scenario
    mode: str = "patches"
    state_version: int | None = None
    no_owner: bool = False
    #: Simulator options (the real extension's shapes, see ``ScriptedBackend``).
    options: dict[str, Any] = attrs.field(factory=dict)


SCENARIOS: dict[str, _Entry] = {}


def scenario(name: str, description: str, **owner: Any) -> Callable[[Scenario], Scenario]:
    """Register a scenario; ``owner`` sets ``mode``, ``state_version``, ``no_owner`` or ``options``
    (more simulator options) on the simulator."""
    def register(fn: Scenario) -> Scenario:
        SCENARIOS[name] = _Entry(description, fn, **owner)
        return fn

    return register


@scenario("handshake", "initialize, owner discovery, follow, first snapshot")
async def _handshake(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")


@scenario("patches", "user turn, steering, approvals, telemetry and history paging as patches")
async def _patches(rec: Recorder, sim: SimulatedOwner) -> None:
    await _thread_changes(rec, sim)


@scenario("snapshots", "the same changes sent as full snapshots", mode="snapshots")
async def _snapshots(rec: Recorder, sim: SimulatedOwner) -> None:
    await _thread_changes(rec, sim)


async def _thread_changes(rec: Recorder, sim: SimulatedOwner) -> None:
    backend = sim.backend
    await rec.call("connect")
    backend.user_turn("next task")
    await rec.until(ev.UserBoundaryChanged, 1)
    backend.steer("also this")
    await rec.until(ev.UserBoundaryChanged, 2)
    backend.agent_message()
    backend.cosmetic_edit()
    request = backend.add_request()
    backend.complete_turn()
    await rec.until(ev.ThreadBusy, 2)
    backend.resolve_request(request)
    await rec.until(ev.ThreadIdle)
    backend.page_in_history(2)
    backend.set_telemetry(42000)
    await rec.until(ev.Telemetry)


@scenario("compaction", "compact, then the compaction turn completes and the tokens drop")
async def _compaction(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    await rec.call("compact")
    await rec.until(ev.ThreadIdle)


@scenario("start_turn", "start the continuation turn; it runs and completes")
async def _start_turn(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    await rec.call("start_turn", {"text": "Continue with nextStep only.", "client_user_message_id": "job-1"})
    await rec.until(ev.ThreadIdle)


@scenario("router_errors", "every router error for compact and start-turn, and bad acknowledgements")
async def _router_errors(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    idle = 0
    for method, name, args in ((COMPACT, "compact", {}),
                               (START_TURN, "start_turn", {"text": "go on", "client_user_message_id": "job-2"})):
        for error in ("no-client-found", "request-version-mismatch", "no-handler-for-request",
                      "client-disconnected", "request-timeout"):
            sim.fail_next(method, error)
            await rec.call(name, args)
            if error in ("client-disconnected", "request-timeout"):  # the owner acted anyway
                idle += 1
                await rec.until(ev.ThreadIdle, idle)
    sim.reply_next(COMPACT, {"ok": False})
    await rec.call("compact")
    idle += 1
    await rec.until(ev.ThreadIdle, idle)
    sim.reply_next(START_TURN, {"ok": True})
    await rec.call("start_turn", {"text": "go on", "client_user_message_id": "job-3"})
    await rec.until(ev.ThreadIdle, idle + 1)


@scenario("timeouts", "the router times out a slow owner; a silent router hits our own timeout")
async def _timeouts(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect", {"request_timeout_s": 0.1})
    sim.delay_next(COMPACT, 0.5)
    await rec.call("compact")
    await rec.until(ev.ThreadIdle)
    sim.silence_next(START_TURN)
    await rec.call("start_turn", {"text": "go on", "client_user_message_id": "job-4"})
    await rec.until(ev.ThreadIdle, 2)


@scenario("dropped_connection", "the owner drops the socket on start-turn")
async def _dropped(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    sim.drop_connection_on(START_TURN)
    await rec.call("start_turn", {"text": "go on", "client_user_message_id": "job-5"})
    await rec.until(ev.ConnectionLost)
    rec.closed_by_peer()
    await rec.call("compact")  # not sent: nothing to replay on the wire


@scenario("resync", "a revision gap and an inapplicable patch, each answered by a re-follow")
async def _resync(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    sim.drop_updates(1)
    sim.backend.add_request()
    sim.backend.set_runtime("active")
    await rec.until(ev.Resynced)
    sim.send_inapplicable_patch()
    await rec.until(ev.Resynced, 2)


@scenario("owner_moved", "the thread moves to another window; the session follows the new owner")
async def _owner_moved(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    sim.move_owner()
    await rec.until(ev.Resynced)
    await rec.call("compact")
    await rec.until(ev.ThreadIdle)


@scenario("foreign_state", "state from a client that is not the owner is ignored after asking the router")
async def _foreign(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    sim.broadcast_foreign_state("client-somebody-else")
    if p.OWNER_DISCOVERY in sim.request_versions:
        await sim.wait_until(lambda s: s.discovery_count == 2)  # the session asked the router who owns the thread
    sim.backend.set_runtime("active")
    await rec.until(ev.ThreadBusy)


@scenario("version_bump", "state broadcasts in a newer version after connecting: reported, not applied")
async def _version_bump(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    sim.state_version = NEWER_STATE
    sim.backend.set_runtime("active")
    await rec.until(ev.ProtocolChanged)


@scenario("version_bump_at_connect", "the first snapshot arrives in a newer version: connect fails at once",
          state_version=NEWER_STATE)
async def _version_bump_connect(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")


@scenario("no_owner", "nobody owns the thread: discovery answers no-client-found, nobody answers a follow",
          no_owner=True)
async def _no_owner(rec: Recorder, sim: SimulatedOwner) -> None:
    # Without owner discovery only following can tell, and it waits for the snapshot timeout.
    await rec.call("connect", {"snapshot_timeout_s": 0.5})


@scenario("probes", "client-discovery-request gets canHandle:false, a request gets no-handler-for-request")
async def _probes(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    sim.probe_clients()
    await sim.wait_until(lambda s: len(s.probe_replies) == 2)


@scenario("broken_frame", "a frame that is not JSON closes the connection with a clear reason")
async def _broken(rec: Recorder, sim: SimulatedOwner) -> None:
    await rec.call("connect")
    rec.entries.append({"recv_raw": GARBAGE["invalid_json"].hex()})
    sim.send_garbage("invalid_json")
    await rec.until(ev.ConnectionLost)


@scenario("extension_shapes", "the real extension's shapes: a paginated history, a null runtime status that loads, "
          "an answered approval left in requests, submissions without terminal flags, unsolicited snapshots, "
          "batches from another window, a runtime stuck in systemError",
          options={"history_mode": "paginated", "runtime": None, "answered_requests": 1, "real_submissions": True,
                   "snapshots_at_turn_boundaries": True, "foreign_batches": True})
async def _extension_shapes(rec: Recorder, sim: SimulatedOwner) -> None:
    backend = sim.backend
    await rec.call("connect")
    backend.load_thread()
    await rec.until(ev.ThreadIdle)
    if p.OWNER_DISCOVERY in sim.request_versions:
        await sim.wait_until(lambda s: s.discovery_count == 2)  # the other window's batch: the router was asked
    request = backend.add_request()
    await rec.until(ev.ThreadBusy)
    backend.answer_request(request)
    await rec.until(ev.ThreadIdle, 2)
    submission = backend.add_unconfirmed_submission()
    await rec.until(ev.ThreadBusy, 2)
    backend.confirm_submission(submission)
    await rec.until(ev.ThreadIdle, 3)
    await rec.call("compact")
    await rec.until(ev.ThreadIdle, 4)
    backend.user_turn("next")
    await rec.until(ev.UserTurnRunning)
    backend.complete_turn(idle=False)
    backend.set_runtime("systemError")
    await rec.until(ev.UserTurnRunning, 2)
    await rec.until(ev.ThreadBusy, 5)


async def record(name: str, generation: str = p.DEFAULT_GENERATION) -> list[dict[str, Any]]:
    entry = SCENARIOS[name]
    sim = SimulatedOwner(thread_id=THREAD_ID, compaction_delay_s=0.01, turn_duration_s=0.01, mode=entry.mode,
                         generation=generation, **entry.options)
    if entry.state_version is not None:
        sim.state_version = entry.state_version
    sim.no_owner = entry.no_owner
    async with sim:
        rec = Recorder(name, entry.description, sim.env, generation)
        await entry.run(rec, sim)
        await rec.finish()
    return rec.entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--generation", default=p.DEFAULT_GENERATION, choices=sorted(p.TABLES),
                        help="the extension build the simulator plays and rekall speaks")
    parser.add_argument("names", nargs="*", help=f"scenarios (default: all of {', '.join(SCENARIOS)})")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names or list(SCENARIOS):
        entries = asyncio.run(record(name, args.generation))
        dump(entries, args.out / f"{name}.jsonl")
        print(f"{args.out / (name + '.jsonl')}: {len(entries) - 1} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
