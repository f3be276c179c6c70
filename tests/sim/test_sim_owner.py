from __future__ import annotations

import argparse
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from rekall.kernel import events as ev
from rekall.adapters.extension import connect_thread
from rekall.thread.patches import apply_patches
from rekall.sim import protocol as p
from rekall.sim import ScriptedBackend, SimError, SimulatedOwner, start_sim_in_thread
from rekall.transports import MemoryTransport, MessageChannel


@pytest.mark.anyio
async def test_the_socket_lives_in_a_private_directory_and_is_removed_on_stop():
    async with SimulatedOwner() as sim:
        path = sim.socket_path
        assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
        assert stat.S_ISSOCK(os.lstat(path).st_mode) and stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert not path.parent.exists()


@pytest.mark.anyio
async def test_a_requested_path_in_a_shared_directory_is_refused():
    shared = Path(tempfile.mkdtemp(prefix="rk", dir="/tmp"))
    try:
        os.chmod(shared, 0o755)
        with pytest.raises(SimError, match="mode 0700"):
            await SimulatedOwner(socket_path=shared / "s.sock").start()
    finally:
        os.rmdir(shared)


@pytest.mark.anyio
async def test_a_live_socket_is_never_stolen_but_a_stale_one_is_replaced():
    root = Path(tempfile.mkdtemp(prefix="rk", dir="/tmp"))
    try:
        async with SimulatedOwner(socket_path=root / "s.sock"):
            with pytest.raises(SimError, match="already listening"):
                await SimulatedOwner(socket_path=root / "s.sock").start()
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(root / "s.sock"))
        stale.close()  # bound, never listening: a leftover
        async with SimulatedOwner(socket_path=root / "s.sock") as sim:
            assert sim.socket_path == root / "s.sock"
    finally:
        os.chmod(root, 0o700)
        for leftover in root.iterdir():
            leftover.unlink()
        root.rmdir()


@pytest.mark.anyio
async def test_the_owner_also_serves_a_memory_transport():
    sim = SimulatedOwner()
    await sim.backend.start(sim)  # no socket needed for a memory transport
    transport = MemoryTransport(sim.serve_stream)
    session = await connect_thread(sim.thread_id, transport=transport, env=sim.pin)
    try:
        assert session.endpoint.kind == "test" and session.mirror.idle
        await session.compact()
        with anyio.fail_after(5):
            while not isinstance(await session.next_event(), ev.CompactionCompleted):
                pass
    finally:
        await session.aclose()
        await sim.stop()
        await transport.aclose()


@pytest.mark.anyio
async def test_patches_the_sim_sends_rebuild_exactly_its_state():
    async with SimulatedOwner(history_turns=1) as sim:
        channel = MessageChannel(await MemoryTransport(sim.serve_stream).connect())
        await channel.send({"type": "request", "requestId": "1", "sourceClientId": "initializing-client",
                            "version": 0, "method": "initialize", "params": {"clientType": "t"}})
        with anyio.fail_after(5):
            client_id = (await channel.receive())["result"]["clientId"]
            await channel.send({"type": "broadcast", "method": "thread-stream-following-changed",
                                "sourceClientId": client_id, "targetClientIds": [sim.owner_id], "version": 1,
                                "params": {"hostId": "local", "conversationId": sim.thread_id, "following": True}})
            state = (await channel.receive())["params"]["change"]["conversationState"]
            backend = sim.backend
            backend.user_turn("x")
            backend.steer("y")
            backend.page_in_history(2)
            backend.add_request()
            backend.complete_turn()
            for _ in range(5):
                change = (await channel.receive())["params"]["change"]
                state = apply_patches(state, change["patches"])
        assert state == backend.state


def test_the_threaded_handle_scripts_and_waits_from_synchronous_code():
    with start_sim_in_thread(compaction_delay_s=0.01) as sim:
        assert Path(sim.socket_path).exists() and sim.env["REKALL_PIPE"] == sim.socket_path

        async def client():
            async with await connect_thread(sim.thread_id, env=sim.env) as session:
                await session.compact()
                return session.owner_id

        assert anyio.run(client) == sim.owner_id
        sim.wait_until(lambda owner: owner.backend.state["threadRuntimeStatus"]["type"] == "idle", timeout=5)
        assert len(sim.compact_requests) == 1 and sim.follow_count == 1
        sim.user_turn("more")
        assert sim.call(lambda owner: owner.backend.state["turns"][-1]["params"]["input"][0]["text"]) == "more"
        newer = sim.call(lambda owner: owner.state_version) + 1
        sim.set_option("state_version", newer)
        assert sim.call(lambda owner: owner.state_version) == newer
        with pytest.raises(TimeoutError):
            sim.wait_until(lambda owner: owner.follow_count == 99, timeout=0.05)
        with pytest.raises(AttributeError):
            sim.no_such_script()


def test_the_threaded_handle_reports_a_failed_start():
    with pytest.raises(SimError):
        start_sim_in_thread(mode="neither")


@pytest.mark.parametrize("generation", sorted(p.TABLES))
def test_rekall_sim_prints_the_socket_thread_and_generation_and_stops_cleanly_on_sigterm(generation):
    root = Path(tempfile.mkdtemp(prefix="rk", dir="/tmp"))
    path = root / "cli.sock"
    proc = subprocess.Popen([sys.executable, "-m", "rekall", "sim", "--socket", str(path), "--generation", generation],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        first = proc.stdout.readline()
        second = proc.stdout.readline()
        third = proc.stdout.readline()
        assert first.strip() == f"rekall sim listening on {path}"
        assert second.startswith("thread id: ")
        assert third.strip() == f"extension generation: {generation}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert not path.exists()
    finally:
        proc.kill()
        proc.wait()
        for leftover in root.iterdir():
            leftover.unlink()
        root.rmdir()


def test_run_sim_refuses_an_unavailable_backend_with_a_usage_error(monkeypatch):
    from rekall.kernel.errors import UsageError
    from rekall.sim import cli

    monkeypatch.setitem(sys.modules, "tests.support.codex_backend", None)  # as if it were not installed
    with pytest.raises(UsageError, match="codex backend is a development tool") as raised:
        cli.run_sim(argparse.Namespace(socket=None, backend="codex", json=False))
    assert "--backend scripted" in raised.value.hint and "checkout" in str(raised.value)


def test_rekall_sim_refuses_a_generation_it_cannot_play():
    done = subprocess.run([sys.executable, "-m", "rekall", "sim", "--generation", "27.1"], capture_output=True,
                          text=True, timeout=30, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode != 0 and "unknown generation '27.1'" in done.stderr
    assert all(name in done.stderr for name in p.TABLES)


def test_a_scripted_backend_starts_like_the_node_fake():
    state = ScriptedBackend().snapshot()
    assert state["threadRuntimeStatus"] == {"type": "idle", "activeFlags": []} and state["requests"] == []
    assert state["latestTokenUsageInfo"]["last"]["totalTokens"] == 90000
    assert state["latestTokenUsageInfo"]["modelContextWindow"] == 100000
    assert [t["turnId"] for t in state["turns"]] == ["user-turn", "old-compaction-turn"]


# --- the real extension's shapes, one option each ----------------------------------------


def test_a_paginated_backend_keeps_every_turn_in_the_history_and_none_in_turns():
    backend = ScriptedBackend(history_mode="paginated", history_turns=1)
    state = backend.snapshot()
    assert state["historyMode"] == "paginated" and state["turns"] == []
    history = state["turnHistory"]
    assert history["kind"] != "canonical"  # which kinds exist is not published
    entries = [e for island in history["history"]["islands"] for e in island["entries"]]
    assert all(set(e) == {"key", "value"} for e in entries)
    assert [t["turnId"] for t in backend.turns()] == ["history-0", "user-turn", "old-compaction-turn"]
    assert [e["value"] for e in entries] == ["history-0", "user-turn", "old-compaction-turn"]
    with pytest.raises(ValueError, match="history_mode"):
        ScriptedBackend(history_mode="pages")


@pytest.mark.parametrize("options", [{"history_mode": "paginated"}, {"replace_root_at_turn_end": True},
                                     {"real_submissions": True}, {"system_error_after_turn": True}])
@pytest.mark.anyio
async def test_the_patches_of_each_shape_rebuild_exactly_the_owner_state(options):
    async with SimulatedOwner(**options) as sim:
        channel = MessageChannel(await MemoryTransport(sim.serve_stream).connect())
        await channel.send({"type": "request", "requestId": "1", "sourceClientId": "initializing-client",
                            "version": 0, "method": "initialize", "params": {"clientType": "t"}})
        with anyio.fail_after(5):
            client_id = (await channel.receive())["result"]["clientId"]
            await channel.send({"type": "broadcast", "method": "thread-stream-following-changed",
                                "sourceClientId": client_id, "targetClientIds": [sim.owner_id], "version": 1,
                                "params": {"hostId": "local", "conversationId": sim.thread_id, "following": True}})
            state = (await channel.receive())["params"]["change"]["conversationState"]
            backend = sim.backend
            backend.user_turn("x")
            backend.steer("y")
            submission = backend.add_unconfirmed_submission()
            request = backend.add_request()
            backend.answer_request(request)
            backend.confirm_submission(submission)
            backend.complete_turn()
            for _ in range(7):
                change = (await channel.receive())["params"]["change"]
                state = apply_patches(state, change["patches"])
        assert state == backend.state
        if options.get("real_submissions"):
            assert "unconfirmedTurnSubmissions" not in state
        if options.get("system_error_after_turn"):
            assert state["threadRuntimeStatus"] == {"type": "systemError", "activeFlags": []}
        assert state["requests"][-1]["completed"] is True


@pytest.mark.anyio
async def test_unsolicited_snapshots_jump_the_revision_and_foreign_batches_race_the_owner():
    async with SimulatedOwner(snapshots_at_turn_boundaries=True, foreign_batches=True) as sim:
        channel = MessageChannel(await MemoryTransport(sim.serve_stream).connect())
        await channel.send({"type": "request", "requestId": "1", "sourceClientId": "initializing-client",
                            "version": 0, "method": "initialize", "params": {"clientType": "t"}})
        with anyio.fail_after(5):
            client_id = (await channel.receive())["result"]["clientId"]
            await channel.send({"type": "broadcast", "method": "thread-stream-following-changed",
                                "sourceClientId": client_id, "targetClientIds": [sim.owner_id], "version": 1,
                                "params": {"hostId": "local", "conversationId": sim.thread_id, "following": True}})
            first = (await channel.receive())["params"]["change"]
            sim.backend.user_turn("x")
            frames = [await channel.receive() for _ in range(3)]
        foreign, own, snapshot = frames
        assert foreign["sourceClientId"] == sim.foreign_client_id != sim.owner_id
        assert own["sourceClientId"] == sim.owner_id
        assert foreign["params"]["change"]["baseRevision"] == own["params"]["change"]["baseRevision"] == first["revision"]
        assert snapshot["params"]["change"]["type"] == "snapshot"
        assert snapshot["params"]["change"]["revision"] == own["params"]["change"]["revision"] + 2 == sim.revision


@pytest.mark.anyio
async def test_a_snapshot_larger_than_a_write_piece_reaches_a_follower_whole_and_before_the_next_patches():
    from rekall.sim.owner import WRITE_PIECE_BYTES

    async with SimulatedOwner() as sim:
        sim.backend.change([{"op": "add", "path": ["notes"], "value": "é" * (3 * WRITE_PIECE_BYTES)}])
        session = await connect_thread(sim.thread_id, env=sim.env)  # over the real Unix socket
        try:
            assert session.mirror.state == sim.backend.state
            sim.backend.change([{"op": "replace", "path": ["notes"], "value": "short"},
                                {"op": "replace", "path": ["threadRuntimeStatus"], "value": {"type": "active"}}])
            with anyio.fail_after(5):
                while not isinstance(await session.next_event(), ev.ThreadBusy):
                    pass
            assert session.mirror.state == sim.backend.state and session.resync_count == 0
        finally:
            await session.aclose()


@pytest.mark.anyio
async def test_a_build_that_renames_a_field_publishes_it_by_its_name_in_snapshots_and_patches(monkeypatch):
    from rekall.adapters.extension.generations import G26_9XX
    from rekall.adapters.extension.ipc import IpcAdapter
    from rekall.thread import V11

    renamed = p.B26_9XX._replace(renames={"latestTokenUsageInfo": "tokenUsageInfo"})
    monkeypatch.setitem(p.BUILDS, "renamed", renamed)
    reader = IpcAdapter(G26_9XX._replace(name="renamed", layout=V11._replace(token_usage="tokenUsageInfo")))
    seen: list[dict] = []
    async with SimulatedOwner(generation="renamed") as sim:
        tap = lambda direction, message: seen.append(message) if direction == "recv" else None  # noqa: E731
        async with await connect_thread(sim.thread_id, env=sim.env, adapter=reader, tap=tap) as session:
            assert session.mirror.tokens == 90000
            sim.backend.set_telemetry(1234)
            with anyio.fail_after(5):
                while session.mirror.tokens != 1234:
                    await session.next_event()
    states = [m["params"]["change"] for m in seen if m.get("method") == p.STATE_CHANGED]
    snapshot = next(c["conversationState"] for c in states if c["type"] == "snapshot")
    assert "tokenUsageInfo" in snapshot and "latestTokenUsageInfo" not in snapshot
    patch = next(c["patches"][0] for c in states if c["type"] == "patches")
    assert patch["path"] == ["tokenUsageInfo"]
    assert "latestTokenUsageInfo" in sim.backend.state  # the backend writes v11 names


def test_the_simulators_env_pins_its_build_only_where_the_owners_answer_cannot_tell_it_apart(monkeypatch):
    from rekall.sim import owner as sim_owner
    from tests.support.generations import G26_1201

    from rekall.adapters.extension.generations import G26_721, G26_9XX

    monkeypatch.setattr(sim_owner, "GENERATIONS", (G26_9XX, G26_721))
    assert SimulatedOwner().env.keys() == {"REKALL_PIPE"} and SimulatedOwner(generation="26.721").pin == {}
    monkeypatch.setattr(sim_owner, "GENERATIONS", (G26_1201.generation, G26_9XX, G26_721))
    assert SimulatedOwner().pin == {"REKALL_GENERATION": "26.9xx"}
    assert SimulatedOwner(generation="26.721").pin == {}
