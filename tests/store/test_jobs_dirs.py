"""The account's list of jobs directories (``~/.rekall/jobs-dirs.json``), as planted files leave it."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from rekall.store.jobs_dirs import jobs_dirs_file, known_jobs_dirs, remember_jobs_dir


def test_directories_are_remembered_newest_first_in_a_private_file(tmp_path: Path):
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
