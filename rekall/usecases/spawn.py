"""Starting the detached worker process.

The worker must outlive whoever scheduled it (an MCP server, a CLI call): on POSIX it gets
a new session, on Windows ``DETACHED_PROCESS``. Its stdin and stdout are the null device and
its stderr goes to the job's log file, so a crash before logging starts is still visible.
The log is opened like every jobs-directory file: 0600, never through a symlink.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rekall.kernel.environment import user_home
from rekall.store.fsio import open_private_append

if TYPE_CHECKING:
    from rekall.adapters.resume import ResumeToken


def spawn_worker(thread_id: str, job_id: str, *, log_path: Path, env: Mapping[str, str],
                 scheduled: ResumeToken | None = None) -> int:
    """Start ``rekall worker THREAD JOB [SCHEDULED]`` detached and return its pid. ``scheduled``:
    where the job's journal says schedule found the thread (see ``rekall.adapters.resume.ResumeToken``)."""
    fd = open_private_append(log_path)
    # The worker must find the same lock directory (derived from HOME) as its scheduler.
    child_env = {**env, "HOME": str(user_home(env))}
    try:
        kwargs: dict = {}
        if sys.platform == "win32":
            kwargs["creationflags"] = (
                subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.CREATE_NO_WINDOW
            )
        else:
            kwargs["start_new_session"] = True
        child = subprocess.Popen(
            [sys.executable, "-m", "rekall", "worker", thread_id, job_id,
             *(() if scheduled is None else (scheduled.to_argument(),))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=fd,
            env=child_env,
            close_fds=True,
            **kwargs,
        )
    finally:
        os.close(fd)
    # A long-lived scheduler (the MCP server) must reap its children, or a finished worker
    # lingers as a zombie whose pid still looks alive.
    threading.Thread(target=child.wait, name=f"reap-{child.pid}", daemon=True).start()
    return child.pid
