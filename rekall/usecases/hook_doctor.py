"""``rekall doctor``'s rows for the plugin's ``SessionStart(compact)`` hook: installed, enabled, trusted.

Codex runs a hook that is not managed only once the user trusted it (``/hooks``, which writes
``[hooks.state."<key>"] trusted_hash`` and, for a plugin's hook, ``trusted_content_hash`` into
``config.toml``); a hook whose handler or plugin changed since (an upgrade) is ``modified`` and
must be trusted again. Where an app-server answers on the shared control socket, its
``hooks/list`` says all of it. Otherwise the rows are read from the files: the installed plugin's
``hooks/hooks.json`` and ``config.toml``. The handler's hash is computed as Codex computes it (the
SHA-256 of its canonical JSON identity); the plugin contents' hash is Codex's own, so from the
files alone a changed plugin cannot be told apart from an unchanged one, and the row says so.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rekall.kernel.errors import RekallError
from rekall.kernel.environment import codex_home
from rekall.adapters.contract import Row

PLUGIN_ID = "rekall@rekall"
#: Codex's key for the plugin's hook: plugin, file, event, matcher group, handler.
HOOK_KEY = f"{PLUGIN_ID}:hooks/hooks.json:session_start:0:0"
_TRUST_FIX = "run `rekall setup` (or open /hooks in Codex and trust rekall's SessionStart hook once)"
_TRUST_AGAIN = "run `rekall setup` again (or trust it again in /hooks)"
_NAMES = ("session_hook_installed", "session_hook_enabled", "session_hook_trusted")
DOCTOR_TIMEOUT_S = 5.0


async def hook_rows(env: Mapping[str, str]) -> list[Row]:
    """The three rows, from ``hooks/list`` where an app-server answers, else from the files."""
    listed = await _listed(env)
    if listed is not None:
        return listing_rows(*listed)
    return file_rows(codex_home(env))


async def _listed(env: Mapping[str, str]) -> tuple[dict[str, Any] | None, str] | None:
    """The plugin's hook as the shared app-server's ``hooks/list`` shows it (``None`` inside when it
    lists none), and where it was asked; ``None`` when no app-server answers."""
    from rekall.adapters.app_server.client import open_shared_app_server

    try:
        async with asyncio.timeout(DOCTOR_TIMEOUT_S):
            async with open_shared_app_server(env, timeout_s=DOCTOR_TIMEOUT_S) as server:
                listing = await server.request("hooks/list", {"cwds": [str(codex_home(env))]})
                where = f"hooks/list on {server.socket.target}"
    except (TimeoutError, RekallError, OSError):
        return None
    except BaseException as exc:  # an exception group from the connection's task group
        from rekall.adapters.app_server.platform import unwrap

        if isinstance(unwrap(exc), (RekallError, OSError)):
            return None
        raise
    hooks = [hook for entry in (listing or {}).get("data", []) for hook in entry.get("hooks", [])]
    return next((hook for hook in hooks if hook.get("key") == HOOK_KEY), None), where


def listing_rows(hook: dict[str, Any] | None, where: str) -> list[Row]:
    if hook is None:
        return [_not_installed(where), *_skipped()]
    rows = [Row.green(_NAMES[0], f"{where}: {HOOK_KEY} from {hook.get('sourcePath')}")]
    rows.append(Row.green(_NAMES[1], f"{where}: enabled") if hook.get("enabled") is not False else
                Row("session_hook_enabled", "AMBER", f"{where}: the hook is turned off, so after a compaction no "
                    "continuation follows, the handoff reaches the model only where rekall can inject it",
                    "turn it on again in /hooks"))
    rows.append(_trust_row(str(hook.get("trustStatus")), where))
    return rows


def _trust_row(status: str, where: str) -> Row:
    if status in ("trusted", "managed"):
        return Row.green(_NAMES[2], f"{where}: {status}")
    if status in ("modified", "changed"):
        return Row("session_hook_trusted", "AMBER", f"{where}: {status}: the hook or the plugin changed since you "
                   "trusted it (an upgrade), so Codex does not run it", _TRUST_AGAIN)
    return Row("session_hook_trusted", "AMBER", f"{where}: {status}: Codex does not run it until you trust it",
               _TRUST_FIX)


def file_rows(home: Path) -> list[Row]:
    where = "from the files (no app-server answered)"
    installed = sorted((home / "plugins" / "cache" / "rekall" / "rekall").glob("*/hooks/hooks.json"))
    if not installed:
        return [_not_installed(where), *_skipped()]
    hooks_file = installed[-1]
    try:
        config = tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
        handler = _handler(json.loads(hooks_file.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        return [Row("session_hook_installed", "AMBER", f"{where}: {hooks_file} or config.toml cannot be read ({exc})",
                    "check the files, or start Codex and run rekall doctor again"), *_skipped()]
    rows = [Row.green(_NAMES[0], f"{where}: {hooks_file}")]
    state = config.get("hooks", {}).get("state", {}).get(HOOK_KEY, {})
    off = [why for why, is_off in (
        (f"[plugins.{json.dumps(PLUGIN_ID)}] enabled = false", config.get("plugins", {}).get(PLUGIN_ID, {})
         .get("enabled") is False),
        ("[features] hooks = false", config.get("features", {}).get("hooks") is False),
        (f"[hooks.state.{json.dumps(HOOK_KEY)}] enabled = false", state.get("enabled") is False)) if is_off]
    rows.append(Row("session_hook_enabled", "AMBER", f"{where}: turned off by {'; '.join(off)}",
                    "remove that setting, or turn the hook on in /hooks") if off
                else Row.green(_NAMES[1], f"{where}: nothing in config.toml turns it off"))
    trusted = state.get("trusted_hash")
    if not trusted:
        rows.append(Row("session_hook_trusted", "AMBER", f"{where}: untrusted: config.toml records no trusted_hash "
                        f"for {HOOK_KEY}, so Codex does not run it", _TRUST_FIX))
    elif trusted != handler_hash(handler):
        rows.append(Row("session_hook_trusted", "AMBER", f"{where}: changed: the trusted hash is not the installed "
                        "hook's (an upgrade changed it), so Codex does not run it", _TRUST_AGAIN))
    else:
        rows.append(Row.green(_NAMES[2], f"{where}: trusted for the installed handler; whether the plugin's contents "
                                         "changed since only Codex can tell (/hooks shows it)"))
    return rows


def _handler(hooks: dict[str, Any]) -> dict[str, Any]:
    (group, *_) = [g for g in hooks["hooks"]["SessionStart"] if g.get("matcher") == "compact"]
    return {"matcher": group["matcher"], **group["hooks"][0]}


def handler_hash(handler: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the hook's identity as Codex hashes it: its canonical JSON (sorted keys,
    no spaces), with Codex's defaults (``timeout`` 600, ``async`` false) filled in."""
    command = {"async": bool(handler.get("async", False)), "command": handler["command"],
               "timeout": int(handler.get("timeout", 600)), "type": handler.get("type", "command")}
    if handler.get("statusMessage") is not None:
        command["statusMessage"] = handler["statusMessage"]
    identity: dict[str, Any] = {"event_name": "session_start", "hooks": [command]}
    if handler.get("matcher") is not None:
        identity["matcher"] = handler["matcher"]
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


#: Where Codex reads the enterprise's requirements on this system (cloud and MDM requirements are not files).
SYSTEM_REQUIREMENTS = Path("/etc/codex/requirements.toml")


def managed_hooks_only(path: Path = SYSTEM_REQUIREMENTS) -> str | None:
    """Why Codex runs no plugin hook here (``allow_managed_hooks_only = true`` in ``path``), else ``None``."""
    try:
        requirements = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"{path} cannot be read ({exc}), so whether it allows only managed hooks is unknown"
    if requirements.get("allow_managed_hooks_only") is True:
        return (f"{path} sets allow_managed_hooks_only = true, so Codex runs only managed hooks and never the "
                "plugin's; ask the administrator to allow it, or to install rekall's hook as a managed one")
    return None


def managed_row(path: Path = SYSTEM_REQUIREMENTS) -> Row:
    """``rekall doctor``'s row for ``allowManagedHooksOnly``."""
    why = managed_hooks_only(path)
    if why is None:
        return Row.green("session_hook_not_managed_only", f"{path}: no allow_managed_hooks_only (cloud and MDM "
                                                          "requirements are not read)")
    return Row("session_hook_not_managed_only", "AMBER", why, "without the hook no checkpoint is delivered after "
               "Codex's own compactions, and on the VS Code extension a job's handoff only by its continuation")


def checkpoint_plan_row(env: Mapping[str, str]) -> Row:
    """``rekall doctor``'s row for ``REKALL_CHECKPOINT_PLAN`` (read by the hook, in Codex's environment)."""
    from rekall.kernel.settings import CHECKPOINT_PLAN

    try:
        shown = CHECKPOINT_PLAN.shown(env)
    except RekallError as exc:
        return Row.failed("checkpoint_plan", exc)
    said = "comes along with" if CHECKPOINT_PLAN.read(env) else "does not come along with"
    return Row.green("checkpoint_plan", f"{shown}: the thread's latest plan (update_plan) {said} its checkpoint "
                                        "after a compaction (the hook reads the variable in Codex's environment)")


def _not_installed(where: str) -> Row:
    return Row("session_hook_installed", "AMBER", f"{where}: {HOOK_KEY} is not installed, so on the VS Code extension "
               "a handoff reaches the model only in a continuation turn",
               "run `rekall setup` (it installs the plugin and trusts its hook)")


def _skipped() -> list[Row]:
    return [Row.not_checked(name, "the hook is not installed", "fix the session_hook_installed row first")
            for name in _NAMES[1:]]
