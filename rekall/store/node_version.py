"""The Node version's jobs directory: read, never written.

The Node version of rekall (``DitriXNew/rekall``) keeps one status file per thread,
``<thread>.json``, with the latest job and up to 20 summaries of earlier ones under
``history``, and takes ``<thread>.lock`` (``{jobId, threadId}``) while its worker runs. Its
directory is ``CONTEXT_COMPACT_JOBS_DIR``, else ``$CODEX_HOME/tools/context-compact/jobs``.

rekall never writes there (Node's CLI reads every state it does not know, such as
``skipped``, as unfinished). It shows Node's jobs in ``history`` and ``status``, marked
``writtenBy: "node"``, and refuses to schedule a thread whose Node job may still run, so that
a thread never gets two jobs.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rekall.kernel.ids import is_uuid
from rekall.states.status import JobStatus, ended_at, wire
from rekall.store.errors import LockBusy
from rekall.store.fsread import STATUS_LIMIT, read_private
from rekall.store.processes import pid_exists

log = logging.getLogger("rekall.store")

#: Node's terminal states (it has no skipped or timed_out).
NODE_TERMINAL = frozenset({"completed", "resumed", "failed", "cancelled"})


def read_node_status(directory: Path, thread: str) -> dict[str, Any] | None:
    """Node's status file for ``thread``, or ``None`` when it is missing or unreadable (logged)."""
    path = directory / f"{thread}.json"
    try:
        value = json.loads(read_private(path, limit=STATUS_LIMIT).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.warning("the Node version's status file %s cannot be read: %s", path, exc)
        return None
    return value if isinstance(value, dict) else None


def _marked(entry: dict[str, Any], directory: Path, thread: str) -> dict[str, Any]:
    state = entry.get("status")
    return {**entry, **wire(JobStatus(threadId=thread, state=state if isinstance(state, str) else "unknown",
                                      writtenBy="node", jobsDir=str(directory)))}


def node_status(directories: Iterable[Path], thread: str) -> dict[str, Any] | None:
    """The thread's latest Node job, marked as the Node version's."""
    found = [(d, s) for d in directories if (s := read_node_status(d, thread)) is not None]
    if not found:
        return None
    directory, status = max(found, key=lambda pair: str(pair[1].get("createdAt") or ""))
    return _marked(status, directory, thread)


def node_jobs(directories: Iterable[Path], thread: str | None = None) -> list[dict[str, Any]]:
    """Every Node job the status files record (the latest and its history), marked; unsorted."""
    jobs = []
    for directory in directories:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            thread_id = name[: -len(".json")]
            if not name.endswith(".json") or not is_uuid(thread_id) or (thread and thread_id != thread):
                continue
            status = read_node_status(directory, thread_id)
            if status is None:
                continue
            earlier = status.get("history") if isinstance(status.get("history"), list) else []
            for entry in [*earlier, status]:
                if isinstance(entry, dict):
                    row = _marked({k: v for k, v in entry.items() if k != "history"}, directory, thread_id)
                    row["endedAt"] = ended_at(entry)
                    jobs.append(row)
    return jobs


def refuse_if_node_job_runs(directories: Iterable[Path], thread: str) -> None:
    """``LockBusy`` when the Node version holds the thread's lock and its job may still run."""
    for directory in directories:
        lock = directory / f"{thread}.lock"
        if not os.path.lexists(lock):
            continue
        status = read_node_status(directory, thread) or {}
        state, pid = status.get("status"), status.get("pid")
        if state in NODE_TERMINAL:
            continue  # its worker removes the lock when it ends; a leftover lock holds nothing
        if isinstance(pid, int) and not isinstance(pid, bool) and pid_exists(pid) is False:
            continue  # its worker is gone
        raise LockBusy(f"the Node version of rekall holds thread {thread} (job {status.get('jobId')}, "
                       f"{state or 'no status'}) in {directory}; rekall does not schedule a second job",
                       hint="wait for it to end (check it with the Node version's compaction_status), then "
                            "schedule again; rekall never changes the Node version's files")
