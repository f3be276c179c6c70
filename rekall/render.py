"""Readable output for people: probe results, job status, and the live status view."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rekall.states import TERMINAL_STATES

_STATE_STYLE = {
    "resumed": "bold green",
    "completed": "bold green",
    "skipped": "bold yellow",
    "cancelled": "bold yellow",
    "timed_out": "bold red",
    "failed": "bold red",
    "not_scheduled": "dim",
}

# The fields worth a person's attention, in reading order.
_JOB_FIELDS = (
    ("jobId", "job"),
    ("jobNumber", "job number"),
    ("resume", "resume requested"),
    ("createdAt", "created"),
    ("requestedAt", "compaction requested"),
    ("acceptedAt", "accepted"),
    ("compactionCompletedAt", "compaction completed"),
    ("contextTokensBefore", "tokens before"),
    ("contextTokensAfter", "tokens after"),
    ("reclaimedFraction", "reclaimed"),
    ("compactionDurationMs", "compaction took (ms)"),
    ("contextWindowUsedFraction", "window used after"),
    ("resumeSkipReason", "resume skipped because"),
    ("resumeTurnId", "continuation turn"),
    ("resumeDelayMs", "resume delay (ms)"),
    ("reason", "cancel reason"),
    ("errorCode", "error code"),
    ("error", "error"),
    ("outcomeMayBeUnknown", "outcome may be unknown"),
    ("message", "note"),
)


def _fmt(key: str, value: Any) -> str:
    if isinstance(value, float) and key.endswith("Fraction"):
        return f"{value:.1%}"
    if isinstance(value, float):
        return f"{value:.0f}"
    return str(value)


def state_text(state: str) -> Text:
    return Text(state, style=_STATE_STYLE.get(state, "bold cyan"))


def job_table(job: Mapping[str, Any]) -> Table:
    state = str(job.get("state") or job.get("status") or "unknown")
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim", justify="right")
    table.add_column()
    table.add_row("thread", str(job.get("threadId", "")))
    table.add_row("state", state_text(state))
    if job.get("alreadyScheduled"):
        table.add_row("", Text("already scheduled: this is the unfinished job", style="yellow"))
    for key, label in _JOB_FIELDS:
        value = job.get(key)
        if value is not None and value != "":
            table.add_row(label, _fmt(key, value))
    return table


def print_job(job: Mapping[str, Any], console: Console) -> None:
    console.print(job_table(job))


def print_message(result: Mapping[str, Any], console: Console) -> None:
    console.print(f"[bold]{result['message']}[/bold]")


def print_probe(result: Mapping[str, Any], console: Console) -> None:
    table = Table(title=f"probe {result.get('threadId')}", show_header=False, box=None, padding=(0, 2))
    table.add_column(style="dim", justify="right")
    table.add_column()
    headroom = result.get("headroom") or {}
    used = headroom.get("usedFraction")
    endpoint = result.get("endpoint") or {}
    compat = result.get("compatibility") or {}
    rows = [
        ("owner", result.get("ownerId")),
        ("endpoint", endpoint.get("path") if isinstance(endpoint, Mapping) else endpoint),
        ("endpoint kind", endpoint.get("kind") if isinstance(endpoint, Mapping) else None),
        ("adapter", result.get("adapter")),
        ("runtime", result.get("runtimeStatus")),
        ("idle", result.get("idle")),
        ("completed compactions", result.get("completedCompactions")),
        ("context tokens", result.get("contextTokens")),
        ("context window", result.get("modelContextWindow")),
        ("window used", None if used is None else f"{used:.1%}"),
        ("runtime layout", (compat.get("runtime") or {}).get("status")),
        ("public schema", (compat.get("publicSchema") or {}).get("status")),
        ("extension version", result.get("extensionVersion")),
    ]
    for label, value in rows:
        if value is not None:
            table.add_row(label, str(value))
    console.print(table)


def watch_job(read: Callable[[], tuple[Mapping[str, Any], list[str]]], console: Console, *, quiet: bool = False,
              interval_s: float = 0.1, max_s: float = 3600.0) -> Mapping[str, Any]:
    """Show a job live until it reaches a terminal state (or ``max_s`` passes).

    ``read`` returns the current status and the states the job has passed through (from its
    journal, so no state is missed between two reads).
    """
    import time

    deadline = time.monotonic() + max_s
    terminal = {s.value for s in TERMINAL_STATES} | {"not_scheduled"}
    job, trail = read()

    def finished() -> bool:
        return str(job.get("state")) in terminal or time.monotonic() >= deadline

    def view() -> Group:
        return Group(Text(" → ").join(state_text(s) for s in trail), job_table(job))

    if quiet:
        while not finished():
            time.sleep(interval_s)
            job, trail = read()
        return job
    with Live(view(), console=console, refresh_per_second=10, transient=False) as live:
        while not finished():
            time.sleep(interval_s)
            job, trail = read()
            live.update(view())
    return job


__all__ = ["job_table", "print_job", "print_message", "print_probe", "state_text", "watch_job"]
