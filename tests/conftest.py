"""Shared fixtures. Each test gets private, empty directories and a clean environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rekall.store import JobStore
from rekall.testing import FakeClock
from tests.support.account_home import account_seam
from tests.support.pinned import cached_codex_launcher

# Variables that would point rekall at a real installation; tests never inherit them.
_ISOLATED = (
    "CODEX_HOME",
    "CODEX_THREAD_ID",
    "REKALL_JOBS_DIR",
    "CONTEXT_COMPACT_JOBS_DIR",
    "REKALL_PIPE",
    "CONTEXT_COMPACT_PIPE",
    "REKALL_CODEX_BINARY",
    "REKALL_IDLE_STABLE_MS",
    "REKALL_DEADLINE_S",
    "REKALL_REQUEST_TIMEOUT_S",
    "REKALL_APP_SERVER_SOCKET",
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    """Where a test's jobs go (created by the store, 0700)."""
    return tmp_path / "jobs"


@pytest.fixture
def store(jobs_dir: Path, clock: FakeClock) -> JobStore:
    return JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock)


@pytest.fixture
def private_dir(tmp_path: Path) -> Path:
    """A 0700 directory, as rekall requires for jobs and IPC."""
    path = tmp_path / "private"
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    return path


@pytest.fixture(autouse=True)
def user_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point HOME at a private folder, and the account's home with it, here and in the processes
    the test starts (tests/support/account_home): the lock directory (``.rekall/locks`` in the
    account's home) is derived from the account alone, so tests running at the same time, and the
    developer's own jobs, would otherwise share one."""
    if not os.environ.get("REKALL_CACHE_DIR"):  # the pinned Codex stays where scripts/install-codex put it
        monkeypatch.setenv("REKALL_CACHE_DIR", str(cached_codex_launcher().parents[3]))
    home = tmp_path / "user-home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr("rekall.store.paths.account_home", lambda: home)
    for name, value in account_seam(home).items():  # and in the processes the test starts
        monkeypatch.setenv(name, value)
    return home


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, user_home: Path) -> Path:
    """Point CODEX_HOME at an empty private folder and drop inherited rekall variables."""
    for name in _ISOLATED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)  # a terminal's width would wrap errors on stderr
    home = tmp_path / "codex-home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("CODEX_HOME", str(home))
    return home
