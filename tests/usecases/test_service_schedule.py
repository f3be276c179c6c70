"""A schedule that fails leaves nothing behind: no jobs folder, no lock."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rekall.usecases import service
from rekall.kernel.errors import RekallError
from rekall.sim import start_sim_in_thread
from rekall.store.paths import resolve_lock_dir
from tests.mcpkit import HANDOFF, job_env
from tests.support.mounts import remount_read_only, tmpfs


def test_a_schedule_refused_for_a_mistyped_codex_home_creates_no_folder(tmp_path: Path):
    mistyped = tmp_path / ".codx"  # the user meant ~/.codex: no owner is found through it
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"], "TMPDIR": str(tmp_path), "CODEX_HOME": str(mistyped)}
    with pytest.raises(RekallError):
        asyncio.run(service.schedule("0199a213-81c0-7800-8aa1-bbab2a035a53", HANDOFF, env=env))
    assert not mistyped.exists()


@pytest.fixture
def read_only_jobs_dir(tmp_path: Path) -> Iterator[Path]:
    """A jobs directory on a filesystem mounted read-only (root writes through a mode of 0500)."""
    with tmpfs(tmp_path / "ro", without_root="root is what writes through a read-only mode") as mount:
        (mount / "jobs").mkdir(mode=0o700)
        remount_read_only(mount)
        yield mount / "jobs"


def test_a_schedule_that_cannot_write_a_read_only_jobs_directory_leaves_no_lock(read_only_jobs_dir: Path):
    with start_sim_in_thread() as sim:
        env = job_env(sim.env, read_only_jobs_dir)
        with pytest.raises(RekallError, match="Read-only file system"):
            asyncio.run(service.schedule(sim.thread_id, HANDOFF, env=env))
        assert not (resolve_lock_dir() / f"{sim.thread_id}.lock").exists()
        assert list(read_only_jobs_dir.iterdir()) == []
