"""One job per thread, whatever jobs directory and home each process resolves: the lock lives in a
folder derived from the account alone (``.rekall/locks`` in the password database's home)."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rekall.kernel.errors import StoreError
from rekall.store import JobStore

from rekall.testing import FakeClock
from tests.jobkit import handoff, job_with_dead_worker, new_thread


def test_the_lock_directory_comes_from_the_account_never_from_home_tmpdir_xdg_codex_home_or_the_jobs_dir(
        tmp_path: Path):
    # In a process of its own, without the tests' seam (tests/conftest.py): the real account's home.
    said = set()
    for n in range(3):
        env = {**{k: v for k, v in os.environ.items() if k != "RKTEST_ACCOUNT_HOME"}, "HOME": str(tmp_path / f"home{n}"), "TMPDIR": str(tmp_path / f"t{n}"),
               "XDG_RUNTIME_DIR": str(tmp_path / f"x{n}"), "XDG_STATE_HOME": str(tmp_path / f"s{n}"),
               "CODEX_HOME": str(tmp_path / f"c{n}"), "REKALL_JOBS_DIR": str(tmp_path / f"j{n}")}
        code = "from rekall.store.paths import resolve_lock_dir; print(resolve_lock_dir())"
        said.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout.strip())
    assert said == {str(Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".rekall" / "locks")}


def test_a_lock_an_earlier_release_left_under_home_holds_the_thread_and_is_released_there(tmp_path: Path,
                                                                                           monkeypatch):
    earlier_home = tmp_path / "earlier-home"
    earlier = JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "jobs")})
    earlier = JobStore(earlier.root, lock_root=earlier_home / ".rekall" / "locks")  # where its HOME put the lock
    earlier.lock_root.mkdir(parents=True, mode=0o700)
    thread = new_thread()
    first = earlier.create_job(thread, handoff=handoff(), user_fingerprint="fp")
    monkeypatch.setenv("HOME", str(earlier_home))
    now = JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "other-jobs"), "HOME": str(earlier_home)})
    assert now.lock_root != earlier.lock_root and now.legacy_lock_roots == (earlier.lock_root,)
    again = now.create_job(thread, handoff=handoff(), user_fingerprint="fp")
    assert again.already_scheduled and again.job_id == first.job_id
    assert not now.lock_path(thread).exists()  # never created where the earlier one is honoured
    assert now.release_lock(thread, first.job_id) and not (earlier.lock_root / f"{thread}.lock").exists()


def test_the_mcp_server_and_a_shell_with_different_codex_homes_get_one_job_per_thread(tmp_path: Path):
    # A hand registration without env_vars: the MCP server sees the default CODEX_HOME, the shell its own.
    server = JobStore.open({"CODEX_HOME": str(tmp_path / "default-codex")})
    shell = JobStore.open({"CODEX_HOME": str(tmp_path / "custom-codex")})
    assert server.root != shell.root
    thread = new_thread()
    first = server.create_job(thread, handoff=handoff(), user_fingerprint="fp")
    second = shell.create_job(thread, handoff=handoff(), user_fingerprint="fp")
    assert second.already_scheduled and second.job_id == first.job_id
    assert second.status.jobsDir == str(server.root)
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
