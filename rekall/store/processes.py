"""Who holds a lock, and whether that process is provably gone; and which rekall workers run.

A PID alone cannot name a process: PIDs are reused. A holder is (machine, pid, process start
time), read with ``psutil`` on every platform. It is declared dead only on proof: the same
machine, and the PID does not exist, is a zombie, or now belongs to a process that started at
another time. A lock from another machine, or one without a PID (the Node version wrote none),
is "unknown" and treated as held.

The start-time token:

* Linux: ``linux:<boot id>:<clock ticks from boot to the process start>``. The boot id
  (``/proc/sys/kernel/random/boot_id``) changes at every boot, and the tick count never moves
  when the wall clock is set. The boot id also proves "same machine" when the host name
  changed since the lock was written.
* Elsewhere: ``psutil:<start time>:<boot time>``, both wall-clock seconds. Setting the clock
  may move both (they are derived from the current clock minus an uptime) or neither, so two
  readings name the same process when either the start times or the start-since-boot offsets
  agree within ``START_TOLERANCE_S``.

``ps -o lstart`` (the earlier macOS/BSD source) printed local time, so a reader with another
``TZ`` judged a live worker dead; tokens written that way (``ps:``, ``win:``) can no longer be
compared and make the verdict "unknown", never "dead".

:func:`worker_processes` lists this user's running ``rekall worker`` processes with the same
"still running" rule (``doctor`` compares them with the locks).
"""

from __future__ import annotations

import os
import socket
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from rekall.kernel.errors import RekallError
from rekall.kernel.ids import is_uuid
from rekall.store.paths import resolve_jobs_dir

if TYPE_CHECKING:  # psutil is imported where a process is examined: reading a finished job never needs it
    import psutil

#: Readings of one process's start differ by rounding and by the boot time moving a second
#: between two reads; a PID is never reused that fast.
START_TOLERANCE_S = 2.0
_LINUX = sys.platform.startswith("linux")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and _LINUX else 100


class Liveness(str, Enum):
    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"


@attrs.frozen(kw_only=True)
class LockHolder:
    """The content of ``<thread>.lock``."""

    job_id: str
    thread_id: str
    pid: int | None = None
    process_start_time: str | None = None
    host: str | None = None
    created_at: str | None = None
    #: The jobs directory holding the job's journal (the lock lives outside it; see ``paths``).
    jobs_dir: str | None = None


def this_host() -> str:
    return socket.gethostname()


def boot_id() -> str | None:
    """Linux's per-boot random id; ``None`` elsewhere or when unreadable."""
    if not _LINUX:
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as handle:
            value = handle.read(64).decode("ascii", "replace").strip()
    except OSError:
        return None
    return value or None


def process_start_time(pid: int) -> str | None:
    """A token that changes when ``pid`` is reused; ``None`` when it cannot be read here."""
    import psutil

    try:
        created = psutil.Process(pid).create_time()
        booted = psutil.boot_time()
    except (psutil.Error, OSError, ValueError):
        return None
    boot = boot_id()
    if boot is not None:
        return f"linux:{boot}:{round((created - booted) * _TICKS_PER_S)}"
    return f"psutil:{created:.3f}:{booted:.3f}"


def _parse(token: str) -> tuple[str, str, float] | None:
    """``(kind, first, second)`` of a token this version writes; ``None`` for any other."""
    kind, _, rest = token.partition(":")
    first, _, second = rest.rpartition(":")
    if kind not in ("linux", "psutil") or not first:
        return None
    try:
        return kind, first, float(second)
    except ValueError:
        return None


def same_process(recorded: str, current: str) -> bool | None:
    """Do two start-time tokens of one PID name the same process? ``None`` when they cannot be compared."""
    a, b = _parse(recorded), _parse(current)
    if a is None or b is None or a[0] != b[0]:
        return None
    if a[0] == "linux":
        if a[1] != b[1]:
            return False  # another boot: the recorded process ended with it
        return abs(a[2] - b[2]) <= START_TOLERANCE_S * _TICKS_PER_S
    created_a, created_b = float(a[1]), float(b[1])
    if abs(created_a - created_b) <= START_TOLERANCE_S:
        return True
    # The clock was set between the readings and moved both the start and the boot time.
    return abs((created_a - a[2]) - (created_b - b[2])) <= START_TOLERANCE_S


def token_boot_id(token: str | None) -> str | None:
    parsed = None if token is None else _parse(token)
    return parsed[1] if parsed is not None and parsed[0] == "linux" else None


def _running(process: psutil.Process) -> bool:
    """The one rule for "still running": a zombie has finished running, whatever its PID says."""
    import psutil

    return process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def pid_exists(pid: int) -> bool | None:
    """True, False, or None when it cannot be told. A zombie has finished running."""
    import psutil

    if pid <= 0:
        return False
    try:
        return _running(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # exists, owned by someone else
    except (psutil.Error, OSError):
        return None


def process_stopped(pid: int) -> bool | None:
    """True when ``pid`` is stopped (``SIGSTOP``, job control, a debugger): alive, but it runs
    nothing, its timers included, until continued. ``None`` when it cannot be told."""
    import psutil

    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except (psutil.Error, OSError):
        return None


def same_machine(holder: LockHolder, host: str) -> bool:
    """The lock was written on this machine: same host name, or (renamed host) this boot's id."""
    boot = token_boot_id(holder.process_start_time)
    if boot is not None and boot == boot_id():
        return True
    return holder.host is not None and holder.host == host


def liveness(holder: LockHolder, *, host: str | None = None) -> Liveness:
    """ALIVE, DEAD (proven), or UNKNOWN (another machine, or no identity recorded)."""
    if holder.pid is None or not same_machine(holder, host or this_host()):
        return Liveness.UNKNOWN
    exists = pid_exists(holder.pid)
    if exists is None:
        return Liveness.UNKNOWN
    if not exists:
        return Liveness.DEAD
    if holder.process_start_time is None:
        return Liveness.ALIVE  # cannot prove reuse: treat as the holder
    current = process_start_time(holder.pid)
    if current is None:
        return Liveness.DEAD if pid_exists(holder.pid) is False else Liveness.UNKNOWN
    same = same_process(holder.process_start_time, current)
    if same is None:
        return Liveness.UNKNOWN  # a token of an earlier rekall that cannot be compared
    return Liveness.ALIVE if same else Liveness.DEAD


# --- rekall's worker processes ------------------------------------------------------------


@attrs.frozen
class WorkerProcess:
    pid: int
    thread_id: str
    job_id: str
    #: The jobs directory its environment resolves to.
    jobs_dir: Path


def worker_processes() -> list[WorkerProcess]:
    """This user's running ``rekall worker THREAD JOB [SCHEDULED]`` processes, with the jobs directory each uses.

    "Running" is :func:`pid_exists`'s rule (a zombie is not). ``doctor`` compares them with the locks.
    """
    import psutil

    uid = os.geteuid()
    found = []
    for process in psutil.process_iter():
        try:
            if process.uids().effective != uid:
                continue
            ids = _worker_ids(process.cmdline())
            if ids is None or not _running(process):
                continue
            jobs_dir = resolve_jobs_dir(process.environ())
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or not ours to read
        except RekallError:
            continue  # its environment names no usable jobs directory (e.g. a relative CODEX_HOME)
        found.append(WorkerProcess(process.pid, *ids, jobs_dir))
    return found


def _worker_ids(argv: list[str]) -> tuple[str, str] | None:
    """``(thread, job)`` when ``argv`` is ``… rekall worker THREAD JOB [SCHEDULED]`` (module or entry point)."""
    for i in range(len(argv) - 3):
        if (argv[i] == "rekall" or argv[i].endswith("/rekall")) and argv[i + 1] == "worker" \
                and is_uuid(argv[i + 2]) and is_uuid(argv[i + 3]):
            return argv[i + 2].lower(), argv[i + 3].lower()
    return None
