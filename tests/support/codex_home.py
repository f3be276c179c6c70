"""An isolated ``CODEX_HOME`` whose ``config.toml`` points real Codex at a loopback model.

Real Codex reads everything it needs from ``$CODEX_HOME``: config, auth, sessions, locks.
A fresh private folder with this config runs threads, turns and compactions offline:

- the model provider is ``mock`` (Responses wire API on 127.0.0.1), with no ``env_key`` so no
  credentials are asked for, and retries off so a broken mock fails fast instead of stalling;
- update checks, analytics and feedback are off, so nothing else leaves the machine;
- ``approval_policy`` and ``sandbox_mode`` default to "never"/"read-only"; a test that wants
  approvals passes ``approval_policy="on-request"``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MOCK_MODEL = "mock-model"


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def render_config(mock_url: str, *, approval_policy: str = "never", sandbox_mode: str = "read-only",
                  extra_config: str = "") -> str:
    if not mock_url.startswith("http://127.0.0.1:"):
        raise ValueError(f"mock_url must be a loopback URL like http://127.0.0.1:PORT/v1; got {mock_url!r}")
    root = [
        f"model = {_toml_string(MOCK_MODEL)}",
        'model_provider = "mock"',
        f"approval_policy = {_toml_string(approval_policy)}",
        f"sandbox_mode = {_toml_string(sandbox_mode)}",
        "check_for_update_on_startup = false",
    ]
    tables = [
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[model_providers.mock]",
        'name = "rekall mock model"',
        f"base_url = {_toml_string(mock_url)}",
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
    ]
    # Root keys must precede every table, so ``extra_config`` (root keys and/or its own
    # tables) goes between the generated root keys and the generated tables.
    return "\n".join([*root, "", extra_config.strip(), "", *tables, ""])


def make_isolated_home(dir: Path, mock_url: str, extra_config: str = "", *,
                       approval_policy: str = "never", sandbox_mode: str = "read-only") -> Path:
    """Create ``dir`` (0700) with a ``config.toml`` (0600) for the mock provider; return ``dir``.

    ``extra_config`` is TOML added after the generated root keys and before the generated
    tables, so it may hold root keys (``model_context_window = 100000``) and tables
    (``[mcp_servers.rekall]``); it must not repeat a generated key. Approvals: Codex 0.171
    refuses ``"untrusted"``; use ``approval_policy="on-request"`` and have the mock ask for an
    escalated command (:func:`tests.support.mock_model.escalated_command`).
    """
    dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(dir, 0o700)
    config = dir / "config.toml"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(render_config(mock_url, approval_policy=approval_policy, sandbox_mode=sandbox_mode,
                                extra_config=extra_config))
    os.chmod(config, 0o600)
    return dir
