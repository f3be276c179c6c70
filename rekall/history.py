"""``rekall history``: past jobs across threads, newest first, with their metrics.

Built from the journals (every job keeps one), so it covers more than the 20 entries the
status file summarises. A journal that cannot be read is listed with its error, not dropped.
"""

from __future__ import annotations

from datetime import datetime, time, timezone
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rekall.errors import InvalidInput, StoreError
from rekall.explain import describe_outcome
from rekall.ids import thread_id as valid_thread
from rekall.store import JobStore, Replay
from rekall.store.replay import ended_at


def parse_since(since: str) -> datetime:
    """An ISO date (midnight UTC) or date-time (UTC unless it names an offset)."""
    try:
        moment = datetime.fromisoformat(since.strip())
    except ValueError:
        raise InvalidInput(f"--since must be an ISO date or date-time such as 2026-11-30 or 2026-11-30T09:00; "
                           f"got {since!r:.60}", field="--since", hint="fix the date and try again") from None
    if len(since.strip()) == 10:  # a bare date
        moment = datetime.combine(moment.date(), time(), tzinfo=timezone.utc)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _when(iso: str | None) -> datetime | None:
    return None if not iso else datetime.fromisoformat(iso)


def _row(job: Replay) -> dict[str, Any]:
    f = job.view.fields
    created, ended = f.get("createdAt"), ended_at(f)
    start, end = _when(created), _when(ended)
    return {
        "threadId": job.thread_id,
        "jobId": job.job_id,
        "jobNumber": job.job_number,
        "state": job.state.value,
        "outcome": describe_outcome(job.state.value, f),
        "createdAt": created,
        "endedAt": ended,
        "durationMs": None if start is None or end is None else round((end - start).total_seconds() * 1000),
        **{key: f.get(key) for key in ("contextTokensBefore", "contextTokensAfter", "tokensReclaimed",
                                       "reclaimedFraction", "compactionDurationMs", "resumeDelayMs",
                                       "resumeSkipReason", "errorCode", "outcomeMayBeUnknown")},
    }


def collect_history(store: JobStore, thread: str | None = None, since: str | None = None) -> list[dict[str, Any]]:
    """One row per job, newest first; ``thread`` and ``since`` narrow the list."""
    wanted = valid_thread(thread) if thread else None
    after = parse_since(since) if since else None
    rows, unreadable = [], []
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
        rows.append(_row(job))
    rows.sort(key=lambda r: (r["createdAt"], r["jobNumber"]), reverse=True)
    return rows + unreadable  # an unreadable job has no date to sort or filter by: listed, never dropped


def _tokens(row: dict[str, Any]) -> str:
    before, after = row.get("contextTokensBefore"), row.get("contextTokensAfter")
    if before is None and after is None:
        return ""
    text = f"{before if before is not None else '?'} → {after if after is not None else '?'}"
    reclaimed = row.get("reclaimedFraction")
    return text + (f"\n{reclaimed:.0%} reclaimed" if isinstance(reclaimed, (int, float)) else "")


def _durations(row: dict[str, Any]) -> str:
    parts = [(row.get("compactionDurationMs"), "compaction"), (row.get("resumeDelayMs"), "to resume"),
             (row.get("durationMs"), "total")]
    return "\n".join(f"{value / 1000:.1f} s {label}" for value, label in parts if isinstance(value, (int, float)))


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + ("." if dot else "")


def print_history(rows: list[dict[str, Any]], console: Console) -> None:
    if not rows:
        console.print("No jobs yet.")
        return
    table = Table(title="Jobs, newest first", show_lines=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("thread\njob", no_wrap=True)
    table.add_column("tokens")
    table.add_column("durations")
    table.add_column("outcome", ratio=1)
    for row in rows:
        outcome = Text(row["state"], style="bold")
        outcome.append("\n" + _first_sentence(row["outcome"]))
        table.add_row((row.get("createdAt") or "")[:16].replace("T", "\n"),
                      f"{row['threadId'][:8]}\n{row['jobId'][:8]}", _tokens(row), _durations(row), outcome)
    console.print(table)
