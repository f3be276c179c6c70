"""Where the extension's IPC router listens, and whether we may trust it.

Resolution order:

1. ``REKALL_PIPE``, else its legacy alias ``CONTEXT_COMPACT_PIPE``: an endpoint for tests,
   taken verbatim with no filesystem checks (the transport still checks the peer). An
   empty value counts as unset, for both variables.
2. Windows: the named pipe ``\\\\.\\pipe\\codex-ipc``.
3. Linux and macOS: ``$CODEX_HOME/ipc/ipc.sock`` (``CODEX_HOME`` defaults to ``~/.codex``
   and must be absolute). The directory and the socket are ``lstat``-ed, so a symlink is
   refused rather than followed; each must be owned by us with ``mode & 0o077 == 0``.
   Only when that socket does not exist is the legacy ``$TMPDIR/codex-ipc/ipc-<uid>.sock``
   tried, under the same checks. :attr:`Endpoint.kind` says which one was used.

Every refusal names the path, what is wrong with it and what to do next.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, NamedTuple

from rekall.kernel.environment import codex_home, codex_home_origin, env_value
from rekall.transports.base import EndpointInsecure, EndpointMissing, EndpointUnsupported

WINDOWS_PIPE = r"\\.\pipe\codex-ipc"
TEST_VARIABLES = ("REKALL_PIPE", "CONTEXT_COMPACT_PIPE")
_UNIX_PLATFORMS = ("linux", "darwin")

EndpointKind = Literal["primary", "legacy", "test", "pipe"]


class Endpoint(NamedTuple):
    """A resolved endpoint. ``peer_check`` is filled in once a connection was made."""

    kind: EndpointKind
    path: str
    note: str = ""
    peer_check: str = "not connected"

    @property
    def is_pipe(self) -> bool:
        return self.kind == "pipe"

    def describe(self) -> str:
        text = f"{self.kind} endpoint {self.path}"
        return f"{text} ({self.note})" if self.note else text


def override_endpoint(env: Mapping[str, str]) -> Endpoint | None:
    for name in TEST_VARIABLES:
        value = env_value(env, name)
        if value is not None:
            _refuse_a_non_socket(name, value)
            return Endpoint("test", value, note=f"from {name}")
    return None


def _refuse_a_non_socket(name: str, path: str) -> None:
    """A test endpoint that exists but is no socket is a wrong variable, not a closed extension."""
    if sys.platform == "win32":
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: connecting says so
    if not stat.S_ISSOCK(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "a regular file" if stat.S_ISREG(mode) else "not a socket"
        raise EndpointMissing(f"{name} points at {path}, which is {what}, not a socket",
                              hint=f"point {name} at a listening socket (`rekall sim` prints one), or unset it "
                                   "to use the extension's own socket")


def resolve_endpoint(
    env: Mapping[str, str] | None = None,
    *,
    platform: str | None = None,
    uid: int | None = None,
    lstat: Callable[[str], os.stat_result] = os.lstat,
) -> Endpoint:
    """Find the router's endpoint and run the filesystem checks (see the module docstring)."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    found = override_endpoint(env)
    if found is not None:
        return found
    if platform == "win32":
        return Endpoint("pipe", WINDOWS_PIPE)
    if platform not in _UNIX_PLATFORMS:
        raise EndpointUnsupported(
            f"live Codex IPC is unsupported on {platform!r}",
            hint="use Linux, macOS or Windows, or set REKALL_PIPE to a test endpoint",
        )
    uid = os.geteuid() if uid is None else uid
    primary = Path(absolute_codex_home(env)) / "ipc" / "ipc.sock"
    if exists(lstat, primary.parent) and exists(lstat, primary):
        check_private_socket(primary, uid=uid, lstat=lstat)
        return Endpoint("primary", str(primary))
    legacy = Path(env_value(env, "TMPDIR") or "/tmp") / "codex-ipc" / f"ipc-{uid}.sock"
    if exists(lstat, legacy.parent) and exists(lstat, legacy):
        check_private_socket(legacy, uid=uid, lstat=lstat)
        return Endpoint("legacy", str(legacy), note=f"primary {primary} does not exist")
    raise EndpointMissing(
        f"no Codex IPC socket: {primary} does not exist, nor the legacy {legacy}; rekall looked under "
        f"{codex_home_origin(env)}",
        hint="open the thread in the Codex VS Code extension so that it starts its IPC router, "
        "and make sure CODEX_HOME matches the extension's",
    )


def absolute_codex_home(env: Mapping[str, str]) -> str:
    home = str(codex_home(env))
    if not os.path.isabs(home):
        raise EndpointInsecure(
            f"CODEX_HOME must be an absolute path for Unix IPC; got {home!r}",
            hint="set CODEX_HOME to an absolute path, or unset it to use ~/.codex",
        )
    return home


def exists(lstat: Callable[[str], os.stat_result], path: Path) -> bool:
    try:
        lstat(str(path))
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    except OSError as exc:
        raise EndpointInsecure(f"cannot inspect {path}: {exc.strerror or exc}",
                               hint="check the permissions of the folders on that path") from exc
    return True


class Wording(NamedTuple):
    """How a refusal names the endpoint, its server and the way to recreate it."""

    subject: str
    server: str
    restart: str


EXTENSION_WORDING = Wording("Codex IPC", "the extension", "restart the extension")


def _check_owned_private(path: Path, st: os.stat_result, uid: int, what: str, expected_mode: str,
                         wording: Wording) -> None:
    if st.st_uid != uid:
        raise EndpointInsecure(
            f"{wording.subject} {what} {path} is owned by uid {st.st_uid}, not by you (uid {uid})",
            hint=f"another user may be impersonating {wording.server}; do not connect. Remove it if you own "
            f"the parent directory and {wording.restart}",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise EndpointInsecure(
            f"{wording.subject} {what} {path} has mode {mode:04o}; group and other bits must be clear",
            hint=f"run: chmod {expected_mode} {path}  (or {wording.restart} so that it recreates it)",
        )


def check_private_dir(path: Path, *, uid: int, lstat: Callable[[str], os.stat_result] = os.lstat,
                      wording: Wording = EXTENSION_WORDING) -> os.stat_result:
    """A real directory (not a link), owned by ``uid``, no group or other bits; returns its stat."""
    st = lstat(str(path))
    if stat.S_ISLNK(st.st_mode):
        raise EndpointInsecure(
            f"{wording.subject} directory {path} is a symbolic link; refusing to follow it",
            hint=f"replace the link with a real directory owned by you (mode 0700), then {wording.restart}",
        )
    if not stat.S_ISDIR(st.st_mode):
        raise EndpointInsecure(f"{wording.subject} directory {path} is not a directory",
                               hint=f"remove it and {wording.restart}")
    _check_owned_private(path, st, uid, "directory", "700", wording)
    return st


def check_socket_file(path: Path, *, uid: int, lstat: Callable[[str], os.stat_result] = os.lstat,
                      wording: Wording = EXTENSION_WORDING) -> os.stat_result:
    """A real socket (not a link), owned by ``uid``, no group or other bits; returns its stat."""
    st = lstat(str(path))
    if stat.S_ISLNK(st.st_mode):
        raise EndpointInsecure(
            f"{wording.subject} socket {path} is a symbolic link; refusing to follow it",
            hint=f"remove the link and {wording.restart} so that it creates a real socket",
        )
    if not stat.S_ISSOCK(st.st_mode):
        raise EndpointInsecure(f"{wording.subject} socket {path} is not a socket",
                               hint=f"remove it and {wording.restart}")
    _check_owned_private(path, st, uid, "socket", "600", wording)
    return st


def check_private_socket(path: Path, *, uid: int, lstat: Callable[[str], os.stat_result] = os.lstat) -> None:
    """Check the socket's directory, then the socket itself (in that order)."""
    check_private_dir(path.parent, uid=uid, lstat=lstat)
    check_socket_file(path, uid=uid, lstat=lstat)
