"""Choosing the generation from evidence: the installed extension's table, the owner's answer,
``REKALL_GENERATION``; never a guess. Tables come from the simulator's copy (tests/support/bundles)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rekall.adapters.extension import bundles, ipc
from rekall.adapters.extension import choice
from rekall.adapters.extension.platform import ExtensionIpc, check_extension
from rekall.adapters.extension.generations import GENERATIONS
from rekall.kernel.errors import InvalidInput
from rekall.sim import SimulatedOwner, start_sim_in_thread
from rekall.sim import protocol as p
from tests.support.bundles import build_table, install_extension, minified

#: A compact version newer than any generation rekall or the simulator knows.
NEWER_COMPACT = max([g.base_versions[p.COMPACT] for g in GENERATIONS] + [t[p.COMPACT] for t in p.TABLES.values()]) + 2


def env_for(home: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", **extra}


# --- reading a bundle ---------------------------------------------------------------------


def test_the_table_is_read_from_minified_javascript_as_data():
    table = build_table("26.721")
    assert bundles.tables_in(minified(table).encode()) == [table]


@pytest.mark.parametrize("script", [
    '{"thread-stream-state-changed":1+1,"x":2}',  # an expression: nothing is evaluated
    '{"thread-stream-state-changed":n,"x":2}',
    '{"thread-stream-state-changed":11,f:function(){}}',
    '"thread-stream-state-changed":11}',  # no opening brace
])
def test_anything_but_a_literal_of_names_and_integers_is_no_table(script):
    assert bundles.tables_in(script.encode()) == []


def test_reading_a_bundle_stops_at_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(bundles, "MAX_SCAN_BYTES", 64 * 1024)
    monkeypatch.setattr(bundles, "_CHUNK", 16 * 1024)
    script = tmp_path / "big.js"
    table = build_table("26.9xx")
    script.write_bytes(b"/*" + b"x" * (80 * 1024) + b"*/" + minified(table).encode())
    assert bundles.scan_file(script) == []
    monkeypatch.setattr(bundles, "MAX_SCAN_BYTES", 256 * 1024)
    assert bundles.scan_file(script) == [table]  # across chunk boundaries too


def test_a_read_only_look_never_creates_the_cache_but_uses_one_that_exists(tmp_path, monkeypatch):
    home = tmp_path / "home"
    install_extension(home, "26.721.41059", build_table("26.721"))
    cache = home / ".cache" / "rekall" / bundles.CACHE_NAME
    assert choice.choose(env_for(home), write_cache=False).adapter.NAME == "26.721"
    assert not cache.exists()
    assert choice.choose(env_for(home), write_cache=True).adapter.NAME == "26.721"
    assert cache.exists() and (cache.stat().st_mode & 0o777) == 0o600

    def no_reading(path):
        raise AssertionError(f"read {path} again although the cache knows it")

    monkeypatch.setattr(bundles, "scan_file", no_reading)
    assert choice.choose(env_for(home), write_cache=False).adapter.NAME == "26.721"


def test_an_unreadable_or_tableless_bundle_is_an_amber_row(tmp_path):
    home = tmp_path / "home"
    install_extension(home, "26.999.1", None)
    row = check_extension(env_for(home))
    assert row.level == "AMBER" and "26.999.1" in row.detail and "no method table" in row.detail


# --- the order of evidence ----------------------------------------------------------------


@pytest.mark.parametrize("generation", sorted(p.TABLES))
def test_the_installed_table_chooses_its_generation(tmp_path, generation):
    home = tmp_path / "home"
    install_extension(home, "26.1.1", build_table(generation))
    chosen = choice.choose(env_for(home), write_cache=False)
    assert chosen.adapter.NAME == generation and chosen.refusal is None
    assert "installed extension's table matches it" in chosen.reason


def test_a_pin_never_overrides_an_installed_table(tmp_path):
    home = tmp_path / "home"
    install_extension(home, "26.721.41059", build_table("26.721"))
    chosen = choice.choose(env_for(home, REKALL_GENERATION="26.9xx"), write_cache=False)
    assert chosen.adapter is None and "REKALL_GENERATION=26.9xx disagrees" in chosen.refusal


def test_the_pin_is_used_when_no_table_was_read_and_an_unknown_pin_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    chosen = choice.choose(env_for(home, REKALL_GENERATION="26.721"), write_cache=False)
    assert chosen.adapter.NAME == "26.721" and "pinned by REKALL_GENERATION" in chosen.reason
    with pytest.raises(InvalidInput) as caught:
        choice.choose(env_for(home, REKALL_GENERATION="27.1"), write_cache=False)
    assert caught.value.field == "REKALL_GENERATION" and "26.721" in caught.value.hint


def test_installs_that_disagree_are_named_and_the_owners_answer_settles_them(tmp_path):
    home = tmp_path / "home"
    install_extension(home, "26.901.1", build_table("26.9xx"))
    install_extension(home, "26.721.2", build_table("26.721"), folder=".vscode-insiders/extensions")
    env = env_for(home)
    chosen = choice.choose(env, write_cache=False)
    assert chosen.adapter is None and sorted(a.NAME for a in chosen.candidates) == ["26.721", "26.9xx"]
    assert "VS Code 26.901.1 (26.9xx)" in chosen.reason and "VS Code Insiders 26.721.2 (26.721)" in chosen.reason

    async def observe():
        async with SimulatedOwner(generation="26.721") as sim:
            snapshot = await ExtensionIpc({**env, **sim.env}).observe(sim.thread_id, request_timeout_s=5)
            return snapshot.details

    import anyio
    details = anyio.run(observe)
    assert details["adapter"] == "26.721"
    assert "installed tables disagree" in details["generationReason"]
    assert "no-client-found" in details["generationReason"] and "answered following" in details["generationReason"]


@pytest.mark.anyio
async def test_the_owners_answer_is_remembered_so_the_delay_is_paid_once(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    async with SimulatedOwner(generation="26.721", discovery_delay_s=0.3) as sim:
        platform = ExtensionIpc({**env_for(home), **sim.env})
        first = await platform.observe(sim.thread_id, request_timeout_s=5)
        second = await platform.observe(sim.thread_id, request_timeout_s=5)
        assert first.details["adapter"] == second.details["adapter"] == "26.721"
        assert len(sim.routed_for(p.OWNER_DISCOVERY)) == 1
        assert first.details["generationSettled"] == "found anew"
        assert second.details["generationSettled"] == "reused in this process"
        assert second.details["generationEvidence"]["ownerId"] == first.owner_id == sim.owner_id
        # Another owner (a window reload): the remembered answer proves nothing about it; ask again.
        sim.owner_id = f"owner-{sim.thread_id}"
        third = await platform.observe(sim.thread_id, request_timeout_s=5)
        assert len(sim.routed_for(p.OWNER_DISCOVERY)) == 2 and third.owner_id == sim.owner_id
        assert third.details["generationSettled"] == "found anew"


# --- refusing an unknown table --------------------------------------------------------------


def test_a_table_newer_than_rekall_says_update_rekall_and_one_older_says_update_the_extension(tmp_path):
    newer, older = tmp_path / "newer", tmp_path / "older"
    install_extension(newer, "26.1201.3", build_table("26.9xx", thread_follower_compact_thread=NEWER_COMPACT))
    install_extension(older, "26.101.1", build_table("26.9xx", thread_follower_compact_thread=0))
    ahead = choice.choose(env_for(newer), write_cache=False).refusal
    behind = choice.choose(env_for(older), write_cache=False).refusal
    assert ahead.startswith(f"the installed extension (26.1201.3) expects thread-follower-compact-thread at base "
                            f"version {NEWER_COMPACT}; rekall ")
    assert ": update rekall (table read from" in ahead
    assert "older than any generation rekall knows" in behind and ": update the extension (table read" in behind


def test_a_mix_of_known_versions_matching_no_generation_names_the_differences(tmp_path):
    home = tmp_path / "home"
    mixed = build_table("26.9xx")
    mixed[p.START_TURN] = p.TABLES["26.721"][p.START_TURN]
    install_extension(home, "26.800.1", mixed)
    refusal = choice.choose(env_for(home), write_cache=False).refusal
    assert "matches no generation rekall knows" in refusal
    for generation in GENERATIONS:
        assert f"{generation.name}: " in refusal


def _cli(verb: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CONTEXT_COMPACT_", "CODEX_"))}
    return subprocess.run([sys.executable, "-m", "rekall", verb, *args], env={**clean, **env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=60)


def test_doctor_and_probe_name_the_extension_its_table_and_the_refusal_and_send_nothing(tmp_path):
    home = tmp_path / "home"
    install_extension(home, "26.1201.3", build_table("26.9xx", thread_follower_compact_thread=NEWER_COMPACT))
    with start_sim_in_thread() as sim:
        env = {**env_for(home), **sim.env, "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
        probed = _cli("probe", env, sim.thread_id, "--json")
        doctor = _cli("doctor", {**env, "CODEX_THREAD_ID": sim.thread_id}, "--json")
        assert sim.call(lambda owner: [r.method for r in owner.routed if r.method != p.INITIALIZE]) == []
    expected = (f"the installed extension (26.1201.3) expects thread-follower-compact-thread at base version "
                f"{NEWER_COMPACT};")
    table_text = f"thread-follower-compact-thread {NEWER_COMPACT}"
    assert probed.returncode != 0
    assert expected in probed.stdout + probed.stderr and table_text in probed.stdout + probed.stderr
    rows = {row["name"]: row for row in json.loads(doctor.stdout)["rows"]}
    assert rows["extension_protocol"]["level"] == "RED"
    assert expected in rows["extension_protocol"]["detail"] and table_text in rows["extension_protocol"]["detail"]
    assert "update rekall" in rows["extension_protocol"]["detail"]
    assert rows["owner"]["level"] == "RED" and expected in rows["owner"]["detail"]


def test_the_protocol_verb_lists_the_generations_and_the_installed_tables_differences(tmp_path):
    home = tmp_path / "home"
    install_extension(home, "26.1201.3", build_table("26.9xx", thread_follower_compact_thread=NEWER_COMPACT))
    done = _cli("protocol", env_for(home))
    assert done.returncode == 1
    for generation in GENERATIONS:
        assert f"  {generation.name} ({generation.builds}): " in done.stdout
        assert (f"{p.COMPACT}: base {NEWER_COMPACT} in the table, "
                f"base {generation.base_versions[p.COMPACT]} in {generation.name}") in done.stdout
    assert "Installed: VS Code 26.1201.3 at " in done.stdout and "Refused: the installed extension" in done.stdout
    assert not (home / ".cache").exists()


def test_the_behind_messages_in_the_docs_are_what_rekall_prints():
    from rekall.adapters.extension.ipc import behind_text
    from tests.pluginkit import REPO_ROOT
    from tests.support.conformance import without_what_rekall_knows as shape

    doc = (REPO_ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    shown = [line.strip() for line in doc.splitlines() if line.startswith("    the installed extension (")]
    assert len(shown) == 2
    for line, version in zip(shown, ("26.1201.3", "26.101.1"), strict=True):
        seen = int(line.split(" at base version ")[1].split(";")[0].split(",")[0])
        # What rekall knows grows with each generation: the guide shows it as "…".
        assert line == shape(behind_text(f"the installed extension ({version}) expects", p.COMPACT, seen))


def test_one_bundle_with_two_tables_that_disagree_is_named_and_left_to_the_owner(tmp_path):
    home = tmp_path / "home"
    extension = install_extension(home, "26.950.1", build_table("26.9xx"))
    (extension / "webview" / "assets").mkdir(parents=True)
    (extension / "webview" / "assets" / "index.js").write_text(minified(build_table("26.721")))
    chosen = choice.choose(env_for(home), write_cache=False)
    assert chosen.adapter is None and sorted(a.NAME for a in chosen.candidates) == ["26.721", "26.9xx"]
    row = check_extension(env_for(home))
    assert row.level == "AMBER" and "holds 2 method tables that disagree" in row.detail


# --- the generation schedule settled, as a job keeps it for the worker ----------------------


def test_a_settled_generation_is_reused_only_on_the_same_router_socket_and_never_from_half_a_record(tmp_path):
    import socket as sockets

    path = tmp_path / "router.sock"
    listener, restarted = sockets.socket(sockets.AF_UNIX), sockets.socket(sockets.AF_UNIX)
    try:
        listener.bind(str(path))
        settled = choice.Settled("26.721", "owner-1", str(path), choice.socket_identity(str(path)), "why")
        assert settled.socket is not None and choice.Settled.from_json(settled.to_json()) == settled
        assert settled.reusable(str(path), ipc.ADAPTERS).NAME == "26.721"
        assert settled.reusable(str(tmp_path / "other.sock"), ipc.ADAPTERS) is None
        # A generation with owner discovery is asked again: its answer costs nothing.
        assert settled._replace(generation="26.9xx").reusable(str(path), ipc.ADAPTERS) is None
        # A restarted router: a new socket at the same path (the old one still open, so a new inode).
        restarted.bind(str(tmp_path / "new.sock"))
        os.replace(tmp_path / "new.sock", path)
        assert settled.reusable(str(path), ipc.ADAPTERS) is None
    finally:
        listener.close()
        restarted.close()
    for broken in (None, [], {**settled.to_json(), "ownerId": None}, {**settled.to_json(), "generation": ""},
                   {**settled.to_json(), "socket": 7}, {k: v for k, v in settled.to_json().items() if k != "how"}):
        assert choice.Settled.from_json(broken) is None


@pytest.mark.anyio
async def test_known_limit_without_a_table_a_no_client_found_discovery_from_a_26_9xx_owner_reads_as_26_721(tmp_path):
    # docs/adapters.md, "a wrong discovery version": the real router would likely answer a wrong
    # discovery version this way. Step 2 cannot tell it from 26.721; the start-turn is refused.
    home = tmp_path / "home"
    home.mkdir()
    async with SimulatedOwner(generation="26.9xx") as sim:
        sim.fail_next(p.OWNER_DISCOVERY, "no-client-found")
        thread = await ExtensionIpc({**env_for(home), **sim.endpoint_env}).follow(sim.thread_id,
                                                                                 request_timeout_s=5)
        try:
            assert thread.session.generation == "26.721"
            assert (await thread.compact()).failure is None
            refused = (await thread.start_turn("go on", "job-1")).failure
            assert refused.code == "no-client-found" and refused.delivery == "not_delivered"
        finally:
            await thread.aclose()
        assert [len(sim.compact_requests), len(sim.start_turn_requests)] == [1, 0]
