"""The same scenarios against every known generation: identical facts, events and outcomes.

Each scenario of :mod:`tests.support.record` runs twice or more: the simulator plays each
build from its own tables (:mod:`rekall.sim.protocol`) and rekall speaks the generation of
the same name from its records (:mod:`rekall.adapters.extension.generations`). What the thread did
must not depend on the build; only the wire may differ.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from rekall.adapters.extension import RequestFailed, connect_thread
from rekall.adapters.extension.generations import G26_721, G26_9XX, GENERATIONS
from rekall.adapters.extension.ipc import IpcAdapter
from rekall.sim import SimulatedOwner
from rekall.sim import protocol as p
from tests.support.record import SCENARIOS, record

pytestmark = pytest.mark.anyio


_CLIENT_IDS = re.compile(r"\b(owner|client)-[0-9a-f-]{36}\b")


def _what_happened(entries: list[dict[str, Any]]) -> list[Any]:
    """Everything a transcript records except the wire: calls, outcomes, events, final facts
    (client ids are random per run: each becomes its role)."""
    kept = [e for e in entries[1:] if not {"send", "recv", "recv_raw"} & e.keys()]
    return json.loads(_CLIENT_IDS.sub(r"\1", json.dumps(kept)))


def test_the_simulator_plays_every_generation_rekall_knows():
    assert sorted(p.TABLES) == sorted(g.name for g in GENERATIONS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_every_generation_gives_the_same_facts_events_and_outcomes(name):
    runs = {g.name: await record(name, g.name) for g in GENERATIONS}
    reference, *others = runs
    for other in others:
        assert _what_happened(runs[other]) == _what_happened(runs[reference]), f"{other} differs from {reference}"
    outcomes = [e for e in runs[reference] if "outcome" in e]
    assert outcomes, "a scenario that calls nothing proves nothing"


async def test_the_wire_differs_where_the_builds_differ():
    sent = {g.name: [e["send"] for e in await record("start_turn", g.name) if "send" in e] for g in GENERATIONS}
    for generation, messages in sent.items():
        table = p.TABLES[generation]
        methods = [m.get("method") for m in messages]
        assert (p.OWNER_DISCOVERY in methods) == (p.OWNER_DISCOVERY in table), generation
        start = next(m for m in messages if m.get("method") == p.START_TURN)
        assert p.START_TURN_KEYS[generation] in start["params"], generation
        assert start["version"] == p.accepted_version(table, p.START_TURN, start), generation


@pytest.mark.parametrize(("change", "call", "why"), [
    ({"base_versions": {**G26_721.base_versions, p.START_TURN: G26_721.base_versions[p.START_TURN] + 1}},
     "start_turn", "a start-turn version the build does not have"),
    ({"base_versions": {**G26_721.base_versions, p.COMPACT: G26_721.base_versions[p.COMPACT] + 1}},
     "compact", "a compact version the build does not have"),
    ({"start_turn_shape": "turnStart"}, "start_turn", "the other build's start-turn shape"),
])
async def test_a_wrong_record_fails_against_the_simulators_own_table(change, call, why):
    """What the cross-generation suite rests on: the simulator's table is not the record's."""
    wrong = IpcAdapter(G26_721._replace(**change))
    async with SimulatedOwner(generation=G26_721.name) as sim:
        session = await connect_thread(sim.thread_id, env=sim.env, adapter=wrong)
        try:
            with pytest.raises(RequestFailed) as caught:
                if call == "compact":
                    await session.compact()
                else:
                    await session.start_turn("go on", "job-1")
        finally:
            await session.aclose()
        if "start_turn_shape" in change:  # the owner's handler throws; rekall cannot tell what it did
            assert caught.value.code == f"invalid-request: {p.START_TURN} needs {p.START_TURN_KEYS[G26_721.name]}"
        else:  # refused by discovery: no client can handle that version
            assert (caught.value.code, caught.value.delivery) == ("no-client-found", "not_delivered"), why
            assert sim.compact_requests == [] and sim.start_turn_requests == []
