"""The Codex plugin files: valid JSON in the shape Codex reads, and cross-references that hold.

``tests/codex/test_registration.py`` installs the same plugin with the real ``codex plugin``
commands; these checks are the fast, offline half.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from rekall.surfaces.cli import build_parser, cmd_mcp
from rekall.surfaces.cli_entry import answer_from_views
from tests.pluginkit import (
    MARKETPLACE_FILE,
    PLUGIN_NAME,
    REPO_ROOT,
    front_matter,
    manifest,
    manifest_path,
    marketplace,
    marketplace_entry,
    plugin_root,
    read_json,
)

KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
INSTALL_POLICIES = {"NOT_AVAILABLE", "AVAILABLE", "INSTALLED_BY_DEFAULT"}
AUTH_POLICIES = {"ON_INSTALL", "ON_USE"}
PATH_FIELDS = {"skills": "directory", "mcpServers": "file"}


def is_inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def test_the_marketplace_lists_rekall_as_a_local_plugin_with_policy_and_category():
    market = marketplace()
    assert KEBAB.match(market["name"])
    assert market["interface"]["displayName"].strip()
    names = [p["name"] for p in market["plugins"]]
    assert len(names) == len(set(names)) and PLUGIN_NAME in names
    entry = marketplace_entry()
    assert entry["source"]["source"] == "local"
    assert entry["source"]["path"].startswith("./") and ".." not in Path(entry["source"]["path"]).parts
    assert entry["policy"]["installation"] in INSTALL_POLICIES
    assert entry["policy"]["authentication"] in AUTH_POLICIES
    assert entry["category"].strip()


def test_the_marketplace_entry_points_at_a_plugin_folder_of_the_same_name():
    root = plugin_root()
    assert is_inside(root, REPO_ROOT) and root != REPO_ROOT, "the plugin needs a folder of its own"
    assert (root / ".codex-plugin" / "plugin.json").is_file()
    assert root.name == marketplace_entry()["name"] == manifest()["name"] == PLUGIN_NAME
    assert MARKETPLACE_FILE.relative_to(REPO_ROOT) == Path(".agents/plugins/marketplace.json")


def test_the_manifest_has_the_fields_the_plugin_catalog_shows():
    data = manifest()
    assert KEBAB.match(data["name"]) and len(data["name"]) <= 64
    assert SEMVER.match(data["version"])
    assert data["description"].strip() and data["license"].strip()
    interface = data["interface"]
    for field in ("displayName", "shortDescription", "longDescription", "developerName", "category"):
        assert isinstance(interface[field], str) and interface[field].strip(), field
    prompts = interface["defaultPrompt"]
    assert 1 <= len(prompts) <= 3 and all(0 < len(p) <= 128 for p in prompts)


@pytest.mark.parametrize("field", sorted(PATH_FIELDS))
def test_manifest_paths_are_relative_and_resolve_inside_the_plugin(field: str):
    value = manifest()[field]
    assert value.startswith("./") and ".." not in Path(value).parts
    target = manifest_path(field)
    assert is_inside(target, plugin_root())
    assert target.is_dir() if PATH_FIELDS[field] == "directory" else target.is_file()


def test_the_mcp_config_starts_the_installed_rekall_command_with_the_mcp_verb():
    servers = read_json(manifest_path("mcpServers"))["mcpServers"]
    assert list(servers) == [PLUGIN_NAME]
    server = servers[PLUGIN_NAME]
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts[server["command"]] == "rekall.surfaces.cli_entry:main"  # which hands every verb but two to the CLI
    assert answer_from_views(server["args"], {}) is None
    assert build_parser().parse_args(server["args"]).handler is cmd_mcp


def test_the_plugin_ships_no_tool_approval_so_that_codex_keeps_asking_until_the_user_chooses_full_auto():
    (server,) = read_json(manifest_path("mcpServers"))["mcpServers"].values()
    assert not [key for key in server if "approval" in key or key in ("tools", "enabled_tools")], server


def test_every_skill_folder_has_a_skill_file_named_after_it():
    folders = [p for p in manifest_path("skills").iterdir() if p.is_dir()]
    assert [p.name for p in folders] == [PLUGIN_NAME]
    for folder in folders:
        meta, _ = front_matter(folder / "SKILL.md")
        assert meta["name"] == folder.name


def test_the_plugin_folder_holds_only_files_the_manifest_refers_to():
    # Codex copies the whole folder into CODEX_HOME on install: nothing else may lie there.
    # hooks/hooks.json is where Codex looks for a plugin's hooks when the manifest names none.
    root = plugin_root()
    referenced = {root / ".codex-plugin" / "plugin.json", manifest_path("mcpServers"), root / "hooks" / "hooks.json"}
    skills = manifest_path("skills")
    present = {p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    stray = {p for p in present - referenced if not is_inside(p, skills)}
    assert not stray, f"files Codex would copy for no reason: {sorted(map(str, stray))}"


def test_the_plugin_forwards_the_variables_rekall_reads_and_never_the_thread():
    # Codex gives MCP servers a short environment allowlist; `env_vars` forwards these when set.
    forwarded = read_json(manifest_path("mcpServers"))["mcpServers"][PLUGIN_NAME]["env_vars"]
    sources = "\n".join(p.read_text(encoding="utf-8") for p in (REPO_ROOT / "rekall").rglob("*.py"))
    assert len(forwarded) == len(set(forwarded))
    assert [name for name in forwarded if f'"{name}"' not in sources] == []
    assert {"CODEX_HOME", "REKALL_JOBS_DIR"} <= set(forwarded)
    # One server serves every thread of the app-server: the thread always comes from the agent.
    assert "CODEX_THREAD_ID" not in forwarded


def test_the_plugins_only_hook_is_the_sessionstart_compact_hook_running_the_rekall_hook_verb():
    hooks = read_json(plugin_root() / "hooks" / "hooks.json")["hooks"]
    assert list(hooks) == ["SessionStart"]
    (group,) = hooks["SessionStart"]
    assert group["matcher"] == "compact"
    (handler,) = group["hooks"]
    assert handler["type"] == "command" and 0 < handler["timeout"] <= 30
    words = handler["command"].split()
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts[words[0]] == "rekall.surfaces.cli_entry:main" and words[1:] == ["hook", "session-start"]
    assert build_parser().parse_args(words[1:]).event == "session-start"  # the CLI knows the verb too
