"""``rekall history``: past jobs across threads, newest first, with their metrics.

Built from the journals (every job keeps one), so it covers more than the 20 entries the
status file summarises. A journal that cannot be read is listed with its error, not dropped.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, time, timezone
from typing import TYPE_CHECKING, Any

import attrs

from rekall.adapters.registry import UNNAMED
from rekall.kernel.errors import InvalidInput, StoreError
from rekall.surfaces.explain import describe_outcome
from rekall.kernel.ids import thread_id as valid_thread
from rekall.states.status import METRICS, JobStatus, ended_at, known, read, wire
from rekall.store import JobStore, Replay
from rekall.store.node_version import node_jobs
from rekall.store.views import HistoryRows, Row, job_stamp, row_text

log = logging.getLogger("rekall.store")

_S = attrs.fields(JobStatus)
#: What a row keeps of the job's status: its metrics, then how it ended.
_KEPT = (*METRICS, _S.resumeSkipReason.name, _S.handoffDelivery.name, _S.errorCode.name,
         _S.outcomeMayBeUnknown.name)

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
            "state": state, "platform": UNNAMED, "outcome": f"Written by the Node version of rekall: {state}"
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
        "platform": known(read(f).platform) or UNNAMED,
        "outcome": describe_outcome(f["state"], f),
        "createdAt": created,
        "endedAt": ended,
        "durationMs": None if start is None or end is None else round((end - start).total_seconds() * 1000),
        **_metrics(f),
    }


def collect_history(store: JobStore, thread: str | None = None, since: str | None = None) -> list[dict[str, Any]]:
    """One row per job, newest first; ``thread`` and ``since`` narrow the list.

    An ended job's row is taken from the saved rows while its journal's stamp matches, and
    the rows of jobs that ended since are saved for the next reader (:mod:`rekall.store.views`).
    """
    wanted = valid_thread(thread) if thread else None
    after = parse_since(since) if since else None
    rows, unreadable = [], []
    store.reap_all()  # a dead worker is recorded before its job is listed
    saved = HistoryRows.load(store.paths) or HistoryRows()
    kept = HistoryRows()
    for thread_id, job_id in store.all_jobs():
        key = f"{thread_id}.{job_id}"
        if wanted and thread_id != wanted:
            if key in saved.rows:
                kept.rows[key] = saved.rows[key]  # not read here: kept as saved
            continue
        try:
            fields, scheduled_at, ended = _job_row(store, saved, thread_id, job_id)
        except StoreError as exc:
            unreadable.append({"threadId": thread_id, "jobId": job_id, "state": "unreadable",
                               "outcome": f"Unreadable journal: {exc.message}", "error": exc.to_dict()})
            continue
        if ended is not None:
            kept.rows[key] = ended
        if after is None or datetime.fromisoformat(scheduled_at) >= after:
            rows.append(fields)
    if kept.rows != saved.rows:
        _save_rows(store, kept)
    for node in node_jobs(store.node_dirs, wanted):  # the Node version's jobs, read only and marked
        if after is None or (node.get("createdAt") and datetime.fromisoformat(node["createdAt"]) >= after):
            rows.append(_node_row(node))
    rows.sort(key=lambda r: (r["createdAt"], r["jobNumber"]), reverse=True)
    return rows + unreadable  # an unreadable job has no date to sort or filter by: listed, never dropped


def _job_row(store: JobStore, saved: HistoryRows, thread_id: str,
             job_id: str) -> tuple[dict[str, Any], str, Row | None]:
    """The job's row, when its journal says it was scheduled, and the row to save if it has ended."""
    try:
        current = job_stamp(store.paths, thread_id, job_id)  # taken before the journal is read
    except FileNotFoundError:
        current = None  # gone meanwhile: loading it reports that
    row = saved.get(f"{thread_id}.{job_id}", current) if current is not None else None
    if row is not None:
        return json.loads(row.text), row.scheduled_at, row
    job = store.load(thread_id, job_id)
    fields = _row(job, wire(store.current_fields(job)))
    if current is None or not job.state.terminal:
        return fields, job.created_at, None  # a running job's row changes: never saved
    return fields, job.created_at, Row(current, fields["createdAt"], job.job_number, job.created_at,
                                       row_text(fields))


def _save_rows(store: JobStore, rows: HistoryRows) -> None:
    """Save the rows for the next reader, if the jobs directory exists (a reader creates no folder).
    A failure costs the next reader only time, so it is not reported."""
    if store.root.is_dir():
        try:
            store.fs.atomic_replace(store.paths.history_rows(), rows.encode())
        except OSError as exc:
            log.debug("history rows not saved: %s", exc)
def _durations(row: dict[str, Any]) -> str:
    parts = [(row.get("compactionDurationMs"), "compaction"), (row.get("resumeDelayMs"), "resume delay"),
             (row.get("durationMs"), "total")]
    shown = ", ".join(f"{label} {value / 1000:.1f} s" for value, label in parts if isinstance(value, (int, float)))
    return shown and "durations: " + shown


def print_checkpoints(store: JobStore, console: Console, *, thread: str | None = None) -> None:
    """After the jobs, each thread's standing checkpoint (only ``thread``'s when given)."""
    from rich.text import Text

    from rekall.store.checkpoint import summary
    from rekall.surfaces.explain import checkpoint_lines

    for thread_id in [thread] if thread else store.paths.checkpoint_threads():
        shown = summary(store.root, thread_id)
        if shown is None:
            continue
        console.print()
        console.print(Text(f"thread {thread_id}", style="bold"))
        for line in checkpoint_lines(shown):
            console.print(Text(line))


def print_history(rows: list[dict[str, Any]], console: Console, *, left_out: int = 0) -> None:
    """One short block per job: when, state, short ids (any 8+ character prefix works as an id),
    the outcome in words (with the warning when the outcome may be unknown), and durations."""
    from rich.text import Text

    from rekall.surfaces.render import Indented

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
        console.print(Indented(Text(row["outcome"]), 2))
        durations = _durations(row)
        if durations:
            console.print(Indented(Text(durations, style="dim"), 2))
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
    for row in result.get("prunedCheckpoints", ()):
        console.print(f"  {row['threadId'][:8]} checkpoint ({len(row['files'])} file(s)), last saved or cleared "
                      f"{row['lastEventAt']}")
    for row in result["skipped"]:
        console.print(f"  skipped {row['threadId'][:8]}: {row['reason']}")
