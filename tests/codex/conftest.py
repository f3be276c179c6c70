"""Fixtures for tests that run the real Codex binary (marked ``codex``).

The binary comes from ``REKALL_TEST_CODEX`` (exported by scripts/test) or the
scripts/install-codex cache. Where neither exists the tests are skipped, and the skip reason
says where rekall looked and how to install it; in CI they fail instead (tests/codexkit.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from rekall.codex.schema import generated_schema_dir
from tests.codex.daemonkit import Daemon, rekall_mcp_toml, start_daemon, stop_daemon, trusted_project_toml
from tests.codex.tmuxkit import Tmux
from tests.codexkit import real_codex
from tests.support.codex_home import make_isolated_home
from tests.support.mock_model import MockModel


@pytest.fixture(scope="session")
def codex_binary() -> Path:
    return real_codex()


@pytest.fixture(scope="session")
def real_schema_dir(codex_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real binary's generated schema, generated once per session (read-only by convention)."""
    target = tmp_path_factory.mktemp("real-schema") / "schema"
    with generated_schema_dir(codex_binary, timeout_s=60) as generated:
        shutil.copytree(generated, target)
    return target


@pytest.fixture
def schema_copy(real_schema_dir: Path, tmp_path: Path) -> Iterator[Path]:
    """A private, mutable copy of the real schema for drift tests."""
    copy = tmp_path / "schema"
    shutil.copytree(real_schema_dir, copy)
    yield copy


@pytest.fixture
def mock_model() -> Iterator[MockModel]:
    with MockModel() as model:
        yield model


@pytest.fixture
def codex_home(mock_model: MockModel, private_dir: Path) -> Path:
    """An isolated CODEX_HOME pointing at ``mock_model``; approvals on request."""
    return make_isolated_home(private_dir / "codex-home", mock_model.base_url, approval_policy="on-request")


@pytest.fixture(scope="session")
def daemon_model() -> Iterator[MockModel]:
    """The loopback model of the session's shared daemon (shared: match requests by marker)."""
    with MockModel() as model:
        yield model


@pytest.fixture(scope="session")
def app_server_daemon(codex_binary: Path, daemon_model: MockModel,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """ONE real ``codex app-server daemon`` per test session, in an isolated CODEX_HOME.

    Its ``config.toml`` registers this checkout's ``rekall mcp`` (jobs in ``Daemon.jobs_dir``),
    so an agent on the daemon can schedule its own compaction, and trusts ``Daemon.workspace``
    (a folder outside any git checkout), where the terminal UI starts without asking. At session end the daemon is
    stopped and every process it started is ended by pid, the ``daemon pid-update-loop`` helper
    that outlives ``daemon stop`` and the ``rekall mcp`` servers and workers included.
    """
    root = tmp_path_factory.mktemp("daemon")
    home, jobs, workspace = root / "codex-home", root / "jobs", root / "workspace"
    workspace.mkdir(mode=0o700)
    extra = rekall_mcp_toml(home, jobs) + trusted_project_toml(workspace)
    home = make_isolated_home(home, daemon_model.base_url, extra, approval_policy="on-request")
    daemon = attrs.evolve(start_daemon(codex_binary, home, jobs), workspace=workspace)
    try:
        yield daemon
    finally:
        stop_daemon(daemon)


@pytest.fixture
def tmux(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tmux]:
    """A private tmux server (its socket in a short tmp dir), killed with whatever it runs."""
    server = Tmux(tmp_path_factory.mktemp("tmux"))
    try:
        yield server
    finally:
        server.close()
