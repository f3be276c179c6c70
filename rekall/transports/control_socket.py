"""Where the shared Codex app-server listens (its control socket), and whether we may trust it.

The socket is ``$CODEX_HOME/app-server-control/app-server-control.sock`` unless
``REKALL_APP_SERVER_SOCKET`` names another (a server started with ``--listen unix://PATH``).
Codex's daemon makes that path a **symbolic link** to a socket in a private per-user folder
(``/tmp/codex-daemon-<uid>/<hash>`` with codex 0.171.0), so the extension endpoint's "never
follow a link" rule is adapted rather than dropped:

1. the folder that holds the named path must be a real directory (not a link), ours, and
   closed to group and others;
2. the named path is ``lstat``-ed. A socket is checked in place (ours, no group or other
   bits). A link is read **once**; its target (made absolute against the link's folder) must
   itself be a socket, not another link, in a real directory that is ours and private, and
   the socket must be ours and private;
3. rekall then connects to the *target* path (not the link, which could be swapped after the
   check) and asks the kernel for the peer's uid (:class:`rekall.transports.unix.UnixTransport`).

Each step that passed is recorded in :attr:`ControlSocket.checks`, so that ``doctor`` and
errors can say what was verified. Every refusal names the path, what is wrong, and what to do.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from rekall.kernel.settings import APP_SERVER_SOCKET_VAR, DEFAULT_APP_SERVER_SOCKET, app_server_socket
from rekall.kernel.environment import codex_home_origin
from rekall.transports.base import EndpointInsecure, EndpointMissing
from rekall.transports.endpoint import Wording, absolute_codex_home, check_private_dir, check_socket_file, exists
from rekall.transports.socketstream import SocketStream
from rekall.transports.unix import PeerUidLookup, UnixTransport, peer_uid

WORDING = Wording("shared Codex app-server", "the app-server",
                  "restart it (`codex app-server daemon restart`)")
START_HINT = ("start the shared app-server with `codex app-server daemon start` (same CODEX_HOME), "
              f"or set {APP_SERVER_SOCKET_VAR} to the socket of `codex app-server --listen unix://PATH`")


@attrs.frozen
class ControlSocket:
    """A control socket that passed the filesystem checks. ``peer_check`` is set on connect."""

    #: The path as named (the default under CODEX_HOME, or the variable's value).
    path: str
    #: Where the path came from: ``"CODEX_HOME"`` or ``"REKALL_APP_SERVER_SOCKET"``.
    source: str
    #: The socket rekall connects to: the link's target, or ``path`` when it is not a link.
    target: str
    #: What was verified, one sentence per check, in order.
    checks: tuple[str, ...]
    peer_check: str = "not connected"

    @property
    def is_link(self) -> bool:
        return self.target != self.path

    def describe(self) -> str:
        via = f" -> {self.target}" if self.is_link else ""
        return f"shared app-server socket {self.path}{via} (from {self.source}); peer: {self.peer_check}"


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def resolve_control_socket(
    env: Mapping[str, str] | None = None,
    *,
    uid: int | None = None,
    lstat: Callable[[str], os.stat_result] = os.lstat,
    readlink: Callable[[str], str] = os.readlink,
) -> ControlSocket:
    """Find the control socket and run the filesystem checks (see the module docstring)."""
    env = os.environ if env is None else env
    uid = os.geteuid() if uid is None else uid
    configured = app_server_socket(env)
    if configured is not None:
        path, source = configured, APP_SERVER_SOCKET_VAR
        looked = f"at the path {APP_SERVER_SOCKET_VAR} names"
    else:
        path, source = Path(absolute_codex_home(env)) / DEFAULT_APP_SERVER_SOCKET, "CODEX_HOME"
        looked = f"under {codex_home_origin(env)}"
    if not exists(lstat, path.parent) or not exists(lstat, path):
        raise EndpointMissing(f"no shared Codex app-server: {path} does not exist, so none listens there; "
                              f"rekall looked {looked}", hint=START_HINT)
    checks = [f"folder {path.parent}: a real directory, owned by uid {uid}, mode "
              f"{_mode(check_private_dir(path.parent, uid=uid, lstat=lstat, wording=WORDING))}"]
    target = path
    if stat.S_ISLNK(lstat(str(path)).st_mode):
        target = _read_link_once(path, readlink)
        checks.append(f"{path} is a symbolic link to {target}; read once, never followed further")
        if not exists(lstat, target.parent) or not exists(lstat, target):
            raise EndpointMissing(f"no shared Codex app-server: {path} links to {target}, which does not exist "
                                  "(a stale link: the app-server is not running)", hint=START_HINT)
        checks.append(f"target folder {target.parent}: a real directory, owned by uid {uid}, mode "
                      f"{_mode(check_private_dir(target.parent, uid=uid, lstat=lstat, wording=WORDING))}")
        if configured is not None and stat.S_ISLNK(lstat(str(target)).st_mode):
            # The daemon is fine: the variable names a link to its link, a chain rekall never follows.
            raise EndpointInsecure(f"{APP_SERVER_SOCKET_VAR} names {path}, a link to {target}, which is itself a "
                                   "link; rekall reads one link and never follows a chain",
                                   hint=f"set {APP_SERVER_SOCKET_VAR} to {target} itself, or unset it to use "
                                        f"$CODEX_HOME/{DEFAULT_APP_SERVER_SOCKET.as_posix()}")
    st = check_socket_file(target, uid=uid, lstat=lstat, wording=WORDING)
    checks.append(f"socket {target}: a socket, owned by uid {uid}, mode {_mode(st)}")
    return ControlSocket(str(path), source, str(target), tuple(checks))


def _read_link_once(path: Path, readlink: Callable[[str], str]) -> Path:
    try:
        raw = readlink(str(path))
    except OSError as exc:
        raise EndpointInsecure(f"cannot read the link {path}: {exc.strerror or exc}",
                               hint="check the permissions of its folder") from exc
    target = Path(raw)
    return target if target.is_absolute() else path.parent / target


async def connect_control_socket(socket: ControlSocket, *, peer_uid_lookup: PeerUidLookup = peer_uid,
                                 expected_uid: int | None = None,
                                 connect_timeout_s: float = 5.0) -> tuple[ControlSocket, SocketStream]:
    """Connect to the checked target and verify the peer's uid; returns the socket with its peer check."""
    transport = UnixTransport(socket.target, expected_uid=expected_uid, peer_uid_lookup=peer_uid_lookup,
                              connect_timeout_s=connect_timeout_s, server=WORDING.server,
                              restart=WORDING.restart, start_hint=START_HINT)
    stream = await transport.connect()
    return attrs.evolve(socket, peer_check=stream.peer_check), stream


__all__ = ["START_HINT", "ControlSocket", "connect_control_socket", "resolve_control_socket"]
