"""``rekall setup``: after the install, one command registers rekall with Codex and trusts its hook.

Each step says what it did, or that it was already done; a second run changes nothing (it
checks before it acts). The steps:

1. **Register.** Where the Codex CLI has ``codex plugin``, the plugin route: ``codex plugin
   marketplace add <marketplace>`` (the folder this installation carries: :func:`marketplace_root`)
   and ``codex plugin add rekall@rekall``. Otherwise the hand route: ``codex mcp add rekall --
   rekall mcp``, and the variables the plugin forwards (its ``.mcp.json`` ``env_vars``: CODEX_HOME
   and rekall's own, which an MCP server under the daemon would not see otherwise).
2. **Trust the hook** (plugin route): show what it runs, ask (``--yes`` answers), and record its
   hashes as ``/hooks`` does, through the app-server's ``config/batchWrite``
   (:mod:`rekall.usecases.config_server`); then ``hooks/list`` must say ``trusted``.
3. **Full auto** (``--full-auto`` only): rekall's acting tools run without an approval prompt,
   also under ``approval_policy = "never"``: ``approval_mode = "approve"`` for each acting tool in
   the route's table of :mod:`rekall.usecases.full_auto` (the plugin's ``.mcp.json`` is never written).
4. **Say what to reload**, and end with ``doctor``'s verdict.

``--remove`` undoes each of these that is present (the trust, the approval settings, the plugin
and its marketplace, or a hand registration that runs ``rekall mcp``), through the same requests
and commands, so that Codex's configuration still loads. A hand registration named ``rekall``
that runs something else is the user's: setup names it (it shadows the plugin's server) and
leaves it alone.

After an upgrade of rekall the plugin in Codex's cache is the old release's until ``rekall setup``
runs again: it then installs the new version and, its hook having changed, asks to trust it again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

import rekall
from rekall import __version__
from rekall.adapters.app_server.client import SharedAppServer
from rekall.kernel.environment import absolute_codex_home
from rekall.kernel.errors import CodexError, RekallError, UsageError
from rekall.adapters.app_server.platform import RESTART_DAEMON
from rekall.usecases.config_server import config_server, daemon_runs, key, write
from rekall.usecases.full_auto import ACTING_TOOLS, SERVER
from rekall.usecases.hook_doctor import HOOK_KEY, PLUGIN_ID

MARKETPLACE = PLUGIN_ID.partition("@")[2]
#: Hook trust statuses under which Codex runs the hook.
RUNS = ("trusted", "managed")
CODEX_TIMEOUT_S = 120.0


def marketplace_root() -> Path:
    """The folder holding ``.agents/plugins/marketplace.json`` and ``plugins/rekall``: inside the
    installed package (the wheel carries it), or the source checkout's root."""
    package = Path(rekall.__file__).resolve().parent
    for root in (package / "marketplace", package.parent):
        if (root / ".agents" / "plugins" / "marketplace.json").is_file():
            return root
    raise RekallError(f"this installation of rekall carries no plugin (looked in {package / 'marketplace'})",
                      hint="reinstall rekall from its wheel or its source folder")


def forwarded_variables(root: Path) -> list[str]:
    """The variables the plugin's MCP server is given (one list: the plugin's ``.mcp.json``)."""
    spec = json.loads((root / "plugins" / "rekall" / ".mcp.json").read_text(encoding="utf-8"))
    return list(spec["mcpServers"][SERVER]["env_vars"])


@attrs.frozen
class Options:
    yes: bool = False
    full_auto: bool = False
    remove: bool = False


class Codex:
    """The user's ``codex`` command, run with this process's environment."""

    def __init__(self, env: Mapping[str, str]) -> None:
        found = shutil.which("codex", path=env.get("PATH"))
        if found is None:
            raise CodexError("no `codex` command on PATH", hint="install the Codex CLI (npm install -g @openai/codex), "
                                                                "then run rekall setup again")
        self.path, self.env = found, dict(env)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run([self.path, *args], env=self.env, capture_output=True, text=True,
                                  timeout=CODEX_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CodexError(f"`codex {' '.join(args)}` did not run: {exc}", hint="check the Codex CLI") from exc
        if check and done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip())[-400:]
            raise CodexError(f"`codex {' '.join(args)}` failed ({done.returncode}): {said}",
                             hint="fix what Codex says, then run rekall setup again")
        return done

    def json(self, *args: str) -> Any:
        out = self.run(*args, "--json").stdout
        try:
            return json.loads(out)
        except ValueError as exc:
            raise CodexError(f"`codex {' '.join(args)} --json` printed no JSON: {out[:200]!r}",
                             hint="check the Codex CLI's version") from exc

    def has_plugins(self) -> bool:
        return self.run("plugin", "--help", check=False).returncode == 0


class Setup:
    """The steps, each saying what it did (``say``) and asking through ``ask``."""

    def __init__(self, options: Options, env: Mapping[str, str], say: Callable[[str], None],
                 ask: Callable[[str], bool]) -> None:
        self.options, self.env, self.say, self.ask = options, env, say, ask
        self.codex = Codex(env)
        self.home = absolute_codex_home(env)
        self.root = marketplace_root()
        self.changed = False

    def done(self, what: str) -> None:
        self.changed = True
        self.say(f"done: {what}")

    def already(self, what: str) -> None:
        self.say(f"already done: {what}")

    def config(self) -> dict[str, Any]:
        """``config.toml`` as it is now (read only: every write goes through Codex)."""
        try:
            return tomllib.loads((self.home / "config.toml").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise CodexError(f"{self.home / 'config.toml'} cannot be read: {exc}",
                             hint="fix it (`codex mcp list` names the problem), then run rekall setup again") from exc

    # --- setting up -------------------------------------------------------------------------

    async def install(self) -> None:
        plugins = self.codex.has_plugins()
        self.say(f"Codex: {self.codex.path}; CODEX_HOME {self.home}; "
                 + ("registering the plugin" if plugins else "no `codex plugin` here: registering the MCP server "
                                                             "by hand"))
        if plugins:
            self.add_marketplace()
            self.add_plugin()
            self.note_hand_registration()
        else:
            self.add_server()
        async with config_server(self.codex.path, self.env) as through:
            self.say(f"writing Codex's configuration through {through.described}")
            if plugins:
                await self.trust_hook(through.server)
            else:
                await self.forward_variables(through.server)
                self.say("skipped: the SessionStart hook comes with the plugin only; without it a handoff reaches "
                         "the model in a continuation or by injection")
            if self.options.full_auto:
                await self.approve_tools(through.server, plugins)
        self.say_reload()

    def add_marketplace(self) -> None:
        listed = self.codex.json("plugin", "marketplace", "list")["marketplaces"]
        ours = next((m for m in listed if m.get("name") == MARKETPLACE), None)
        if ours is not None and Path(ours.get("root", "")) == self.root:
            return self.already(f"marketplace {MARKETPLACE} from {self.root}")
        if ours is not None:  # an earlier install's folder (a checkout, another environment)
            self.codex.run("plugin", "marketplace", "remove", MARKETPLACE)
        self.codex.run("plugin", "marketplace", "add", str(self.root))
        self.done(f"marketplace {MARKETPLACE} added from {self.root}")

    def add_plugin(self) -> None:
        installed = self.codex.json("plugin", "list")["installed"]
        ours = next((p for p in installed if p.get("pluginId") == PLUGIN_ID), None)
        if ours is not None and ours.get("enabled") and ours.get("version") == __version__:
            return self.already(f"plugin {PLUGIN_ID} {__version__} installed and enabled")
        self.codex.run("plugin", "add", PLUGIN_ID)
        self.done(f"plugin {PLUGIN_ID} {__version__} installed"
                  + (f" (was {ours.get('version')})" if ours is not None else ""))

    def note_hand_registration(self) -> None:
        """A hand registration of the same name shadows the plugin's server (``codex mcp list``
        shows it, not the plugin's): said, never removed, since it is the user's."""
        hand = self.config().get("mcp_servers", {}).get(SERVER)
        if isinstance(hand, Mapping) and "command" in hand:
            self.say(f"note: config.toml also registers an MCP server {SERVER} by hand ({hand['command']}); Codex "
                     f"runs that one, not the plugin's: remove it with `codex mcp remove {SERVER}` and run rekall "
                     "setup again")

    def add_server(self) -> None:
        if SERVER in self.config().get("mcp_servers", {}):
            return self.already(f"MCP server {SERVER} registered in config.toml")
        command = shutil.which("rekall", path=self.env.get("PATH")) or "rekall"
        self.codex.run("mcp", "add", SERVER, "--", command, "mcp")
        self.done(f"MCP server {SERVER} registered: {command} mcp")

    async def forward_variables(self, server: SharedAppServer) -> None:
        wanted = forwarded_variables(self.root)
        if self.config().get("mcp_servers", {}).get(SERVER, {}).get("env_vars") == wanted:
            return self.already(f"the MCP server is given {', '.join(wanted[:2])} and rekall's variables")
        await write(server, [{"keyPath": key("mcp_servers", SERVER, "env_vars"), "mergeStrategy": "replace",
                              "value": wanted}])
        self.done(f"the MCP server is given {', '.join(wanted[:2])} and rekall's variables (env_vars)")

    async def trust_hook(self, server: SharedAppServer) -> None:
        hook = await self.listed_hook(server)
        if hook is None:
            raise CodexError(f"Codex does not list rekall's hook {HOOK_KEY} after the plugin's install",
                             hint=f"if a daemon runs, {RESTART_DAEMON}; then run rekall setup again")
        if hook.get("trustStatus") in RUNS:
            return self.already(f"hook {HOOK_KEY} {hook['trustStatus']}")
        self.say(f"rekall's hook ({hook.get('trustStatus')}): on SessionStart, matcher {hook.get('matcher')!r}, "
                 f"Codex runs `{hook.get('command')}` (timeout {hook.get('timeoutSec')} s), from {hook.get('sourcePath')}")
        if not (self.options.yes or self.ask("Trust it, as /hooks would?")):
            self.say("skipped: the hook stays untrusted, so Codex does not run it (run rekall setup again to trust it)")
            return
        handler, _, contents = str(hook["currentHash"]).partition("/")
        state = {"trusted_hash": handler, **({"trusted_content_hash": contents} if contents else {})}
        await write(server, [{"keyPath": key("hooks", "state", HOOK_KEY), "mergeStrategy": "replace",
                              "value": state}])
        after = await self.listed_hook(server)
        if after is None or after.get("trustStatus") not in RUNS:
            raise CodexError(f"hooks/list says {after and after.get('trustStatus')} after the trust was written",
                             hint="open /hooks in Codex and trust rekall's SessionStart hook there")
        self.done(f"hook {HOOK_KEY} trusted (hooks/list: {after['trustStatus']})")

    async def listed_hook(self, server: SharedAppServer) -> dict[str, Any] | None:
        listing = await server.request("hooks/list", {"cwds": [str(self.home)]})
        return next((h for entry in listing.get("data", []) for h in entry.get("hooks", [])
                     if h.get("key") == HOOK_KEY), None)

    async def approve_tools(self, server: SharedAppServer, plugins: bool) -> None:
        settings = self.approvals(plugins)
        config = self.config()
        if all(_get(config, path) == "approve" for path in settings):
            return self.already("full auto: " + self.approvals_words(plugins))
        await write(server, [{"keyPath": key(*path), "mergeStrategy": "replace", "value": "approve"}
                             for path in settings])
        self.done("full auto: " + self.approvals_words(plugins))

    @staticmethod
    def approvals(plugins: bool) -> list[tuple[str, ...]]:
        """Where the approval settings go on each route (one place for setup and remove; the tables of
        :mod:`rekall.usecases.full_auto`, which the README gives)."""
        table = ("plugins", PLUGIN_ID, "mcp_servers", SERVER) if plugins else ("mcp_servers", SERVER)
        return [(*table, "tools", tool, "approval_mode") for tool in ACTING_TOOLS]

    @staticmethod
    def approvals_words(plugins: bool) -> str:
        return f"{' and '.join(ACTING_TOOLS)} run without asking, also under approval_policy never"

    def say_reload(self) -> None:
        if not self.changed:
            return self.say("nothing to reload")
        daemon = (f"the app-server daemon runs: {RESTART_DAEMON}" if daemon_runs(self.env)
                  else "no app-server daemon runs, so the next `codex` starts with it")
        self.say(f"reload: in VS Code, run `Developer: Reload Window`; {daemon}")

    # --- removing ----------------------------------------------------------------------------

    async def uninstall(self) -> None:
        config = self.config()
        plugins = self.codex.has_plugins()
        settings = [*self.approvals(True), *self.approvals(False), ("hooks", "state", HOOK_KEY)]
        present = [path for path in settings if _get(config, path) is not None]
        if not present:
            self.already("no hook trust or approval setting of rekall in config.toml")
        elif not (self.options.yes or self.ask("Remove rekall's hook trust and approval settings from config.toml?")):
            return self.say("nothing removed")
        else:
            async with config_server(self.codex.path, self.env) as through:
                self.say(f"writing Codex's configuration through {through.described}")
                await write(through.server, [{"keyPath": key(*path), "mergeStrategy": "replace", "value": None}
                                             for path in present])
            self.done("removed " + ", ".join(key(*path) for path in present))
        if plugins:
            self.remove_plugin()
        hand = self.config().get("mcp_servers", {}).get(SERVER)
        if isinstance(hand, Mapping) and "command" in hand:
            if Path(str(hand["command"])).name == "rekall" and hand.get("args") == ["mcp"]:
                self.codex.run("mcp", "remove", SERVER)
                self.done(f"MCP server {SERVER} removed")
            else:
                self.say(f"left alone: the MCP server {SERVER} in config.toml runs {hand['command']}, not `rekall mcp`")
        self.say_reload()

    def remove_plugin(self) -> None:
        installed = self.codex.json("plugin", "list")["installed"]
        if any(p.get("pluginId") == PLUGIN_ID for p in installed):
            self.codex.run("plugin", "remove", PLUGIN_ID)
            self.done(f"plugin {PLUGIN_ID} removed (and its cache)")
        else:
            self.already(f"plugin {PLUGIN_ID} not installed")
        listed = self.codex.json("plugin", "marketplace", "list")["marketplaces"]
        if any(m.get("name") == MARKETPLACE for m in listed):
            self.codex.run("plugin", "marketplace", "remove", MARKETPLACE)
            self.done(f"marketplace {MARKETPLACE} removed")
        else:
            self.already(f"marketplace {MARKETPLACE} not configured")


def _get(config: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = config
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


async def run_setup(options: Options, say: Callable[[str], None], ask: Callable[[str], bool],
                    env: Mapping[str, str] | None = None) -> None:
    """Set rekall up (or, with ``remove``, take it away) for the ``CODEX_HOME`` of ``env``."""
    setup = Setup(options, os.environ if env is None else env, say, ask)
    if options.remove:
        await setup.uninstall()
    else:
        await setup.install()


def refuse_without_an_answer(options: Options, interactive: bool) -> None:
    if not (options.yes or interactive):
        raise UsageError("setup asks before it trusts rekall's hook or removes settings, and no one can answer here",
                         hint="run it in a terminal, or pass --yes to answer yes")


__all__ = ["Options", "marketplace_root", "refuse_without_an_answer", "run_setup"]
