"""The ``config.toml`` lines that let rekall's acting tools run under ``approval_policy = "never"``.

``schedule_compaction`` and ``cancel_compaction`` are annotated ``destructiveHint: true`` on
purpose (a compaction drops history for good; a cancel ends a job), so Codex asks before each
call, and under ``never`` declines it ("MCP tool call requires approval, but approval policy is
never"). Letting them run is the user's choice, written in the user's ``config.toml``; the plugin
never ships it (its ``.mcp.json`` has no approval), or every plugin user would lose the prompt.

Where the lines go depends on how rekall was installed (checked with Codex 0.171.0,
tests/codex/test_full_auto.py):

- a hand registration owns its ``[mcp_servers.rekall]`` table, tool policy included;
- a plugin owns the server's launch command, and the user's policy for it lives under
  ``[plugins."rekall@rekall".mcp_servers.rekall]`` (Codex's ``PluginMcpServerConfig``: enabled,
  default_tools_approval_mode, enabled_tools, disabled_tools, tools; no transport). A
  ``[mcp_servers.rekall...]`` table there would declare a second server with no command, and
  Codex then refuses its whole configuration ("invalid transport in `mcp_servers.rekall`").
"""

from __future__ import annotations

from typing import Literal

from rekall.usecases.hook_doctor import PLUGIN_ID

#: The server's name in both routes (the plugin's id, ``plugin@marketplace``, is hook_doctor's).
SERVER = "rekall"
#: The tools Codex asks about: the read-only ones run without asking anyway.
ACTING_TOOLS = ("schedule_compaction", "cancel_compaction")

Route = Literal["plugin", "hand"]
ROUTES: tuple[Route, ...] = ("plugin", "hand")


def server_table(route: Route) -> str:
    """The TOML table (dotted, unbracketed) that holds the server's tool policy on ``route``."""
    if route == "plugin":
        return f'plugins."{PLUGIN_ID}".mcp_servers.{SERVER}'
    return f"mcp_servers.{SERVER}"


def full_auto_toml(route: Route) -> str:
    """What to add to ``$CODEX_HOME/config.toml`` so that the acting tools run without asking."""
    return "\n".join(f'[{server_table(route)}.tools.{tool}]\napproval_mode = "approve"\n' for tool in ACTING_TOOLS)
