"""``rekall history``: past jobs across threads, newest first, with their metrics.

Built from the journals (every job keeps one), so it covers more than the 20 entries the
status file summarises. A journal that cannot be read is listed with its error, not dropped.
"""

from __future__ import annotations

from datetime import datetime, time, timezone
from typing import TYPE_CHECKING, Any

import attrs

from rekall.errors import InvalidInput, StoreError
from rekall.explain import describe_outcome
from rekall.ids import thread_id as valid_thread
from rekall.states.status import METRICS, JobStatus, ended_at, known, read
from rekall.store import JobStore, Replay
from rekall.store.node import node_jobs

_S = attrs.fields(JobStatus)
#: What a row keeps of the job's status: its metrics, then how it ended.
_KEPT = (*METRICS, _S.resumeSkipReason.name, _S.errorCode.name, _S.outcomeMayBeUnknown.name)

if TYPE_CHECKING:  # rich is imported by the printer only: `--json` output never loads it
    from rich.console import Console


def parse_since(since: str) -> datetime:
    """An ISO date (midnight UTC) or date-time (UTC unless it names an offset)."""
    try:
        moment = datetime.fromisoformat(since.strip())
    except ValueError:
        raise InvalidInput("--since must be an ISO date or date-time such as 2026-11-30 or 2026-11-30T09:00",
                           field="--since", hint="fix the date and try again") from None
    if len(since.strip()) == 10:  # a bare date
        moment = datetime.combine(moment.date(), time(), tzinfo=timezone.utc)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _when(iso: str | None) -> datetime | None:
    return None if not iso else datetime.fromisoformat(iso)


def _metrics(status: dict[str, Any]) -> dict[str, Any]:
    return {key: status.get(key) for key in _KEPT}


def _node_row(job: dict[str, Any]) -> dict[str, Any]:
    state = job["state"]
    return {"threadId": job["threadId"], "jobId": job.get("jobId"), "jobNumber": job.get("jobNumber") or 0,
            "state": state, "platform": "extension-ipc", "outcome": f"Written by the Node version of rekall: {state}"
                                       + (f" ({job['error']})" if job.get("error") else "") + ".",
            "createdAt": job.get("createdAt") or "", "endedAt": job.get("endedAt"), "durationMs": None,
            **_metrics(job), "writtenBy": "node", "jobsDir": job["jobsDir"]}


def _row(job: Replay, status: dict[str, Any]) -> dict[str, Any]:
    f = status  # the journal's view, unless a lost worker could not be journaled (see JobStore.status_of)
    created, ended = f.get("createdAt"), ended_at(f)
    start, end = _when(created), _when(ended)
    return {
        "threadId": job.thread_id,
        "jobId": job.job_id,
        "jobNumber": job.job_number,
        "state": f["state"],
        # Jobs scheduled before platforms were recorded all ran on the extension: the only one then.
        "platform": known(read(f).platform) or "extension-ipc",
        "outcome": describe_outcome(f["state"], f),
        "createdAt": created,
        "endedAt": ended,
        "durationMs": None if start is None or end is None else round((end - start).total_seconds() * 1000),
        **_metrics(f),
    }


def collect_history(store: JobStore, thread: str | None = None, since: str | None = None) -> list[dict[str, Any]]:
    """One row per job, newest first; ``thread`` and ``since`` narrow the list."""
    wanted = valid_thread(thread) if thread else None
    after = parse_since(since) if since else None
    rows, unreadable = [], []
    store.reap_all()  # a dead worker is recorded before its job is listed
    for thread_id, job_id in store.all_jobs():
        if wanted and thread_id != wanted:
            continue
        try:
            job = store.load(thread_id, job_id)
        except StoreError as exc:
            unreadable.append({"threadId": thread_id, "jobId": job_id, "state": "unreadable",
                               "outcome": f"Unreadable journal: {exc.message}", "error": exc.to_dict()})
            continue
        if after is not None and datetime.fromisoformat(job.created_at) < after:
            continue
        rows.append(_row(job, store.current_fields(job)))
    for node in node_jobs(store.node_dirs, wanted):  # the Node version's jobs, read only and marked
        if after is None or (node.get("createdAt") and datetime.fromisoformat(node["createdAt"]) >= after):
            rows.append(_node_row(node))
    rows.sort(key=lambda r: (r["createdAt"], r["jobNumber"]), reverse=True)
    return rows + unreadable  # an unreadable job has no date to sort or filter by: listed, never dropped


def _durations(row: dict[str, Any]) -> str:
    parts = [(row.get("compactionDurationMs"), "compaction"), (row.get("resumeDelayMs"), "resume delay"),
             (row.get("durationMs"), "total")]
    shown = ", ".join(f"{label} {value / 1000:.1f} s" for value, label in parts if isinstance(value, (int, float)))
    return shown and "durations: " + shown


def print_history(rows: list[dict[str, Any]], console: Console, *, left_out: int = 0) -> None:
    """One short block per job: when, state, short ids (any 8+ character prefix works as an id),
    the outcome in words (with the warning when the outcome may be unknown), and durations."""
    from rich.padding import Padding
    from rich.text import Text

    if not rows:
        console.print("No jobs yet." if not left_out else f"No jobs shown; {left_out} left out.")
        return
    console.print(Text("Jobs, newest first", style="bold"))
    for row in rows:
        console.print()
        head = Text((row.get("createdAt") or "unknown date")[:16].replace("T", " ") + "  ")
        head.append(row["state"], style="bold")
        head.append(f"  job {row['jobId'][:8]}  thread {row['threadId'][:8]}")
        if row.get("outcomeMayBeUnknown"):
            head.append("  outcome may be unknown", style="bold yellow")
        console.print(head)
        console.print(Padding(Text(row["outcome"]), (0, 0, 0, 2)))
        durations = _durations(row)
        if durations:
            console.print(Padding(Text(durations, style="dim"), (0, 0, 0, 2)))
    if left_out:
        console.print()
        console.print(Text(f"{left_out} older job{'s' if left_out != 1 else ''} left out; "
                           f"`rekall history --limit N` shows more.", style="dim"))


def print_prune(result: dict[str, Any], console: Console) -> None:
    verb = "Would remove" if result["dryRun"] else "Removed"
    console.print(f"{verb} {result['prunedJobs']} job(s), {result['freedBytes']:,} bytes, from {result['jobsDir']}; "
                  f"{result['keptJobs']} kept.")
    for row in result["pruned"]:
        console.print(f"  {row['threadId'][:8]} {row['jobId'][:8]} {row['state']:<10} ended {row['endedAt']}")
    for row in result["skipped"]:
        console.print(f"  skipped {row['threadId'][:8]}: {row['reason']}")
