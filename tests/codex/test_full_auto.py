"""Full auto on the real Codex: each install route's config from :mod:`rekall.usecases.full_auto`.

The plugin is installed as users install it (``codex plugin marketplace add`` + ``codex plugin
add``) into the engine's own ``CODEX_HOME``; the engine (a real ``codex app-server`` behind the
codex-backed simulated owner, the model a loopback mock) starts the plugin's ``rekall mcp`` from
``PATH``. The agent (the mock model) calls ``schedule_compaction`` in its turn. The hand route's
agent runs are in tests/codex/test_end_to_end.py (the same config, from the same function).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rekall.sim import protocol as p
from rekall.sim.owner import pin_for
from rekall.usecases.full_auto import full_auto_toml
from tests.codex.rekallkit import SERVER, codex_cli
from tests.codex.test_end_to_end import JOB_S, run_user_turn
from tests.codex.test_registration import REKALL_COMMAND, install_plugin
from tests.mcpkit import HANDOFF, job_env, rekall_mcp, wait_for_worker_exit
from tests.support.account_home import account_env
from tests.support.appserver import app_server_env
from tests.support.codex_backend import CodexSimHandle, start_codex_sim_in_thread
from tests.support.codex_home import make_isolated_home

pytestmark = [pytest.mark.codex, pytest.mark.anyio]

REFUSED_UNDER_NEVER = "MCP tool call requires approval, but approval policy is never"


def installed_plugin_home(codex_binary: Path, home: Path) -> str:
    """Install the plugin into ``home``; return the tables ``codex plugin`` wrote in its config.toml
    (the engine rewrites config.toml, so they are carried over)."""
    make_isolated_home(home, "http://127.0.0.1:9/v1")  # rewritten when the engine starts
    before = (home / "config.toml").read_text()
    install_plugin(codex_binary, home)
    # The test seam that keeps rekall's locks out of the real account home reaches the plugin's
    # server like the plugin's own variables do: forwarded by name (in the installed copy only).
    for mcp_json in (home / "plugins" / "cache").glob("rekall/rekall/*/.mcp.json"):
        declared = json.loads(mcp_json.read_text())
        declared["mcpServers"][SERVER]["env_vars"] += sorted(account_env())
        mcp_json.write_text(json.dumps(declared))
    return (home / "config.toml").read_text()[len(before):]


def mcp_list(codex_binary: Path, home: Path) -> list[dict]:
    return json.loads(codex_cli(codex_binary, home, "mcp", "list", "--json").stdout)


def test_each_routes_full_auto_config_loads_and_the_hand_table_breaks_a_plugin_install(
        codex_binary: Path, private_dir: Path) -> None:
    plugin_home = private_dir / "plugin-home"
    plugin_tables = installed_plugin_home(codex_binary, plugin_home)
    config = plugin_home / "config.toml"
    loaded_before = mcp_list(codex_binary, plugin_home)
    config.write_text(config.read_text() + "\n" + full_auto_toml("plugin"))
    loaded_after = mcp_list(codex_binary, plugin_home)

    hand_home = make_isolated_home(private_dir / "hand-home", "http://127.0.0.1:9/v1")
    codex_cli(codex_binary, hand_home, "mcp", "add", SERVER, "--", str(REKALL_COMMAND), "mcp")
    hand_before = mcp_list(codex_binary, hand_home)
    (hand_home / "config.toml").write_text((hand_home / "config.toml").read_text() + "\n" + full_auto_toml("hand"))
    hand_after = mcp_list(codex_binary, hand_home)

    # What the README warns against: the hand table on a plugin install breaks every codex command.
    config.write_text(config.read_text() + "\n" + full_auto_toml("hand"))
    broken = subprocess.run([str(codex_binary), "mcp", "list", "--json"], capture_output=True, text=True,
                            timeout=60, env=app_server_env(plugin_home), cwd=plugin_home)

    assert '[plugins."rekall@rekall"]' in plugin_tables
    for listing in (loaded_before, loaded_after, hand_before, hand_after):
        assert [server["name"] for server in listing] == [SERVER], listing
    assert broken.returncode != 0 and "invalid transport" in broken.stderr, broken.stderr


@contextlib.contextmanager
def plugin_engine(codex_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, full_auto: bool,
                  approval_policy: str) -> Iterator[tuple[CodexSimHandle, Path]]:
    """The codex-backed owner whose engine runs the installed plugin's ``rekall mcp`` (this checkout's
    command on ``PATH``; its settings forwarded by the plugin's ``env_vars``), its server ready."""
    socket_dir = Path(tempfile.mkdtemp(prefix="rk-auto-", dir="/tmp"))  # short: a socket path has ~100 bytes
    socket_path, jobs = socket_dir / "ipc.sock", tmp_path / "jobs"
    plugin_tables = installed_plugin_home(codex_binary, tmp_path / "engine" / "codex-home")
    monkeypatch.setenv("PATH", f"{REKALL_COMMAND.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for name, value in {"REKALL_PIPE": str(socket_path), **pin_for(p.DEFAULT_GENERATION),
                        "REKALL_JOBS_DIR": str(jobs), "REKALL_IDLE_STABLE_MS": "50"}.items():
        monkeypatch.setenv(name, value)
    extra = plugin_tables + ("\n" + full_auto_toml("plugin") if full_auto else "")
    try:
        with start_codex_sim_in_thread(codex_binary, tmp_path / "engine", socket_path=socket_path,
                                       extra_config=extra, approval_policy=approval_policy) as sim:
            assert sim.wait_for_mcp_server(SERVER, timeout=JOB_S)["status"] == "ready"
            yield sim, jobs
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


async def test_on_the_plugin_route_with_its_full_auto_config_an_agent_under_never_schedules_a_compaction_that_completes(
        codex_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with plugin_engine(codex_binary, tmp_path, monkeypatch, full_auto=True, approval_policy="never") as (sim, jobs):
        sim.mock.queue_mcp_call(SERVER, "schedule_compaction", {"threadId": sim.thread_id,
                                                                "handoff": {**HANDOFF, "resume": False}})
        run_user_turn(sim, "Compact this conversation now.")
        async with rekall_mcp(job_env(sim.env, jobs), sim.thread_id) as rekall:
            done = await rekall.wait_terminal(JOB_S)
            await wait_for_worker_exit(done["pid"])
        # The other acting tool runs without asking too (the job has ended: nothing left to cancel).
        sim.mock.queue_mcp_call(SERVER, "cancel_compaction", {"threadId": sim.thread_id, "jobId": done["jobId"]})
        run_user_turn(sim, "Cancel that compaction.")
        refused = sim.mock.requests_containing(REFUSED_UNDER_NEVER)
        pending = sim.pending_request_ids()
        calls = [(item["tool"], item["status"]) for turn in sim.state()["turns"] for item in turn["items"]
                 if item["type"] == "mcpToolCall"]
        compacts = len(sim.compact_requests)

    assert (refused, pending) == ([], [])  # never refused, never asked
    assert done["state"] == "completed" and compacts == 1, done
    assert calls == [("schedule_compaction", "completed"), ("cancel_compaction", "completed")]
    assert sim.mock.requests_containing("nothing to cancel")  # the agent got rekall's answer


async def test_on_the_plugin_route_without_that_config_codex_asks_under_on_request_and_refuses_under_never(
        codex_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    call = {"threadId": "", "handoff": {**HANDOFF, "resume": False}}
    with plugin_engine(codex_binary, tmp_path / "asks", monkeypatch, full_auto=False,
                       approval_policy="on-request") as (sim, jobs):
        sim.mock.queue_mcp_call(SERVER, "schedule_compaction", {**call, "threadId": sim.thread_id})
        turn_id = sim.user_turn("Compact this conversation now.")["id"]
        asked = sim.allow_mcp_call(timeout=JOB_S)
        async with rekall_mcp(job_env(sim.env, jobs), sim.thread_id) as rekall:  # allowed: it runs to its end
            allowed = await rekall.wait_terminal(JOB_S)
            await wait_for_worker_exit(allowed["pid"])
    with plugin_engine(codex_binary, tmp_path / "never", monkeypatch, full_auto=False,
                       approval_policy="never") as (sim, never_jobs):
        sim.mock.queue_mcp_call(SERVER, "schedule_compaction", {**call, "threadId": sim.thread_id})
        run_user_turn(sim, "Compact this conversation now.")
        refused = sim.mock.requests_containing(REFUSED_UNDER_NEVER)

    assert turn_id and asked.params["serverName"] == SERVER and '"schedule_compaction"' in asked.params["message"]
    assert allowed["state"] == "completed", allowed
    assert len(refused) == 1 and not never_jobs.exists()
