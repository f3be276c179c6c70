"""The account's list of jobs directories (``~/.rekall/jobs-dirs.json``): vanished ones dropped, a corrupt list
reported and left as it is, the demo's temporary folder never recorded, planted files refused at once."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rekall.kernel.errors import StoreError
from rekall.store import JobStore
from rekall.store.jobs_dirs import (forget_vanished_jobs_dirs, jobs_dirs_file, known_jobs_dirs, read_jobs_dirs,
                                     remember_jobs_dir)


def test_recording_a_directory_drops_the_recorded_ones_that_no_longer_exist(tmp_path: Path) -> None:
    kept, gone, new = (tmp_path / name for name in ("kept", "gone", "new"))
    for folder in (kept, gone, new):
        folder.mkdir()
    remember_jobs_dir(kept)
    remember_jobs_dir(gone)
    gone.rmdir()
    remember_jobs_dir(new)
    assert read_jobs_dirs() == [new, kept]


def test_forgetting_vanished_directories_rewrites_the_list_only_when_one_is_gone(tmp_path: Path) -> None:
    kept, gone = tmp_path / "kept", tmp_path / "gone"
    kept.mkdir(), gone.mkdir()
    remember_jobs_dir(kept)
    remember_jobs_dir(gone)
    gone.rmdir()
    assert forget_vanished_jobs_dirs() == [gone] and read_jobs_dirs() == [kept]
    written = jobs_dirs_file().stat().st_mtime_ns
    assert forget_vanished_jobs_dirs() == [] and jobs_dirs_file().stat().st_mtime_ns == written


@pytest.mark.parametrize("text", ['["/a", ', '{"a": 1}', '["relative/path"]'])
def test_a_corrupt_list_is_reported_by_name_and_never_replaced_by_a_schedule(tmp_path: Path, text: str,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    target = jobs_dirs_file()
    target.parent.mkdir(mode=0o700)
    target.write_text(text)
    with pytest.raises(StoreError, match="is corrupt"):
        read_jobs_dirs()
    JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "jobs"), "HOME": str(tmp_path)})
    assert target.read_text() == text
    assert any("could not be recorded" in r.getMessage() and "is corrupt" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_the_demo_records_nothing_in_the_account_homes_list(user_home: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "rekall", "demo", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "resumed"
    assert not (user_home / ".rekall" / "jobs-dirs.json").exists()


def test_the_hook_still_reads_the_absolute_paths_of_a_damaged_list(tmp_path: Path) -> None:
    from rekall.store.jobs_dirs import known_jobs_dirs

    target = jobs_dirs_file()
    target.parent.mkdir(mode=0o700)
    target.write_text(json.dumps([str(tmp_path), "relative", 3]))
    assert known_jobs_dirs() == [tmp_path]
    with pytest.raises(StoreError, match="not a list of absolute paths"):
        read_jobs_dirs()




def test_directories_are_remembered_newest_first_in_a_private_file(tmp_path: Path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    remember_jobs_dir(tmp_path / "a")
    remember_jobs_dir(tmp_path / "b")
    assert known_jobs_dirs() == [tmp_path / "b", tmp_path / "a"]
    assert os.stat(jobs_dirs_file()).st_mode & 0o777 == 0o600


def test_a_fifo_planted_at_the_list_is_named_at_once_and_replaced_by_the_next_schedule(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    # It used to be read as a stream: every `schedule` waited 30 s for a writer that never came.
    path = jobs_dirs_file()
    path.parent.mkdir(mode=0o700)
    os.mkfifo(path, 0o600)
    with caplog.at_level(logging.WARNING, "rekall.store"):
        assert known_jobs_dirs() == []
    assert f"the list of jobs directories {path} is ignored: a FIFO (named pipe), not a regular file" in caplog.text
    remember_jobs_dir(tmp_path / "jobs")
    assert json.loads(path.read_text()) == [str(tmp_path / "jobs")]


def test_a_directory_planted_at_the_list_is_named_and_left_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    path = jobs_dirs_file()
    path.mkdir(parents=True)
    with caplog.at_level(logging.WARNING, "rekall.store"):
        assert known_jobs_dirs() == []
    assert f"{path} is ignored: a directory, not a regular file" in caplog.text
    with pytest.raises(IsADirectoryError):
        remember_jobs_dir(tmp_path / "jobs")  # the store logs this and schedules all the same
    assert path.is_dir() and not list(path.iterdir())
