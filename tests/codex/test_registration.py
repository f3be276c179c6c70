"""Registering rekall with the real Codex CLI, both ways the README documents.

- Manual: ``codex mcp add rekall -- rekall mcp``; ``codex mcp list`` then shows it, and an
  app-server of that ``CODEX_HOME`` starts it and sees its four tools.
- Plugin: ``codex plugin marketplace add <this repository>`` and ``codex plugin add
  rekall@rekall``; Codex copies exactly the plugin folder, starts the plugin's ``rekall mcp``
  (forwarding the variables its ``.mcp.json`` names) and lists the plugin's skill.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall import __version__
from tests.support.appserver import open_app_server
from tests.codex.rekallkit import SERVER, codex_cli, ready_server_status
from tests.jobkit import new_thread, open_store, schedule
from tests.pluginkit import REPO_ROOT, front_matter, listed_tools, manifest, marketplace, plugin_root, skill_file
from tests.support.codex_home import make_isolated_home
from tests.support.mock_model import MockModel

pytestmark = pytest.mark.codex

#: The ``rekall`` command this environment installed (``pip install -e .`` in scripts/test).
REKALL_COMMAND = Path(sys.executable).with_name("rekall.exe" if sys.platform == "win32" else "rekall")


@pytest.fixture
def home(private_dir: Path, mock_model: MockModel) -> Path:
    return make_isolated_home(private_dir / "registration-home", mock_model.base_url)


@pytest.fixture
def registered(codex_binary: Path, home: Path) -> Path:
    """``home`` after the README's manual step, with this environment's ``rekall`` command."""
    assert REKALL_COMMAND.is_file(), f"{REKALL_COMMAND} is missing: install rekall with pip install -e ."
    codex_cli(codex_binary, home, "mcp", "add", SERVER, "--", str(REKALL_COMMAND), "mcp")
    return home


def plugin_id() -> str:
    return f"{manifest()['name']}@{marketplace()['name']}"


def install_plugin(codex_binary: Path, home: Path) -> dict[str, Any]:
    added = json.loads(codex_cli(codex_binary, home, "plugin", "marketplace", "add", str(REPO_ROOT), "--json").stdout)
    assert added["marketplaceName"] == marketplace()["name"] and Path(added["installedRoot"]) == REPO_ROOT
    available = json.loads(codex_cli(codex_binary, home, "plugin", "list", "--available", "--json").stdout)
    (offered,) = [p for p in available["available"] if p["pluginId"] == plugin_id()]
    assert offered["version"] == __version__ and Path(offered["source"]["path"]) == plugin_root()
    return json.loads(codex_cli(codex_binary, home, "plugin", "add", plugin_id(), "--json").stdout)


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def test_codex_mcp_add_registers_rekall_and_codex_mcp_list_shows_it(codex_binary: Path, registered: Path) -> None:
    table = codex_cli(codex_binary, registered, "mcp", "list").stdout
    header, *rows = [line.split() for line in table.splitlines() if line.strip()]
    assert header[:3] == ["Name", "Command", "Args"] and len(rows) == 1
    assert rows[0][:3] == [SERVER, str(REKALL_COMMAND), "mcp"] and "enabled" in rows[0]
    (listed,) = json.loads(codex_cli(codex_binary, registered, "mcp", "list", "--json").stdout)
    assert listed["name"] == SERVER and listed["enabled"] is True
    assert (listed["transport"]["type"], listed["transport"]["command"], listed["transport"]["args"]) == (
        "stdio", str(REKALL_COMMAND), ["mcp"])
    print(f"codex mcp list:\n{table}")


@pytest.mark.anyio
async def test_the_registered_command_starts_and_codex_sees_its_four_tools(
        codex_binary: Path, registered: Path) -> None:
    with anyio.fail_after(60):
        async with open_app_server(codex_binary, registered) as server:
            thread_id = (await server.start_thread())["thread"]["id"]
            status = await ready_server_status(server, thread_id)
    assert status["runtimeStatus"] == "connected" and status["pluginId"] is None
    assert sorted(status["tools"]) == sorted(listed_tools())


def test_codex_installs_exactly_the_plugin_folder_from_this_repository(codex_binary: Path, home: Path) -> None:
    installed = install_plugin(codex_binary, home)
    assert installed["pluginId"] == plugin_id() and installed["version"] == __version__
    root = Path(installed["installedPath"])
    assert root.is_relative_to(home) and files_under(root) == files_under(plugin_root())
    listing = json.loads(codex_cli(codex_binary, home, "plugin", "list", "--json").stdout)
    (entry,) = [p for p in listing["installed"] if p["pluginId"] == plugin_id()]
    assert entry["installed"] is True and entry["enabled"] is True


@pytest.mark.anyio
async def test_the_installed_plugin_runs_rekall_with_forwarded_settings_and_offers_its_skill(
        codex_binary: Path, home: Path, private_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await anyio.to_thread.run_sync(install_plugin, codex_binary, home)
    # The plugin runs `rekall` from PATH, as an installed tool would; REKALL_JOBS_DIR reaches it
    # only through the env_vars its .mcp.json forwards. A job waiting there proves both.
    monkeypatch.setenv("PATH", f"{REKALL_COMMAND.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    jobs = private_dir / "plugin-jobs"
    monkeypatch.setenv("REKALL_JOBS_DIR", str(jobs))
    job_thread = new_thread()
    job = schedule(open_store(jobs), job_thread)
    skill_meta, _ = front_matter(skill_file())

    with anyio.fail_after(60):
        async with open_app_server(codex_binary, home) as server:
            thread_id = (await server.start_thread())["thread"]["id"]
            status = await ready_server_status(server, thread_id)
            result = await server.request("mcpServer/tool/call", {
                "threadId": thread_id, "server": SERVER, "tool": "compaction_status",
                "arguments": {"threadId": job_thread}})
            skills = await server.request("skills/list", {"cwds": [str(home)], "forceReload": True})
    assert status["pluginId"] == plugin_id() and status["runtimeStatus"] == "connected"
    assert sorted(status["tools"]) == sorted(listed_tools())
    assert not result.get("isError") and result["structuredContent"]["jobId"] == job.job_id
    assert result["structuredContent"]["state"] == "scheduled"
    plugin_skills = [s for entry in skills["data"] for s in entry["skills"] if s.get("pluginId") == plugin_id()]
    assert [(s["description"], s["enabled"]) for s in plugin_skills] == [(skill_meta["description"], True)]
    assert skill_meta["name"] in plugin_skills[0]["name"]
    assert not [e for entry in skills["data"] for e in entry["errors"] if "rekall" in e["path"]]
