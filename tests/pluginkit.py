"""The Codex plugin in this repository, read the way Codex reads it.

The repository is a Codex marketplace: ``.agents/plugins/marketplace.json`` lists the plugin,
whose folder ``plugins/rekall/`` holds ``.codex-plugin/plugin.json``, ``.mcp.json`` and
``skills/rekall/SKILL.md``. The plugin has a folder of its own because ``codex plugin add``
copies the whole plugin folder into ``CODEX_HOME``: a plugin at the repository root would
copy the checkout with it (``.git``, ``.venv``, anything lying around).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import yaml
from mcp import Client

from rekall.surfaces.mcp_server import build_server

REPO_ROOT = Path(__file__).resolve().parents[1]
MARKETPLACE_FILE = REPO_ROOT / ".agents" / "plugins" / "marketplace.json"
PLUGIN_NAME = "rekall"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def marketplace() -> dict[str, Any]:
    return read_json(MARKETPLACE_FILE)


def marketplace_entry(name: str = PLUGIN_NAME) -> dict[str, Any]:
    (entry,) = [p for p in marketplace()["plugins"] if p["name"] == name]
    return entry


def plugin_root() -> Path:
    """The folder the marketplace entry points at (relative to the marketplace root)."""
    return (REPO_ROOT / marketplace_entry()["source"]["path"]).resolve()


def manifest() -> dict[str, Any]:
    return read_json(plugin_root() / ".codex-plugin" / "plugin.json")


def manifest_path(field: str) -> Path:
    """Where a manifest path field (``skills``, ``mcpServers``) points."""
    return (plugin_root() / manifest()[field]).resolve()


def skill_file(name: str = PLUGIN_NAME) -> Path:
    return manifest_path("skills") / name / "SKILL.md"


def front_matter(path: Path) -> tuple[dict[str, Any], str]:
    """A SKILL.md's YAML front matter and its body."""
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        raise ValueError(f"{path} does not start with a front matter block")
    header, separator, body = text[4:].partition("\n---\n")
    if not separator:
        raise ValueError(f"{path}: the front matter block is not closed")
    return yaml.safe_load(header), body


@cache
def listed_tools() -> dict[str, dict[str, Any]]:
    """rekall's tools as its MCP server lists them (wire names: ``inputSchema``, ``outputSchema``)."""

    async def listing() -> dict[str, dict[str, Any]]:
        async with Client(build_server()) as client:
            return {t.name: t.model_dump(by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools}

    # On a thread of its own, so that async tests (inside their event loop) may call it too.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, listing).result()
