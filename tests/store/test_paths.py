from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rekall.kernel.errors import StoreError
from rekall.store import JobStore, resolve_jobs_dir
from rekall.store.paths import ensure_private_dir


def test_rekall_jobs_dir_wins_over_everything(tmp_path: Path):
    env = {"REKALL_JOBS_DIR": str(tmp_path / "a"), "CONTEXT_COMPACT_JOBS_DIR": str(tmp_path / "b"),
           "CODEX_HOME": str(tmp_path)}
    assert resolve_jobs_dir(env) == tmp_path / "a"


def test_the_node_versions_variable_and_directory_are_never_rekalls_own(tmp_path: Path):
    node = tmp_path / "tools" / "context-compact" / "jobs"
    node.mkdir(parents=True)
    env = {"REKALL_JOBS_DIR": "", "CONTEXT_COMPACT_JOBS_DIR": str(tmp_path / "b"), "CODEX_HOME": str(tmp_path)}
    assert resolve_jobs_dir(env) == tmp_path / "tools" / "rekall" / "jobs"


def test_otherwise_the_rekall_directory_under_codex_home(tmp_path: Path):
    assert resolve_jobs_dir({"CODEX_HOME": str(tmp_path)}) == tmp_path / "tools" / "rekall" / "jobs"


def test_codex_home_defaults_to_dot_codex_in_the_home_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_jobs_dir({"CODEX_HOME": ""}) == tmp_path / ".codex" / "tools" / "rekall" / "jobs"


def test_opening_the_store_creates_a_private_directory(isolated_env: Path):
    store = JobStore.open()
    assert store.root == isolated_env / "tools" / "rekall" / "jobs"
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    assert store.permission_report is None


def test_a_directory_others_can_read_is_tightened_and_reported(tmp_path: Path):
    loose = tmp_path / "jobs"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    store = JobStore.open({"REKALL_JOBS_DIR": str(loose)})
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    assert "0755" in store.permission_report


def test_a_directory_owned_by_someone_else_is_refused(tmp_path: Path, mocker):
    mocker.patch("os.geteuid", return_value=os.getuid() + 1)
    with pytest.raises(StoreError, match="belongs to uid"):
        ensure_private_dir(tmp_path)


def test_a_file_where_the_directory_should_be_is_refused(tmp_path: Path):
    (tmp_path / "jobs").write_text("not a dir")
    with pytest.raises(StoreError, match="jobs directory"):
        JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "jobs")})
