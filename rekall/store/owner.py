"""Who holds a lock, and whether that process is provably gone.

A PID alone cannot name a process: PIDs are reused. An owner is (host, pid, process start
time). It is declared dead only on proof: same host, and the PID does not exist, is a
zombie, or now belongs to a process that started at another time. A lock from another
host, or one without a PID (the Node version wrote none), is "unknown" and treated as held.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from enum import Enum

import attrs


class Liveness(str, Enum):
    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"


@attrs.frozen(kw_only=True)
class LockOwner:
    """The content of ``<thread>.lock``."""

    job_id: str
    thread_id: str
    pid: int | None = None
    process_start_time: str | None = None
    host: str | None = None
    created_at: str | None = None


def this_host() -> str:
    return socket.gethostname()


def process_start_time(pid: int) -> str | None:
    """A token that changes when ``pid`` is reused; ``None`` when it cannot be read here."""
    if sys.platform.startswith("linux"):
        return _linux_start(pid)
    if sys.platform == "win32":
        return _windows_start(pid)
    return _ps_start(pid)


def _linux_stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; fields resume after the last ')'.
    return raw[raw.rfind(")") + 2:].split()


def _linux_start(pid: int) -> str | None:
    fields = _linux_stat(pid)
    if fields is None:
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
    except OSError:
        boot = "unknown-boot"
    return f"linux:{boot}:{fields[19]}"  # field 22 of stat: start time in clock ticks since boot


def _ps_start(pid: int) -> str | None:
    try:
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    started = " ".join(out.stdout.split())
    return f"ps:{started}" if out.returncode == 0 and started else None


def _windows_start(pid: int) -> str | None:  # pragma: no cover - exercised on Windows only
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return None
    try:
        times = [wintypes.FILETIME() for _ in range(4)]
        if not kernel32.GetProcessTimes(handle, *(ctypes.byref(t) for t in times)):
            return None
        created = times[0]
        return f"win:{(created.dwHighDateTime << 32) | created.dwLowDateTime}"
    finally:
        kernel32.CloseHandle(handle)


def _windows_alive(pid: int) -> bool | None:  # pragma: no cover - exercised on Windows only
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        error = ctypes.get_last_error()
        return False if error == 87 else (True if error == 5 else None)  # invalid pid / access denied
    try:
        code = wintypes.DWORD()
        if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
            return None
        return code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def _pid_exists(pid: int) -> bool | None:
    """True, False, or None when it cannot be told."""
    if pid <= 0:
        return False
    if sys.platform == "win32":  # pragma: no cover - os.kill(pid, 0) would send CTRL_C there
        return _windows_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return None
    if sys.platform.startswith("linux"):
        fields = _linux_stat(pid)
        if fields is not None and fields[0] in ("Z", "X"):  # a zombie has finished running
            return False
    return True


def liveness(owner: LockOwner, *, host: str | None = None) -> Liveness:
    """ALIVE, DEAD (proven), or UNKNOWN (another host, or no identity recorded)."""
    if owner.pid is None or owner.host is None or owner.host != (host or this_host()):
        return Liveness.UNKNOWN
    exists = _pid_exists(owner.pid)
    if exists is None:
        return Liveness.UNKNOWN
    if not exists:
        return Liveness.DEAD
    if owner.process_start_time is None:
        return Liveness.ALIVE  # cannot prove reuse: treat as the owner
    current = process_start_time(owner.pid)
    if current is None:
        return Liveness.DEAD if _pid_exists(owner.pid) is False else Liveness.UNKNOWN
    return Liveness.ALIVE if current == owner.process_start_time else Liveness.DEAD
