from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from rekall.transports import EndpointInsecure, EndpointMissing, EndpointUnsupported, resolve_endpoint
from rekall.transports.endpoint import WINDOWS_PIPE

UID = os.geteuid()


@pytest.fixture
def short_dir():
    """Socket paths must fit in sun_path (108 bytes), so keep them short."""
    path = Path(tempfile.mkdtemp(prefix="rk", dir="/tmp"))
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make_socket(path: Path, mode: int = 0o600) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    os.chmod(path, mode)
    return sock


def make_home(root: Path, dir_mode: int = 0o700, sock_mode: int = 0o600) -> tuple[Path, socket.socket]:
    ipc = root / "home" / "ipc"
    ipc.mkdir(parents=True)
    os.chmod(ipc, dir_mode)
    return root / "home", make_socket(ipc / "ipc.sock", sock_mode)


def test_rekall_pipe_is_taken_verbatim_and_skips_filesystem_checks():
    env = {"REKALL_PIPE": "relative/not-checked", "CODEX_HOME": "also-relative"}
    endpoint = resolve_endpoint(env, platform="linux", lstat=_no_lstat)
    assert (endpoint.kind, endpoint.path, endpoint.note) == ("test", "relative/not-checked", "from REKALL_PIPE")


def test_the_legacy_alias_is_used_when_rekall_pipe_is_empty():
    env = {"REKALL_PIPE": "", "CONTEXT_COMPACT_PIPE": "/x/legacy.sock"}
    endpoint = resolve_endpoint(env, platform="linux", lstat=_no_lstat)
    assert (endpoint.kind, endpoint.path) == ("test", "/x/legacy.sock")


def test_windows_uses_the_named_pipe_without_any_unix_lookup():
    endpoint = resolve_endpoint({}, platform="win32", lstat=_no_lstat)
    assert (endpoint.kind, endpoint.path) == ("pipe", WINDOWS_PIPE)


def test_an_unsupported_platform_fails_before_any_lookup():
    with pytest.raises(EndpointUnsupported, match="freebsd"):
        resolve_endpoint({"CODEX_HOME": "/h"}, platform="freebsd", lstat=_no_lstat)


def test_a_relative_codex_home_is_refused_with_the_value():
    with pytest.raises(EndpointInsecure, match="absolute.*'rel/home'"):
        resolve_endpoint({"CODEX_HOME": "rel/home"}, platform="linux", lstat=_no_lstat)


def test_a_private_socket_under_codex_home_is_the_primary_endpoint(short_dir):
    home, sock = make_home(short_dir / "a b")  # a space in CODEX_HOME is fine
    with sock:
        endpoint = resolve_endpoint({"CODEX_HOME": str(home)}, platform="linux")
    assert (endpoint.kind, endpoint.path) == ("primary", str(home / "ipc" / "ipc.sock"))


def test_home_defaults_to_dot_codex_under_home(short_dir):
    home, sock = make_home(short_dir)
    os.rename(home, short_dir / ".codex")
    with sock:
        endpoint = resolve_endpoint({"HOME": str(short_dir), "CODEX_HOME": ""}, platform="darwin")
    assert endpoint.path == str(short_dir / ".codex" / "ipc" / "ipc.sock")


def test_a_foreign_owner_is_refused_naming_the_path_and_both_uids(short_dir):
    home, sock = make_home(short_dir)
    with sock, pytest.raises(EndpointInsecure) as caught:
        resolve_endpoint({"CODEX_HOME": str(home)}, platform="linux", uid=UID + 4242)
    assert f"{home / 'ipc'} is owned by uid {UID}, not by you (uid {UID + 4242})" in caught.value.message
    assert caught.value.code == "endpoint_insecure" and caught.value.hint


@pytest.mark.parametrize("dir_mode", [0o755, 0o770, 0o701])
def test_group_or_world_bits_on_the_directory_are_refused(short_dir, dir_mode):
    home, sock = make_home(short_dir, dir_mode=dir_mode)
    with sock, pytest.raises(EndpointInsecure, match=f"directory .* has mode {dir_mode:04o}") as caught:
        resolve_endpoint({"CODEX_HOME": str(home)}, platform="linux")
    assert "chmod 700" in caught.value.hint


@pytest.mark.parametrize("sock_mode", [0o666, 0o640, 0o604])
def test_group_or_world_bits_on_the_socket_are_refused(short_dir, sock_mode):
    home, sock = make_home(short_dir, sock_mode=sock_mode)
    with sock, pytest.raises(EndpointInsecure, match=f"socket .* has mode {sock_mode:04o}"):
        resolve_endpoint({"CODEX_HOME": str(home)}, platform="linux")


def test_a_symlinked_directory_is_refused(short_dir):
    real, sock = make_home(short_dir / "real")
    home = short_dir / "home"
    home.mkdir(mode=0o700)
    (home / "ipc").symlink_to(real / "ipc")
    with sock, pytest.raises(EndpointInsecure, match="directory .* is a symbolic link"):
        resolve_endpoint({"CODEX_HOME": str(home)}, platform="linux")


def test_a_symlinked_socket_is_refused(short_dir):
    elsewhere = short_dir / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    with make_socket(elsewhere / "real.sock"):
        ipc = short_dir / "home" / "ipc"
        ipc.mkdir(parents=True, mode=0o700)
        (ipc / "ipc.sock").symlink_to(elsewhere / "real.sock")
        with pytest.raises(EndpointInsecure, match="socket .* is a symbolic link"):
            resolve_endpoint({"CODEX_HOME": str(short_dir / "home")}, platform="linux")


def test_a_regular_file_in_place_of_the_socket_is_refused(short_dir):
    ipc = short_dir / "home" / "ipc"
    ipc.mkdir(parents=True, mode=0o700)
    (ipc / "ipc.sock").write_text("")
    with pytest.raises(EndpointInsecure, match="is not a socket"):
        resolve_endpoint({"CODEX_HOME": str(short_dir / "home")}, platform="linux")


def test_the_directory_is_checked_before_the_socket():
    seen = []

    def lstat(path):
        seen.append(path)
        return os.stat_result((stat.S_IFDIR | 0o755, 0, 0, 0, UID, 0, 0, 0, 0, 0))

    with pytest.raises(EndpointInsecure, match="directory"):
        resolve_endpoint({"CODEX_HOME": "/h"}, platform="linux", uid=UID, lstat=lstat)
    assert seen[-1] == "/h/ipc"


def test_the_legacy_socket_is_used_only_when_the_primary_does_not_exist(short_dir):
    legacy_dir = short_dir / "tmp" / "codex-ipc"
    legacy_dir.mkdir(parents=True, mode=0o700)
    with make_socket(legacy_dir / f"ipc-{UID}.sock"):
        env = {"CODEX_HOME": str(short_dir / "home"), "TMPDIR": str(short_dir / "tmp")}
        endpoint = resolve_endpoint(env, platform="linux")
        assert endpoint.kind == "legacy"
        assert endpoint.path == str(legacy_dir / f"ipc-{UID}.sock")
        assert "primary" in endpoint.note and "does not exist" in endpoint.note
        home, sock = make_home(short_dir)
        with sock:
            assert resolve_endpoint(env, platform="linux").kind == "primary"


def test_an_insecure_legacy_socket_is_refused_not_used(short_dir):
    legacy_dir = short_dir / "tmp" / "codex-ipc"
    legacy_dir.mkdir(parents=True, mode=0o777)
    os.chmod(legacy_dir, 0o777)
    with make_socket(legacy_dir / f"ipc-{UID}.sock"):
        env = {"CODEX_HOME": str(short_dir / "home"), "TMPDIR": str(short_dir / "tmp")}
        with pytest.raises(EndpointInsecure, match="codex-ipc has mode 0777"):
            resolve_endpoint(env, platform="linux")


def test_no_socket_anywhere_names_both_paths_and_says_what_to_do(short_dir):
    env = {"CODEX_HOME": str(short_dir / "home"), "TMPDIR": str(short_dir / "tmp")}
    with pytest.raises(EndpointMissing) as caught:
        resolve_endpoint(env, platform="linux")
    assert str(short_dir / "home" / "ipc" / "ipc.sock") in caught.value.message
    assert f"ipc-{UID}.sock" in caught.value.message
    assert "VS Code" in caught.value.hint and caught.value.code == "endpoint_missing"


def _no_lstat(path):
    raise AssertionError(f"no filesystem lookup expected, got lstat({path!r})")
