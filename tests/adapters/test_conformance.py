"""Every recorded transcript replays through its adapter (fixtures/ipc/<adapter>/*.jsonl)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from rekall.adapters.extension import ipc
from tests.support.conformance import ConformanceError, load, replay_transcript, transcript_paths
from tests.support.record import SCENARIOS, record

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ipc"
TRANSCRIPTS = transcript_paths(FIXTURES)


def test_every_registered_adapter_has_transcripts_covering_the_required_ground():
    for adapter in ipc.ADAPTERS:
        names = {p.stem for p in (FIXTURES / adapter.NAME).glob("*.jsonl")}
        assert {"handshake", "patches", "snapshots", "compaction", "start_turn", "router_errors"} <= names


@pytest.mark.anyio
@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_the_transcript_replays_through_its_adapter(path):
    entries = load(path)
    assert ipc.adapter_named(entries[0]["adapter"]) is not None, "transcript for an unregistered adapter"
    await replay_transcript(entries)


@pytest.mark.anyio
async def test_a_client_that_sends_something_else_fails_the_replay():
    entries = load(FIXTURES / "26.9xx" / "compaction.jsonl")
    tampered = copy.deepcopy(entries)
    compact = next(e for e in tampered if e.get("send", {}).get("method") == "thread-follower-compact-thread")
    compact["send"]["version"] = 1
    with pytest.raises(ConformanceError, match="sent something else"):
        await replay_transcript(tampered)


@pytest.mark.anyio
async def test_different_events_fail_the_replay():
    tampered = load(FIXTURES / "26.9xx" / "compaction.jsonl")
    event = next(e for e in tampered if "event" in e)
    event["event"]["revision"] = 999
    with pytest.raises(ConformanceError, match="events differ"):
        await replay_transcript(tampered)


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["start_turn", "resync"])
async def test_a_fresh_recording_from_the_simulator_replays(name):
    assert name in SCENARIOS
    await replay_transcript(await record(name))
