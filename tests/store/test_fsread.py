"""The store's reads of its own files: the whole file, never more than its limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rekall.store import fsread
from rekall.store.fsread import TooLarge, WrongKind, read_limited, read_private

LIMIT = 200_000


@pytest.mark.parametrize("size", [0, 1, 700, 65_535, 65_536, 65_537, 131_073, LIMIT])
def test_a_file_up_to_the_limit_is_read_whole_whatever_its_size(tmp_path: Path, size: int):
    path = tmp_path / "f"
    data = os.urandom(size)
    path.write_bytes(data)
    assert read_private(path, limit=LIMIT) == data


def test_a_file_one_byte_over_the_limit_is_refused(tmp_path: Path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * (LIMIT + 1))
    with pytest.raises(TooLarge):
        read_private(path, limit=LIMIT)


def test_a_file_larger_than_its_size_said_is_still_read_to_its_end_and_bounded(tmp_path: Path, monkeypatch):
    # A file that grows between fstat and the read: the bytes are read to the end, within the limit.
    path = tmp_path / "f"
    data = os.urandom(150_000)
    path.write_bytes(data)
    real = os.fstat

    class Said:
        def __init__(self, result: os.stat_result) -> None:
            self.st_size = 10
            self.st_mode = result.st_mode

    monkeypatch.setattr(fsread.os, "fstat", lambda fd: Said(real(fd)))
    assert read_private(path, limit=LIMIT) == data
    with pytest.raises(TooLarge):
        read_private(path, limit=100_000)


def test_a_device_that_reports_no_size_is_read_only_to_the_limit():
    with pytest.raises(TooLarge) as raised:
        read_limited("/dev/zero", limit=100_000)
    assert raised.value.size == 100_001


def test_a_symlink_is_never_followed_by_a_read_of_the_stores_own_files(tmp_path: Path):
    (tmp_path / "target").write_bytes(b"secret")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(OSError):
        read_private(tmp_path / "link", limit=LIMIT)
    assert read_limited(tmp_path / "link", limit=LIMIT) == b"secret"


def _planted(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        import socket

        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(path))
        listener.close()
    else:
        (path.parent / "elsewhere").write_bytes(b"{}")
        path.symlink_to(path.parent / "elsewhere")


@pytest.mark.parametrize(("planted", "named"), [("fifo", "a FIFO (named pipe)"), ("directory", "a directory"),
                                                ("socket", "a socket"), ("symlink", "a symbolic link")])
def test_what_is_not_a_regular_file_at_one_of_the_stores_paths_is_refused_at_once_naming_the_path(
        tmp_path: Path, planted: str, named: str):
    # A FIFO nobody writes to used to be waited on (30 s) as if it were a stream the user named.
    path = tmp_path / "status.json"
    _planted(planted, path)
    with pytest.raises(WrongKind) as refused:
        read_private(path, limit=LIMIT)
    assert refused.value.kind == named and refused.value.path == path
    assert str(path) in str(refused.value) and f"{named}, not a regular file" in str(refused.value)

