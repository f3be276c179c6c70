"""``rekall setup`` with the REAL Codex CLI, in a fresh ``HOME`` and ``CODEX_HOME``.

Nothing of Codex is mocked but the model. The ``rekall`` on PATH is this environment's, behind a
launcher that carries the test's account-home seam (tests/support/account_home), since Codex starts
the plugin's ``rekall mcp`` and hook with a short environment of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rekall.store import JobStore
from rekall.store.delivery import DeliveryKey, holder
from tests.codex.daemonkit import peer_client, start_daemon, stop_daemon
from tests.codex.test_app_server_delivery import handoff_copies, injection_marker, new_conversation, wait_terminal
from tests.codex.test_app_server_job import JOB_S, on_thread, run_turn
from tests.mcpkit import HANDOFF, wait_for_worker_exit
from tests.support.account_home import account_env
from tests.support.codex_home import make_isolated_home
from tests.support.mock_model import MockModel

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

HOOK_KEY = "rekall@rekall:hooks/hooks.json:session_start:0:0"
REKALL = Path(sys.executable).with_name("rekall")
SETUP_STEPS = ("marketplace rekall", "plugin rekall@rekall", f"hook {HOOK_KEY}", "full auto:")


@pytest.fixture
def model() -> Iterator[MockModel]:
    with MockModel() as mock:
        yield mock


@pytest.fixture
def fresh(tmp_path_factory: pytest.TempPathFactory, model: MockModel, codex_binary: Path,
          monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a user with a fresh HOME and CODEX_HOME, ``codex`` and ``rekall`` on PATH."""
    root = tmp_path_factory.mktemp("setup")  # short: the daemon's control socket must fit in sun_path
    home = make_isolated_home(root / "c", model.base_url, approval_policy="never")
    (root / "h").mkdir(mode=0o700)
    tools = root / "bin"
    tools.mkdir()
    seam = " ".join(f"{name}={json.dumps(value)}" for name, value in account_env().items())
    (tools / "rekall").write_text(f'#!/bin/sh\nexport {seam}\nexec "{REKALL}" "$@"\n' if seam
                                  else f'#!/bin/sh\nexec "{REKALL}" "$@"\n')
    (tools / "rekall").chmod(0o755)
    path = os.pathsep.join([str(tools), str(codex_binary.parent), "/usr/bin", "/bin"])
    env = {"PATH": path, "HOME": str(root / "h"), "CODEX_HOME": str(home), "REKALL_INJECT_HANDOFF": "off",
           "REKALL_IDLE_STABLE_MS": "100", "TMPDIR": os.environ.get("TMPDIR", "/tmp"), "COLUMNS": "200"}
    for name in [n for n in os.environ if n.startswith(("REKALL_", "CONTEXT_COMPACT_"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():  # the daemon started below inherits them, as a user's would
        monkeypatch.setenv(name, value)
    return env


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=300)


def setup(env: dict[str, str], *args: str) -> list[str]:
    done = run(env, "rekall", "setup", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def listed(env: dict[str, str], *args: str) -> str:
    done = run(env, "codex", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def snapshot(codex_home: Path) -> dict[str, str]:
    """config.toml and the plugin cache, byte for byte (and each file's and folder's mtime)."""
    files = [codex_home / "config.toml", *sorted((codex_home / "plugins").rglob("*"))]
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir") + f" {p.stat().st_mtime_ns}"
            for p in files}


async def hooks_listed(socket: Path, codex_home: Path) -> dict[str, Any]:
    async with peer_client(socket) as user:
        listing = await user.request("hooks/list", {"cwds": [str(codex_home)]})
    (hook,) = [h for entry in listing["data"] for h in entry["hooks"] if h["key"] == HOOK_KEY]
    return hook


async def test_setup_in_a_fresh_home_makes_a_whole_job_run_under_never_and_remove_undoes_it(
        fresh: dict[str, str], model: MockModel, codex_binary: Path) -> None:
    home = Path(fresh["CODEX_HOME"])
    untouched = (home / "config.toml").read_text()
    first = setup(fresh, "--yes", "--full-auto")
    assert [line for line in first if line.startswith("done: ")] == [
        f"done: marketplace rekall added from {Path(__file__).resolve().parents[2]}",
        "done: plugin rekall@rekall 0.1.0 installed", f"done: hook {HOOK_KEY} trusted (hooks/list: trusted)",
        "done: full auto: schedule_compaction and cancel_compaction run without asking, also under approval_policy "
        "never"], first
    assert "writing Codex's configuration through a private app-server (no daemon runs)" in first
    assert any(line.startswith("rekall's hook (untrusted): on SessionStart") and "`rekall hook session-start`" in line
               for line in first)
    assert first[-2].startswith("verdict: ") and first[-1].startswith("next: ")
    assert "rekall@rekall  installed, enabled" in listed(fresh, "plugin", "list")
    assert "rekall" in listed(fresh, "mcp", "list")

    assert "no app-server daemon runs, so the next `codex` starts with it" in first[-3]

    daemon = start_daemon(codex_binary, home)
    try:
        before = snapshot(home)
        second = setup(fresh, "--yes", "--full-auto")  # now through the running daemon
        assert snapshot(home) == before
        assert [line for line in second if line.startswith(("done: ", "already done: "))] == [
            f"already done: {step}" + rest for step, rest in zip(SETUP_STEPS, (
                f" from {Path(__file__).resolve().parents[2]}", " 0.1.0 installed and enabled", " trusted",
                " schedule_compaction and cancel_compaction run without asking, also under approval_policy never"))], second
        assert "nothing to reload" in second
        assert any(line.startswith("writing Codex's configuration through the running app-server on ")
                   for line in second), second
        hook = await hooks_listed(daemon.socket_path, home)
        assert (hook["enabled"], hook["trustStatus"]) == (True, "trusted"), hook
        async with peer_client(daemon.socket_path) as user:
            thread_id = await new_conversation(user, model)  # approvalPolicy never
            model.queue_mcp_call("rekall", "schedule_compaction", {"threadId": thread_id,
                                                                   "handoff": {**HANDOFF, "resume": False}})
            await run_turn(user, thread_id, "Compact this conversation now.")
            jobs = home / "tools" / "rekall" / "jobs"  # the default: the plugin's server was given CODEX_HOME
            scheduled = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)}).read_status(thread_id)
            status = await wait_terminal(jobs, thread_id, scheduled.jobId)
            await wait_for_worker_exit(status["pid"])
            start = len(user.messages)
            await run_turn(user, thread_id, "What were we doing?")
            runs = [m["params"]["run"] for m in user.messages[start:] if on_thread("hook/completed", thread_id)(m)]
        assert not model.requests_containing("MCP tool call requires approval")
        assert status["state"] == "completed" and status["handoffDelivery"] == "not_delivered", status  # injection off
        after = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)}).read_status(thread_id)
        assert after.handoffDelivery == "hook", after
        assert [(r["eventName"], r["status"]) for r in runs] == [("sessionStart", "completed")]
        (delivered,) = model.requests_containing(injection_marker(status["jobId"]))
        assert handoff_copies(delivered) == 1
        claim = holder(jobs, DeliveryKey(thread_id, job=status["jobId"]))
        assert claim["route"] == "hook"

        doctor = run(fresh, "rekall", "doctor")
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert doctor.stdout.splitlines()[0] == ("verdict: rekall can serve terminal sessions on the shared "
                                                 "app-server (not the VS Code extension)")

        removed = setup(fresh, "--remove", "--yes")  # while the daemon runs: through it
        assert any(line.startswith("writing Codex's configuration through the running app-server on ")
                   for line in removed), removed
        assert "`codex app-server daemon stop`, then start any `codex`" in removed[-3]
    finally:
        stop_daemon(daemon)
    assert "rekall" not in listed(fresh, "plugin", "list")
    assert "rekall" not in listed(fresh, "mcp", "list")  # and it loads
    assert pruned(tomllib.loads((home / "config.toml").read_text())) == tomllib.loads(untouched)


def pruned(table: dict[str, Any]) -> dict[str, Any]:
    """``table`` without empty tables (what Codex's writer leaves behind a removed key)."""
    kept = {k: pruned(v) if isinstance(v, dict) else v for k, v in table.items()}
    return {k: v for k, v in kept.items() if v != {}}


async def test_without_codex_plugin_setup_registers_the_server_by_hand_forwarding_the_plugins_variables(
        fresh: dict[str, str], codex_binary: Path, tmp_path: Path) -> None:
    """A Codex CLI without ``codex plugin``: a launcher that refuses that subcommand, as an older release does."""
    older = tmp_path / "older"
    older.mkdir()
    (older / "codex").write_text(f'#!/bin/sh\nif [ "$1" = plugin ]; then echo "error: unrecognized subcommand '
                                 f"'plugin'\" >&2; exit 2; fi\nexec \"{codex_binary}\" \"$@\"\n")
    (older / "codex").chmod(0o755)
    env = {**fresh, "PATH": f"{older}{os.pathsep}{fresh['PATH']}"}
    home = Path(env["CODEX_HOME"])

    first = setup(env, "--yes", "--full-auto")
    before = snapshot(home)
    second = setup(env, "--yes", "--full-auto")

    assert any("registering the MCP server by hand" in line for line in first)
    server = json.loads(listed(env, "mcp", "get", "rekall", "--json"))
    spec = json.loads((Path(__file__).resolve().parents[2] / "plugins" / "rekall" / ".mcp.json").read_text())
    assert server["transport"]["env_vars"] == spec["mcpServers"]["rekall"]["env_vars"]
    assert server["transport"]["args"] == ["mcp"]
    config = (home / "config.toml").read_text()
    for tool in ("schedule_compaction", "cancel_compaction"):
        assert f'[mcp_servers.rekall.tools.{tool}]\napproval_mode = "approve"' in config
    assert snapshot(home) == before and not [line for line in second if line.startswith("done: ")], second

    setup(env, "--remove", "--yes")
    assert "rekall" not in listed(env, "mcp", "list")


def test_after_an_upgrade_setup_installs_the_new_plugin_and_trusts_the_changed_hook_again(
        fresh: dict[str, str]) -> None:
    home = Path(fresh["CODEX_HOME"])
    setup(fresh, "--yes")
    # What an older release left: its copy in Codex's cache, and the trust of its hook.
    cache = home / "plugins" / "cache" / "rekall" / "rekall"
    (cache / "0.1.0").rename(cache / "0.0.9")
    manifest = cache / "0.0.9" / ".codex-plugin" / "plugin.json"
    manifest.write_text(manifest.read_text().replace('"version": "0.1.0"', '"version": "0.0.9"'))
    config = home / "config.toml"
    config.write_text(re.sub(r'trusted_hash = "sha256:[0-9a-f]+"', f'trusted_hash = "sha256:{"0" * 64}"',
                             config.read_text()))

    upgraded = setup(fresh, "--yes")

    assert "done: plugin rekall@rekall 0.1.0 installed (was 0.0.9)" in upgraded, upgraded
    assert any(line.startswith("rekall's hook (modified)") for line in upgraded), upgraded
    assert f"done: hook {HOOK_KEY} trusted (hooks/list: trusted)" in upgraded
    assert sorted(p.name for p in cache.iterdir()) == ["0.1.0"]


def test_a_hand_registration_of_the_same_name_is_named_as_shadowing_the_plugin_and_left_alone(
        fresh: dict[str, str]) -> None:
    run(fresh, "codex", "mcp", "add", "rekall", "--", "/bin/echo", "mcp")
    said = setup(fresh, "--yes")
    assert ("note: config.toml also registers an MCP server rekall by hand (/bin/echo); Codex runs that one, not "
            "the plugin's: remove it with `codex mcp remove rekall` and run rekall setup again") in said, said
    assert "/bin/echo" in listed(fresh, "mcp", "list")  # what Codex runs: the user's, untouched
    removed = setup(fresh, "--remove", "--yes")
    assert "left alone: the MCP server rekall in config.toml runs /bin/echo, not `rekall mcp`" in removed
    assert "/bin/echo" in listed(fresh, "mcp", "list") and "rekall@rekall" not in listed(fresh, "plugin", "list")
