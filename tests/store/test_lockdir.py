"""One job per thread, whatever jobs directory each process resolves: the lock lives in a folder
derived from the user alone (``~/.rekall/locks``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rekall.errors import StoreError
from rekall.store import JobStore

from rekall.testing import FakeClock
from tests.jobkit import handoff, job_with_dead_worker, new_thread


def test_the_lock_directory_comes_from_home_never_from_tmpdir_xdg_or_codex_home(tmp_path: Path):
    from rekall.store.paths import resolve_lock_dir

    env = {"HOME": str(tmp_path / "me"), "TMPDIR": str(tmp_path / "t"), "XDG_RUNTIME_DIR": str(tmp_path / "x"),
           "XDG_STATE_HOME": str(tmp_path / "s"), "CODEX_HOME": str(tmp_path / "c")}
    assert resolve_lock_dir(env) == tmp_path / "me" / ".rekall" / "locks"


def test_the_mcp_server_and_a_shell_with_different_codex_homes_get_one_job_per_thread(tmp_path: Path):
    # A hand registration without env_vars: the MCP server sees the default CODEX_HOME, the shell its own.
    server = JobStore.open({"CODEX_HOME": str(tmp_path / "default-codex")})
    shell = JobStore.open({"CODEX_HOME": str(tmp_path / "custom-codex")})
    assert server.root != shell.root
    thread = new_thread()
    first = server.create_job(thread, handoff=handoff(), user_fingerprint="fp")
    second = shell.create_job(thread, handoff=handoff(), user_fingerprint="fp")
    assert second.already_scheduled and second.job_id == first.job_id
    assert second.status["jobsDir"] == str(server.root)
    assert shell.all_jobs() == []  # no second job, so no second compaction


def test_a_dead_worker_of_another_jobs_directory_is_recorded_there_and_the_thread_freed(tmp_path: Path):
    clock = FakeClock()
    server = JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "a")}, clock=clock)
    shell = JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "b")}, clock=clock)
    thread = new_thread()
    lost = job_with_dead_worker(server, clock, thread, "waiting_for_idle")
    created = shell.create_job(thread, handoff=handoff(), user_fingerprint="fp")
    assert not created.already_scheduled
    assert server.load(thread, lost).view.fields["errorCode"] == "worker_lost"


def test_the_lock_directory_is_private_and_a_symlinked_one_is_refused(tmp_path: Path):
    home = Path(os.environ["HOME"])
    store = JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "jobs")})
    assert store.lock_root == home / ".rekall" / "locks"
    assert {stat.S_IMODE(p.stat().st_mode) for p in (store.lock_root, store.lock_root.parent)} == {0o700}
    store.lock_root.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    store.lock_root.symlink_to(elsewhere)
    with pytest.raises(StoreError, match="lock directory .* is a symbolic link"):
        JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "jobs")})


def test_a_lock_left_in_the_jobs_directory_by_an_earlier_rekall_still_holds_the_thread(tmp_path: Path):
    store = JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "jobs")})
    thread = new_thread()
    first = store.create_job(thread, handoff=handoff(), user_fingerprint="fp")
    store.lock_path(thread).rename(store.root / f"{thread}.lock")  # where rekall kept it before
    again = store.create_job(thread, handoff=handoff(), user_fingerprint="fp")
    assert again.already_scheduled and again.job_id == first.job_id
    assert store.release_lock(thread, first.job_id) and not (store.root / f"{thread}.lock").exists()
