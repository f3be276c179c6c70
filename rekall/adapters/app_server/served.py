"""Who serves the shared app-server socket, which binary's schema to check, and ``doctor``'s rows.

``codex app-server daemon start`` records its server in ``$CODEX_HOME/app-server-daemon/daemon.pid``
(JSON: ``pid``, ``processStartTime``, ...) and runs the binary it installed under
``$CODEX_HOME/packages/app-server-daemon/current/bin/codex`` (what ``daemon version`` prints as
``managedCodexPath``). A server started by hand (``codex app-server --listen unix://PATH``) has
neither: its schema is checked against the ``codex`` on ``PATH``, with a note that it may not be
the binary that serves the socket.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from rekall.adapters.app_server.releases import RANGE, Release, UnsupportedCodex
from rekall.homes import env_value
from rekall.errors import RekallError
from rekall.platform import Row
from rekall.transports.base import EndpointMissing
from rekall.transports.control_socket import START_HINT, resolve_control_socket
from rekall.transports.endpoint import absolute_codex_home

DAEMON_PID = Path("app-server-daemon") / "daemon.pid"
MANAGED_CODEX = Path("packages") / "app-server-daemon" / "current" / "bin" / "codex"
DOCTOR_TIMEOUT_S = 8.0


@attrs.frozen
class ServedBy:
    """Whether the daemon serves the socket, and the binary whose schema stands for the server's."""

    daemon_pid: int | None
    binary: str | None
    #: Where ``binary`` came from, in words (and why it may differ from the server's).
    note: str

    @property
    def daemon_managed(self) -> bool:
        return self.daemon_pid is not None


def _running_daemon(pid_file: Path, proc: Path) -> int | None:
    """The daemon's pid when its record names a live ``codex app-server --managed-daemon``."""
    try:
        pid = json.loads(pid_file.read_text(encoding="utf-8"))["pid"]
        argv = (proc / str(int(pid)) / "cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return int(pid) if b"app-server" in argv and b"--managed-daemon" in argv else None


def served_by(env: Mapping[str, str], *, proc: Path = Path("/proc")) -> ServedBy:
    home = Path(absolute_codex_home(env))
    pid = _running_daemon(home / DAEMON_PID, proc)
    if pid is not None and env_value(env, "REKALL_APP_SERVER_SOCKET") is None:
        return ServedBy(pid, str(home / MANAGED_CODEX), f"the daemon's managedCodexPath (daemon pid {pid})")
    on_path = shutil.which("codex", path=env.get("PATH"))
    why = ("the server is not daemon-managed" if pid is None
           else "REKALL_APP_SERVER_SOCKET names a socket the daemon may not serve")
    if on_path is None:
        return ServedBy(pid, None, f"{why}, and no `codex` is on PATH")
    return ServedBy(pid, on_path, f"the `codex` on PATH ({why}: it may not be the binary serving the socket)")


def schema_report(env: Mapping[str, str], server_version: str | None) -> dict[str, Any]:
    """The public schema check for the shared app-server's binary (cached by binary identity), with
    where the server's own version stands (``release``). A schema that could not be checked is
    taken on trust only for a release in the declared range: otherwise the report carries the
    ``refusal`` that ``schedule`` raises."""
    from rekall.codex.schema import check_compatibility, default_cache_dir

    release = Release.of(server_version)
    served = served_by(env)
    if served.binary is None:
        report: dict[str, Any] = {"status": "not_checked", "reason": "no_binary", "note": served.note}
    else:
        report = check_compatibility(Path(served.binary), cache_dir=default_cache_dir(env),
                                     suite="app-server").to_json()
        report.update(binaryPath=served.binary, binaryNote=served.note)
    report["release"] = release.to_json()
    if report["status"] == "not_checked" and release.standing != "supported":
        report["refusal"] = {"message": f"{release.words}, and its schema could not be checked ({served.note})",
                             "hint": f"put the Codex that serves the socket on PATH, or run Codex {RANGE}"}
    return report


# --- doctor ---------------------------------------------------------------------------------


async def diagnose(env: Mapping[str, str]) -> list[Row]:
    """``app_server_socket``, ``app_server`` and ``app_server_schema`` (and ``app_server_thread``
    when CODEX_THREAD_ID is set)."""
    from rekall.adapters.app_server.platform import SERVED_SESSIONS, observe_on, out_of_reach
    from rekall.adapters.app_server.shared import open_shared_app_server

    thread = env_value(env, "CODEX_THREAD_ID")
    later = ["app_server", *(["app_server_thread"] if thread is not None else []), "app_server_schema"]
    try:
        socket = resolve_control_socket(env)
    except EndpointMissing as exc:
        # Not an error: only threads of terminal sessions need it. A thread that is nobody's is the owner rows' news.
        rows = [Row.green("app_server_socket", f"{exc.message}; only {SERVED_SESSIONS} need it")]
        for name in later:
            if name == "app_server_thread":
                rows.append(Row("app_server_thread", "AMBER", *out_of_reach(
                    f"thread {thread} is not on a shared app-server: none runs here")))
            else:
                rows.append(Row.green(name, "not applicable: no shared app-server runs"))
        return rows
    except RekallError as exc:
        return [Row.failed("app_server_socket", exc)] + [
            Row.not_checked(name, "the socket failed its checks", "fix the app_server_socket row first")
            for name in later]
    rows = [Row.green("app_server_socket", "; ".join(socket.checks))]
    served = served_by(env)
    version: str | None = None
    try:
        async with asyncio.timeout(DOCTOR_TIMEOUT_S):
            async with open_shared_app_server(env, socket=socket, timeout_s=DOCTOR_TIMEOUT_S) as server:
                version = server.server_version
                who = (f"the daemon (pid {served.daemon_pid})" if served.daemon_managed
                       else "an app-server not managed by `codex app-server daemon`")
                rows.append(Row.green("app_server", f"initialize answered on {socket.target}: Codex "
                                                    f"{server.server_version or 'version unknown'}, served by {who}; "
                                                    f"peer check: {server.socket.peer_check}"))
                if thread is not None:
                    rows.append(await _thread_row(observe_on, server, thread))
    except TimeoutError:
        rows.append(Row("app_server", "RED", f"no answer on {socket.target} within {DOCTOR_TIMEOUT_S:g} s",
                        "the app-server may be hung; restart it (`codex app-server daemon restart`)"))
    except BaseException as exc:
        from rekall.adapters.app_server.platform import unwrap

        inner = unwrap(exc)
        if not isinstance(inner, RekallError):
            raise
        if isinstance(inner, UnsupportedCodex):
            version = inner.release.version
        rows.append(Row.failed("app_server", inner))
    if thread is not None and rows[-1].name == "app_server":  # the server did not answer
        rows.append(Row.not_checked("app_server_thread", "the app-server did not answer", "fix the app_server row first"))
    rows.append(await asyncio.to_thread(_schema_row, env, version))
    return rows


async def _thread_row(observe_on: Any, server: Any, thread: str) -> Row:
    try:
        seen = await observe_on(server, thread, DOCTOR_TIMEOUT_S)
    except RekallError as exc:
        return Row("app_server_thread", "AMBER", exc.message, exc.hint or "see the detail")
    facts = seen.facts
    return Row.green("app_server_thread", f"thread {thread} is loaded in the shared app-server; status "
                                          f"{facts.runtime_status}, {'idle' if facts.idle else facts.busy_reason}")


def _schema_row(env: Mapping[str, str], version: str | None) -> Row:
    try:
        report = schema_report(env, version)
    except RekallError as exc:
        return Row.failed("app_server_schema", exc)
    if "refusal" in report:
        return Row("app_server_schema", "RED", report["refusal"]["message"],
                   f"{report['refusal']['hint']}; schedule refuses until then")
    if report["status"] == "not_checked":
        return Row("app_server_schema", "AMBER", f"not checked: {report['note']}; {Release.of(version).words}",
                   "put the Codex that serves the socket on PATH")
    binary = f"{report['binaryPath']} ({report['binaryNote']})"
    if report["status"] != "compatible":
        failed = "; ".join(f"{c['name']}: {c['detail']}" for c in report["checks"] if not c["passed"])
        return Row("app_server_schema", "RED", f"Codex {report['binary']['version']} at {binary} fails {failed}",
                   "use a Codex version rekall supports, or update rekall; schedule refuses until then")
    return Row.green("app_server_schema", f"Codex {report['binary']['version']} at {binary}: all "
                                          f"{len(report['checks'])} checks pass")


__all__ = ["ServedBy", "diagnose", "schema_report", "served_by"]
