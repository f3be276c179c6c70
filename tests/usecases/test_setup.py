"""``rekall setup``'s parts that need no Codex: the refusal without an answer, the key paths it
writes, the plugin folder it registers (tests/codex/test_setup.py runs it with the real Codex)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rekall.usecases.config_server import key
from rekall.usecases.setup import forwarded_variables, marketplace_root
from tests.pluginkit import REPO_ROOT


def test_without_a_terminal_or_yes_setup_refuses_before_touching_anything(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "rekall", "setup"], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60, env={"PATH": "", "CODEX_HOME": str(tmp_path / "c"),
                                                      "HOME": str(tmp_path)})
    assert done.returncode == 2 and done.stdout == ""
    assert "no one can answer here" in done.stderr and "pass --yes" in done.stderr
    assert not (tmp_path / "c").exists()


def test_without_codex_on_path_setup_says_how_to_get_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "rekall", "setup", "--yes"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "", "CODEX_HOME": str(tmp_path / "c"), "HOME": str(tmp_path)})
    assert done.returncode == 1 and "no `codex` command on PATH" in done.stderr
    assert "npm install -g @openai/codex" in done.stderr


def test_a_key_path_quotes_the_parts_that_hold_dots_or_signs() -> None:
    assert key("hooks", "state", "rekall@rekall:hooks/hooks.json:session_start:0:0") == \
        'hooks.state."rekall@rekall:hooks/hooks.json:session_start:0:0"'
    assert key("plugins", "rekall@rekall", "mcp_servers", "rekall", "default_tools_approval_mode") == \
        'plugins."rekall@rekall".mcp_servers.rekall.default_tools_approval_mode'


def test_a_checkout_registers_its_own_marketplace_and_forwards_the_plugins_variables() -> None:
    assert marketplace_root() == REPO_ROOT  # an editable install: the wheel's copy is tests/test_packaging.py's
    assert "CODEX_HOME" in forwarded_variables(REPO_ROOT) and "REKALL_JOBS_DIR" in forwarded_variables(REPO_ROOT)
