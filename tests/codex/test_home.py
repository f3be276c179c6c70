"""The isolated CODEX_HOME written for the mock provider."""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path

import pytest

from tests.support.codex_home import make_isolated_home

URL = "http://127.0.0.1:4321/v1"


def config(home: Path) -> dict:
    return tomllib.loads((home / "config.toml").read_text())


def test_the_config_points_codex_at_the_mock_provider_and_stays_offline(tmp_path: Path) -> None:
    home = make_isolated_home(tmp_path / "home", URL)
    parsed = config(home)
    assert (parsed["model_provider"], parsed["approval_policy"], parsed["sandbox_mode"]) == ("mock", "never", "read-only")
    provider = parsed["model_providers"]["mock"]
    assert (provider["base_url"], provider["wire_api"]) == (URL, "responses")
    assert provider["request_max_retries"] == provider["stream_max_retries"] == 0
    assert "env_key" not in provider  # no credentials are ever asked for
    assert parsed["check_for_update_on_startup"] is False
    assert parsed["analytics"] == {"enabled": False} and parsed["feedback"] == {"enabled": False}


def test_the_home_and_its_config_are_private(tmp_path: Path) -> None:
    home = make_isolated_home(tmp_path / "a" / "home", URL)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "config.toml").stat().st_mode) == 0o600


def test_extra_root_keys_and_tables_survive_in_valid_toml(tmp_path: Path) -> None:
    extra = 'model_context_window = 100000\n\n[mcp_servers.rekall]\ncommand = "rekall"\nargs = ["mcp"]\n'
    parsed = config(make_isolated_home(tmp_path / "home", URL, extra, approval_policy="on-request"))
    assert parsed["model_context_window"] == 100000 and parsed["approval_policy"] == "on-request"
    assert parsed["mcp_servers"]["rekall"] == {"command": "rekall", "args": ["mcp"]}
    assert parsed["model_providers"]["mock"]["base_url"] == URL


def test_rewriting_a_home_replaces_its_config(tmp_path: Path) -> None:
    make_isolated_home(tmp_path / "home", URL)
    other = "http://127.0.0.1:9999/v1"
    assert config(make_isolated_home(tmp_path / "home", other))["model_providers"]["mock"]["base_url"] == other


@pytest.mark.parametrize("url", ["http://example.com/v1", "https://127.0.0.1:1/v1", "http://0.0.0.0:1/v1"])
def test_a_non_loopback_model_url_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        make_isolated_home(tmp_path / "home", url)
