"""Resolving and checking the shared app-server's control socket (real files, links and sockets)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rekall.kernel.errors import InvalidInput
from rekall.transports import EndpointInsecure, EndpointMissing
from rekall.transports.control_socket import START_HINT, resolve_control_socket

UID = os.geteuid()


@pytest.fixture
def root() -> Iterator[Path]:
    """A short private folder (socket paths must fit in sun_path)."""
    path = Path(tempfile.mkdtemp(prefix="rkcs", dir="/tmp"))
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def private_dir(path: Path, mode: int = 0o700) -> Path:
    path.mkdir(parents=True)
    os.chmod(path, mode)
    return path


def bound_socket(path: Path, mode: int = 0o600) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    os.chmod(path, mode)
    return sock


def daemon_layout(root: Path, *, target_dir_mode: int = 0o700, sock_mode: int = 0o600,
                  relative: bool = False) -> tuple[dict[str, str], Path, Path, socket.socket]:
    """What ``daemon start`` makes: a link in CODEX_HOME to a socket in a private per-user folder."""
    home = private_dir(root / "home")
    control = private_dir(home / "app-server-control")
    daemon_dir = private_dir(root / f"codex-daemon-{UID}", target_dir_mode)
    target = daemon_dir / "abc123"
    sock = bound_socket(target, sock_mode)
    link = control / "app-server-control.sock"
    link.symlink_to(os.path.relpath(target, control) if relative else target)
    return {"CODEX_HOME": str(home)}, link, target, sock


def test_the_daemons_link_is_read_once_and_every_check_is_reported(root: Path) -> None:
    env, link, target, sock = daemon_layout(root)
    with sock:
        found = resolve_control_socket(env)
    assert (found.path, found.source, found.target, found.is_link) == (str(link), "CODEX_HOME", str(target), True)
    assert found.checks == (
        f"folder {link.parent}: a real directory, owned by uid {UID}, mode 0700",
        f"{link} is a symbolic link to {target}; read once, never followed further",
        f"target folder {target.parent}: a real directory, owned by uid {UID}, mode 0700",
        f"socket {target}: a socket, owned by uid {UID}, mode 0600",
    )
    assert found.peer_check == "not connected"


def test_a_relative_link_target_is_taken_from_the_links_folder(root: Path) -> None:
    env, _link, target, sock = daemon_layout(root, relative=True)
    with sock:
        found = resolve_control_socket(env)
        assert Path(found.target).is_absolute() and os.path.samefile(found.target, target)


def test_a_socket_named_by_the_variable_is_checked_in_place(root: Path) -> None:
    folder = private_dir(root / "listen")
    with bound_socket(folder / "app.sock"):
        found = resolve_control_socket({"REKALL_APP_SERVER_SOCKET": f"unix://{folder / 'app.sock'}",
                                        "CODEX_HOME": "/nonexistent"})
    assert (found.source, found.target, found.is_link) == ("REKALL_APP_SERVER_SOCKET", str(folder / "app.sock"), False)
    assert found.checks == (f"folder {folder}: a real directory, owned by uid {UID}, mode 0700",
                            f"socket {folder / 'app.sock'}: a socket, owned by uid {UID}, mode 0600")


def test_a_daemon_that_never_started_is_a_clear_missing_error(root: Path) -> None:
    home = private_dir(root / "home")
    with pytest.raises(EndpointMissing) as caught:
        resolve_control_socket({"CODEX_HOME": str(home)})
    assert str(home / "app-server-control" / "app-server-control.sock") in caught.value.message
    assert "so none listens there" in caught.value.message and caught.value.hint == START_HINT
    assert f"rekall looked under CODEX_HOME {home}, from this process's environment" in caught.value.message
    assert "codex app-server daemon start" in START_HINT


def test_a_variable_naming_a_link_to_the_daemons_link_is_told_to_fix_the_variable(root: Path) -> None:
    env, link, _target, sock = daemon_layout(root)
    mine = private_dir(root / "mine") / "app.sock"
    mine.symlink_to(link)
    with sock, pytest.raises(EndpointInsecure) as caught:
        resolve_control_socket({**env, "REKALL_APP_SERVER_SOCKET": str(mine)})
    assert f"REKALL_APP_SERVER_SOCKET names {mine}, a link to {link}, which is itself a link" in caught.value.message
    assert caught.value.hint.startswith(f"set REKALL_APP_SERVER_SOCKET to {link} itself, or unset it")
    assert "restart" not in caught.value.hint and "daemon" not in caught.value.hint


def test_a_stale_link_says_the_app_server_is_not_running(root: Path) -> None:
    env, _link, target, sock = daemon_layout(root)
    sock.close()
    target.unlink()
    with pytest.raises(EndpointMissing, match="stale link: the app-server is not running"):
        resolve_control_socket(env)


def test_a_bad_variable_is_refused_naming_it(root: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_control_socket({"REKALL_APP_SERVER_SOCKET": "ws://127.0.0.1:4500"})
    assert caught.value.field == "REKALL_APP_SERVER_SOCKET"


def test_a_target_folder_open_to_others_is_refused(root: Path) -> None:
    env, _link, target, sock = daemon_layout(root, target_dir_mode=0o755)
    with sock, pytest.raises(EndpointInsecure) as caught:
        resolve_control_socket(env)
    assert caught.value.message == (f"shared Codex app-server directory {target.parent} has mode 0755; "
                                    "group and other bits must be clear")
    assert f"chmod 700 {target.parent}" in caught.value.hint


def test_a_target_socket_open_to_others_is_refused(root: Path) -> None:
    env, _link, target, sock = daemon_layout(root, sock_mode=0o666)
    with sock, pytest.raises(EndpointInsecure, match=f"socket {target} has mode 0666"):
        resolve_control_socket(env)


def test_a_link_folder_open_to_others_is_refused(root: Path) -> None:
    env, link, _target, sock = daemon_layout(root)
    os.chmod(link.parent, 0o750)
    with sock, pytest.raises(EndpointInsecure, match=f"directory {link.parent} has mode 0750"):
        resolve_control_socket(env)


def test_everything_owned_by_someone_else_is_refused_at_the_first_check(root: Path) -> None:
    env, link, _target, sock = daemon_layout(root)
    with sock, pytest.raises(EndpointInsecure) as caught:
        resolve_control_socket(env, uid=UID + 1)
    assert caught.value.message == (f"shared Codex app-server directory {link.parent} is owned by uid {UID}, "
                                    f"not by you (uid {UID + 1})")
    assert "impersonating the app-server" in caught.value.hint


def test_a_target_owned_by_someone_else_is_refused(root: Path) -> None:
    env, _link, target, sock = daemon_layout(root)

    def lstat(path: str) -> os.stat_result:  # as if another user owned the target socket
        st = os.lstat(path)
        if path != str(target):
            return st
        fields = list(st)
        fields[4] = UID + 1  # st_uid
        return os.stat_result(fields)

    with sock, pytest.raises(EndpointInsecure, match=f"socket {target} is owned by uid {UID + 1}, not by you"):
        resolve_control_socket(env, lstat=lstat)


def test_a_link_to_a_link_is_not_followed(root: Path) -> None:
    env, link, target, sock = daemon_layout(root)
    hop = target.parent / "hop"
    hop.symlink_to(target)
    link.unlink()
    link.symlink_to(hop)
    with sock, pytest.raises(EndpointInsecure, match=f"socket {hop} is a symbolic link; refusing to follow it"):
        resolve_control_socket(env)


def test_a_target_folder_that_is_a_link_is_refused(root: Path) -> None:
    env, link, target, sock = daemon_layout(root)
    alias = root / "alias"
    alias.symlink_to(target.parent)
    link.unlink()
    link.symlink_to(alias / target.name)
    with sock, pytest.raises(EndpointInsecure, match=f"directory {alias} is a symbolic link"):
        resolve_control_socket(env)


def test_a_target_that_is_not_a_socket_is_refused(root: Path) -> None:
    env, _link, target, sock = daemon_layout(root)
    sock.close()
    target.unlink()
    target.write_text("not a socket")
    os.chmod(target, 0o600)
    with pytest.raises(EndpointInsecure, match=f"socket {target} is not a socket"):
        resolve_control_socket(env)
