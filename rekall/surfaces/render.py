"""Readable output for people: probe results, job status, the live status view, and the doctor's report."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from rekall.states import SUCCESSFUL_END_STATES, TERMINAL_STATES
from rekall.states.status import SHOWN, ended_at
from rekall.kernel.wrapping import longest_word

if TYPE_CHECKING:
    from rekall.usecases.doctor import Report

_STATE_STYLE = {
    "resumed": "bold green",
    "completed": "bold green",
    "skipped": "bold yellow",
    "cancelled": "bold yellow",
    "timed_out": "bold red",
    "failed": "bold red",
    "not_scheduled": "dim",
}

#: Job states after which ``status --watch`` exits 1: the job did not do what it was for.
UNSUCCESSFUL_STATES = frozenset(s.value for s in TERMINAL_STATES - SUCCESSFUL_END_STATES)

#: A job or thread id (36 characters) must fit on one line next to its label.
_ID_WIDTH = 36

class WholeWords(Console):
    """A console that wraps the text it prints only between words: a word longer than the line
    (a path, a long id) is printed whole on its own line, where rich would fold it into pieces.
    The terminal then wraps it, and a copy of it stays one word. Text inside other renderables
    (panels, tables) is laid out by them."""

    def print(self, *objects: Any, crop: bool = False, **kwargs: Any) -> None:
        if kwargs.get("soft_wrap"):  # the caller wants the line left whole, for the terminal to wrap
            super().print(*objects, crop=crop, **kwargs)
            return
        super().print(*(Indented(item) if isinstance(item, Text) else item for item in objects), crop=crop, **kwargs)


class Indented:
    """``text`` wrapped between words (:func:`rekall.kernel.wrapping.line_spans`), each line indented,
    its styles kept: rich either folds a word longer than the line into pieces or, told not to,
    stops wrapping altogether; here such a word is kept whole on its own line."""

    def __init__(self, text: Text, indent: int = 0) -> None:
        self.text, self.indent = text, indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rekall.kernel.wrapping import line_spans

        for start, end in line_spans(self.text.plain, options.max_width - self.indent):
            line = Text(" " * self.indent, no_wrap=True, overflow="ignore")
            line.append_text(self.text[start:end])
            yield line


class Fields:
    """Label and value pairs: side by side when an id fits next to the widest label, else stacked.

    A rich grid squeezes its value column on a narrow terminal and cuts ids short; stacking
    keeps every value whole at any width. A row whose value holds a word longer than the value
    column (a path) is stacked alone, so that the word is printed whole on its own line.
    """

    def __init__(self, rows: Iterable[tuple[str, RenderableType]]) -> None:
        self.rows = list(rows)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        label_width = max((len(label) for label, _ in self.rows), default=0)
        value_width = options.max_width - label_width - 2
        side_by_side: list[tuple[str, RenderableType]] = []
        for label, value in self.rows:
            if value_width >= _ID_WIDTH and (not isinstance(value, Text) or longest_word(value.plain) <= value_width):
                side_by_side.append((label, value))
                continue
            if side_by_side:
                yield self._grid(side_by_side, label_width)
                side_by_side = []
            yield Text(label.rjust(label_width) if value_width >= _ID_WIDTH else label, style="dim")
            yield Indented(value, 2) if isinstance(value, Text) else Padding(value, (0, 0, 0, 2))
        if side_by_side:
            yield self._grid(side_by_side, label_width)

    @staticmethod
    def _grid(rows: list[tuple[str, RenderableType]], label_width: int) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="dim", justify="right", no_wrap=True, min_width=label_width)
        table.add_column()
        for label, value in rows:
            table.add_row(label, value)
        return table


def _fmt(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and key == "reclaimedFraction":
        from rekall.surfaces.explain import reclaimed_words

        return reclaimed_words(value, 1).removesuffix(" reclaimed")  # its label already says "reclaimed"
    if isinstance(value, float) and key.endswith("Fraction"):
        return f"{value:.1%}"
    if isinstance(value, float):
        return f"{value:.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _warning(text: str) -> Text:
    return Text(text, style="bold yellow")


def state_text(state: str) -> Text:
    return Text(state, style=_STATE_STYLE.get(state, "bold cyan"))


def job_table(job: Mapping[str, Any]) -> Fields:
    state = str(job.get("state") or job.get("status") or "unknown")
    rows: list[tuple[str, RenderableType]] = [("thread", Text(str(job.get("threadId", "")))),
                                              ("state", state_text(state))]
    if job.get("statusFileProblem"):
        rows.append(("status file", _warning(str(job["statusFileProblem"]))))
    if job.get("alreadyScheduled"):
        rows.append(("", _warning("already scheduled: this is the unfinished job")))
    ended = state in {s.value for s in TERMINAL_STATES}
    if ended:
        from rekall.surfaces.explain import describe_outcome

        words = describe_outcome(state, job)  # says so when the outcome may be unknown
        rows.append(("outcome", _warning(words) if job.get("outcomeMayBeUnknown") else Text(words)))
    fields = {**job, "endedAt": ended_at(job) if ended else None}
    for key, label in SHOWN:
        value = fields.get(key)
        if value is not None and value != "":
            rows.append((label, Text(_fmt(key, value))))
    return Fields(rows)


def print_job(job: Mapping[str, Any], console: Console) -> None:
    console.print(job_table(job))
    if job.get("checkpoint"):
        from rekall.surfaces.explain import print_checkpoint_summary

        print_checkpoint_summary(job["checkpoint"], console)


def print_scheduled(job: Mapping[str, Any], console: Console) -> None:
    """``rekall schedule`` for a person: the job, and how to follow it (the message for agents
    names MCP tools; a person at a terminal follows the job with ``status --watch``)."""
    shown = dict(job)
    if not job.get("handoffIgnored"):
        shown.pop("message", None)
    console.print(job_table(shown))
    if not job.get("alreadyScheduled"):
        console.print(Text("Scheduled once: rekall compacts when the thread has stayed idle, and confirms that "
                           "the compaction completed. Nothing is retried automatically."))
    console.print(Text("Follow it: ", style="dim") + Text(f"rekall status {job.get('threadId')} --watch"),
                  soft_wrap=True)


def print_cancelled(result: Mapping[str, Any], console: Console) -> None:
    """``rekall cancel`` for a person: what was asked, and where to look next."""
    if not result.get("cancellationRequested"):
        console.print(Text(str(result["message"]), style="bold"))
        return
    console.print(Text(f"Cancellation requested for job {result['jobId']} (it was {result['state']}).",
                       style="bold"))
    console.print(Text("Pending steps will not run; a request the thread's owner already received cannot be "
                       "retracted."))
    if result.get("handoffDeliveryNote"):
        console.print(Text(f"The handoff: {result['handoffDeliveryNote']}."))
    console.print(Text("See how it ended:"))
    console.print(Text(f"  rekall status {result['threadId']}"), soft_wrap=True)


def print_checkpoint(result: Mapping[str, Any], console: Console) -> None:
    """``rekall checkpoint`` for a person: what was saved or cleared, and whether a hook can deliver it."""
    console.print(Text(str(result["message"]), style="bold"))
    if "checkpointSha256" in result:
        console.print(Text(f"{result['bytes']} bytes, saved {result['savedAt']}, SHA-256 {result['checkpointSha256']}"))
        console.print(Text(f"  {result['path']}"), soft_wrap=True)
    if result.get("hookWarning"):
        console.print(Text(str(result["hookWarning"]), style="yellow"))


def _schema_words(schema: Mapping[str, Any]) -> str | None:
    """Why the public schema check did not pass, in words (None when it passed or was not run)."""
    status = schema.get("status")
    if status in (None, "compatible"):
        return None
    if status == "not_checked":
        return None  # said in the status row itself
    if status == "error":
        return f"could not be checked: {schema.get('message', 'no message recorded')}"
    failed = [c for c in schema.get("checks") or () if isinstance(c, Mapping) and not c.get("passed", True)]
    details = "; ".join(f"{c.get('name')}: {c.get('detail')}" for c in failed)
    return details or str(status)


def _probe_refusals(result: Mapping[str, Any]) -> list[str]:
    """What would make ``schedule`` refuse or wait, said where a person reads the probe."""
    compat = result.get("compatibility") or {}
    runtime = compat.get("runtime") or {}
    schema = compat.get("publicSchema") or {}
    found = []
    if runtime.get("status") == "incompatible":
        from rekall.adapters.registry import owner_words

        found.append(f"schedule refuses: {owner_words(result.get('platform'))}'s state layout is not supported "
                     f"({runtime.get('problem')})")
    if result.get("latestUserTurnStopped"):
        found.append("schedule refuses: the latest user turn was stopped or failed; ask the user how to continue")
    if schema.get("status") not in (None, "compatible", "not_checked"):
        found.append("schedule refuses: the public app-server schema check did not pass (see schema problem)")
    if isinstance(schema.get("refusal"), Mapping):
        found.append(f"schedule refuses: {schema['refusal'].get('message')}")
    if result.get("idle") is False:
        reason = result.get("busyReason") or "no reason given"
        found.append(f"the thread is busy ({reason}); rekall waits for it to be idle before compacting")
    return found


def _installs_words(installs: Any) -> str | None:
    """The installed extensions probe found: where, version, and the table or why none was read."""
    if not isinstance(installs, list) or not installs:
        return None
    words = []
    for install in installs:
        if not isinstance(install, Mapping):
            continue
        head = f"{install.get('what')} {install.get('version')} ({install.get('path')})"
        table = install.get("table")
        words.append(f"{head}: table {table}" if table is not None else f"{head}: {install.get('problem')}")
    return "; ".join(words) or None


def print_probe(result: Mapping[str, Any], console: Console) -> None:
    headroom = result.get("headroom") or {}
    used = headroom.get("usedFraction")
    endpoint = result.get("endpoint") or {}
    compat = result.get("compatibility") or {}
    schema = compat.get("publicSchema") or {}
    runtime = compat.get("runtime") or {}
    rows = [
        ("thread", result.get("threadId")),
        ("platform", result.get("platform")),
        ("owner", result.get("ownerId")),
        ("endpoint", endpoint.get("path") if isinstance(endpoint, Mapping) else endpoint),
        ("endpoint kind", endpoint.get("kind") if isinstance(endpoint, Mapping) else None),
        ("adapter", result.get("adapter")),
        ("generation because", result.get("generationReason")),
        ("installed extension", _installs_words(result.get("extensions"))),
        ("runtime", result.get("runtimeStatus")),
        ("runtime hint", result.get("runtimeHint")),
        ("idle", result.get("idle")),
        ("busy because", None if result.get("idle") else result.get("busyReason")),
        ("latest turn stopped", result.get("latestUserTurnStopped") or None),
        ("completed compactions", result.get("completedCompactions")),
        ("context tokens", result.get("contextTokens")),
        ("context window", result.get("modelContextWindow")),
        ("window used", None if used is None else f"{used:.1%}"),
        ("headroom", result.get("headroomNote")),
        ("server version", result.get("serverVersion")),
        ("runtime layout", runtime.get("status")),
        ("layout problem", runtime.get("problem")),
        ("public schema", f"not checked ({schema.get('reason', 'no reason recorded')})"
         if schema.get("status") == "not_checked" else schema.get("status")),
        ("schema problem", _schema_words(schema)),
        ("schema next step", schema.get("hint")),
        ("extension version", result.get("extensionVersion")),
    ]
    console.print(Text("probe", style="bold"))
    console.print(Fields((label, Text(_fmt(label, value))) for label, value in rows if value is not None))
    for line in _probe_refusals(result):
        console.print(_warning(line))


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
        return Group(Text(" → ").join(state_text(s) for s in trail), job_table(printable_value(job)))

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
    if not console.is_terminal:
        console.line()  # a terminal's Live ends its last line; written to a file or a pipe, it does not
    return job


def watch_exit_status(job: Mapping[str, Any]) -> int:
    """0 when the watched job ended well (or there was none); 1 when it failed or timed out, or
    the watch gave up before it ended."""
    state = str(job.get("state"))
    ended = state in {s.value for s in TERMINAL_STATES} | {"not_scheduled"}
    return 1 if state in UNSUCCESSFUL_STATES or not ended else 0


# --- the doctor's report ------------------------------------------------------------------

_LEVEL_STYLE = {"GREEN": "bold green", "AMBER": "bold yellow", "RED": "bold red"}


def printable_value(value: Any) -> Any:
    """``value`` with every string in it (in dicts, lists and attrs records) made
    :func:`~rekall.kernel.characters.printable`: what a printer shows people passes through here
    once, so that no path or name read from the disk reaches the terminal with its controls."""
    from rekall.kernel.characters import printable

    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {key: printable_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(printable_value(item) for item in value)
    if attrs.has(type(value)):
        return attrs.evolve(value, **{field.alias: printable_value(getattr(value, field.name))
                                      for field in attrs.fields(type(value)) if field.init})
    return value


def print_verdict(report: Report, console: Console) -> None:
    """doctor's first two lines: which hosts rekall can serve here, and the one next step."""
    console.print(Text.assemble("verdict: ", Text(report.answer, style=_LEVEL_STYLE["GREEN" if report.ok else "RED"])))
    console.print(Text("next: " + report.next_step))


def print_report(report: Report, console: Console) -> None:
    """The verdict first, then one block per concern: its level and name, then the detail and the
    next step, wrapped between words (a table's narrow columns would cut paths and words at 80
    columns)."""
    print_verdict(report, console)
    for row in report.rows:
        console.print(Text.assemble(Text(f"{row.level:<6}", style=_LEVEL_STYLE[row.level]),
                                    Text(row.name, style="bold")))
        console.print(Indented(Text(row.detail), 6))
        if row.hint:
            console.print(Indented(Text("next: " + row.hint, style="dim"), 6))


__all__ = ["Fields", "Indented", "WholeWords", "job_table", "print_cancelled", "print_job", "print_probe", "print_report",
           "print_scheduled", "print_verdict", "printable_value", "state_text", "watch_exit_status", "watch_job"]
