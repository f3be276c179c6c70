"""``rekall probe --json`` against the simulated owner: everything the Node probe reports
(reference §6.7), plus the endpoint, the peer check, the adapter, the observed method versions,
the headroom now, and the public schema checks with whether they came from the cache.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rekall.sim import protocol as p
from rekall.sim import start_sim_in_thread
from tests.codexkit import real_codex
from tests.usecases.test_doctor import EXTENSION_VERSION, fake_extension, wrapping

SCHEMA_CHECKS = ["item_started.params", "item_started.context_compaction", "item_completed.params",
                 "item_completed.context_compaction", "thread_compact_start.params", "thread_token_usage.fields",
                 "turn_start.text_input"]
#: The probe fields of the Node version (reference §6.7).
NODE_FIELDS = {"threadId", "connected", "ownerId", "runtimeStatus", "completedCompactions", "contextTokens",
               "modelContextWindow", "compatibility"}


def probe(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CONTEXT_COMPACT_", "CODEX_"))}
    return subprocess.run([sys.executable, "-m", "rekall", "probe", *args], env={**clean, **env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=60)


def probe_json(env: Mapping[str, str], thread: str) -> dict[str, Any]:
    done = probe(env, thread, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_probe_reports_the_owner_the_connection_and_the_headroom_now() -> None:
    with start_sim_in_thread() as sim:
        thread, owner, socket_path, env = sim.thread_id, sim.owner_id, sim.socket_path, sim.env
        result = probe_json(env, thread)
        assert sim.compact_requests == [] and sim.start_turn_requests == []  # read-only

    assert NODE_FIELDS <= result.keys()
    assert result["threadId"] == thread and result["connected"] is True and result["ownerId"] == owner
    assert result["endpoint"] == {"kind": "test", "path": socket_path, "note": "from REKALL_PIPE",
                                  "peerCheck": f"uid {os.geteuid()} matches ours"}
    assert result["adapter"] == "26.9xx"
    # As the simulated build's own table says (follower requests carry hostId: base + 1).
    table = p.TABLES[p.DEFAULT_GENERATION]
    for method, version in result["methodVersions"].items():
        assert version == p.accepted_version(table, method, {"hostId": "local"}), method
    assert {p.COMPACT, p.START_TURN, p.OWNER_DISCOVERY} <= result["methodVersions"].keys()
    assert result["observedVersions"] == {p.STATE_CHANGED: [table[p.STATE_CHANGED]]}
    assert ("pinned by REKALL_GENERATION" if "REKALL_GENERATION" in env else
            "the owner answered thread-owner-discovery") in result["generationReason"]
    assert (result["runtimeStatus"], result["idle"], result["busyReason"]) == ("idle", True, None)
    assert result["latestUserTurnStopped"] is False and result["completedCompactions"] == 1
    assert (result["contextTokens"], result["modelContextWindow"]) == (90000, 100000)
    assert result["headroom"] == {"contextTokens": 90000, "modelContextWindow": 100000, "usedFraction": 0.9}
    # A test endpoint has no extension behind it: no schema check, no extension version (as in Node).
    assert result["compatibility"] == {"runtime": {"status": "compatible", "completionField": "completed",
                                                   "completedCompactionItems": 1},
                                       "publicSchema": {"status": "not_checked", "reason": "custom_test_transport"}}
    assert result["extensionVersion"] is None


def test_probe_of_a_busy_thread_without_telemetry_says_why_and_reports_no_headroom() -> None:
    with start_sim_in_thread(runtime="active", tokens=None, window=None) as sim:
        result = probe_json(sim.env, sim.thread_id)
    assert (result["runtimeStatus"], result["idle"], result["busyReason"]) == ("active", False, "runtime_active")
    assert result["contextTokens"] is None and result["modelContextWindow"] is None
    assert result["headroom"] == {"contextTokens": None, "modelContextWindow": None, "usedFraction": None}


def test_probe_for_people_shows_the_owner_and_the_window_used() -> None:
    with start_sim_in_thread() as sim:
        done = probe(sim.env, sim.thread_id)
        owner = sim.owner_id
    assert done.returncode == 0, done.stderr
    assert owner in done.stdout and "90.0%" in done.stdout and "not checked (custom_test_transport)" in done.stdout


def test_probe_of_a_thread_nobody_owns_fails_with_no_owner_and_a_next_step() -> None:
    stranger = "0199a5c2-0000-7000-8000-0000000000aa"
    with start_sim_in_thread() as sim:
        done = probe(sim.env, stranger, "--json")
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "no_owner" and stranger in error["message"] and "never guess" in error["hint"]


def test_an_unknown_thread_is_refused_after_the_short_owner_answer_wait_not_the_snapshot_timeout() -> None:
    # No installed extension: the generation is undecided, discovery answers no-client-found, and
    # only a generation without discovery could still own the thread; its owner answers a follow at once.
    from rekall.adapters.extension.platform import OWNER_ANSWER_S

    stranger = "0199a5c2-0000-7000-8000-0000000000ab"
    with start_sim_in_thread() as sim:
        done = probe(sim.env, stranger, "--json")
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "no_owner"
    assert f"no client answered following within {OWNER_ANSWER_S:g} s" in error["message"]


@pytest.mark.codex
def test_probe_through_the_real_endpoint_lists_the_schema_checks_and_caches_them(tmp_path: Path) -> None:
    real = real_codex()
    codex = fake_extension(tmp_path / "extensions", wrapping(real))
    with start_sim_in_thread(codex_home=True) as sim:
        env = {**sim.env, "REKALL_CODEX_BINARY": str(codex)}
        first, second = probe_json(env, sim.thread_id), probe_json(env, sim.thread_id)
        socket_path = sim.socket_path

    assert first["endpoint"] == {"kind": "primary", "path": socket_path, "note": "",
                                 "peerCheck": f"uid {os.geteuid()} matches ours"}
    schema = first["compatibility"]["publicSchema"]
    assert schema["status"] == "compatible"
    assert [c["name"] for c in schema["checks"]] == SCHEMA_CHECKS
    assert all(c["passed"] and c["file"].endswith(".json") and c["pointer"].startswith("/") for c in schema["checks"])
    assert schema["binary"]["version"] == "0.171.0" and schema["binaryPath"] == str(codex)
    assert first["extensionVersion"] == schema["extensionVersion"] == EXTENSION_VERSION
    assert schema["fromCache"] is False

    cached = second["compatibility"]["publicSchema"]
    assert cached["fromCache"] is True
    assert cached["checks"] == schema["checks"] and cached["generatedAt"] == schema["generatedAt"]


@pytest.mark.parametrize(("runtime", "shown", "reason"), [
    (None, "null", "runtime_null"),
    ("notLoaded", "notLoaded", "runtime_notLoaded"),
    ("systemError", "systemError", "runtime_systemError"),
])
def test_probe_shows_a_runtime_status_that_is_not_idle_without_calling_it_a_layout_problem(runtime, shown, reason):
    with start_sim_in_thread(runtime=runtime) as sim:
        result = probe_json(sim.env, sim.thread_id)
        people = probe(sim.env, sim.thread_id)
    assert (result["runtimeStatus"], result["idle"], result["busyReason"]) == (shown, False, reason)
    assert result["compatibility"]["runtime"]["status"] == "compatible"
    assert re.search(rf"^\s*runtime\s+{shown}\s*$", people.stdout, re.MULTILINE)
    if runtime == "systemError":
        assert "reload the VS Code window" in result["runtimeHint"] and "reload the VS Code window" in people.stdout
    else:
        assert "runtimeHint" not in result


# --- misleading messages, corrected -------------------------------------------------------------


@pytest.mark.anyio
async def test_a_probe_whose_request_goes_unanswered_says_that_nothing_changed_not_that_the_outcome_is_unknown(tmp_path):
    from rekall.usecases import service
    from rekall.kernel.errors import RekallError
    from rekall.sim import SimulatedOwner

    async with SimulatedOwner() as sim:
        sim.silence_next("thread-owner-discovery")
        env = {**sim.env, "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "CODEX_HOME": str(tmp_path),
               "REKALL_REQUEST_TIMEOUT_S": "0.2"}
        with pytest.raises(RekallError) as caught:
            await service.probe(sim.thread_id, env=env)
    text = str(caught.value)
    assert "outcome unknown" not in text and "the probe only reads, so nothing changed" in text
    assert "no response within 2.2 s" in text  # REKALL_REQUEST_TIMEOUT_S plus the response margin


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_test_endpoint_that_is_not_a_socket_is_named_as_such(tmp_path, kind):
    target = tmp_path / "not-a-socket"
    target.mkdir() if kind == "directory" else target.write_text("")
    done = probe({"REKALL_PIPE": str(target), "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "CODEX_HOME": str(tmp_path)},
                 "0199a5c2-2222-4000-8000-000000000002")
    assert done.returncode == 1
    assert f"REKALL_PIPE points at {target}, which is a" in done.stderr and "not a socket" in done.stderr
    assert "VS Code" not in done.stderr and "unset it" in done.stderr


def test_a_codex_home_that_is_a_file_is_named_as_the_thing_to_fix(tmp_path):
    home = tmp_path / "codex-home-file"
    home.write_text("")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CONTEXT_COMPACT_", "CODEX_"))}
    done = subprocess.run([sys.executable, "-m", "rekall", "status", "0199a5c2-2222-4000-8000-000000000002"],
                          env={**clean, "CODEX_HOME": str(home)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "(CODEX_HOME) is not a directory" in done.stderr
    assert "REKALL_JOBS_DIR" not in done.stderr and "point CODEX_HOME" in done.stderr
