"""``rekall explain JOB``: how a job moved through its states, and why, from its journal.

The explanation is plain data (the same for ``--json`` and for people): the timeline of
transitions with their evidence and guard verdicts, the notes the worker journaled, a
plain-words outcome, and the lifecycle diagram with the path taken marked. It works for any
past job, because journals are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rekall.states import HEADROOM_LIMIT, JobState
from rekall.states.status import ABSENT, JobStatus, known, read, wire
from rekall.store import JobStore, Replay
from rekall.store.legacy import is_legacy
from rekall.store.wire import DeliveryRecord, Move

if TYPE_CHECKING:  # rich is imported by the printers only: `--json` output never loads it
    from rich.console import Console
    from rich.text import Text


def _percent(fraction: float) -> str:
    shown = f"{fraction:.0%}"
    if fraction > HEADROOM_LIMIT and shown == f"{HEADROOM_LIMIT:.0%}":  # 60.4% must not read as "60%"
        shown = f"{fraction:.1%}"
    return shown


def _ms(ms: Any) -> str:
    if not isinstance(ms, (int, float)):
        return "?"
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _tokens(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "unknown"


def reclaimed_words(fraction: float, digits: int = 0) -> str:
    """``fraction`` of the context reclaimed, in words: a count that grew reclaimed nothing."""
    if fraction < 0:
        return f"nothing reclaimed: the count grew {-fraction:.{digits}%}"
    return f"{fraction:.{digits}%} reclaimed"


def _compaction_words(f: JobStatus) -> str:
    words = f"compacted {_tokens(f.contextTokensBefore)} → {_tokens(f.contextTokensAfter)} tokens"
    if isinstance(f.reclaimedFraction, (int, float)):
        words += f" ({reclaimed_words(f.reclaimedFraction)})"
    if known(f.compactionDurationMs) is not None:
        words += f" in {_ms(f.compactionDurationMs)}"
    return words


def _skip_words(f: JobStatus) -> str:
    at_resume = f.resumeCheckWindowUsedFraction is not ABSENT
    used = f.resumeCheckWindowUsedFraction if at_resume else f.contextWindowUsedFraction
    when = "at the check before resuming" if at_resume else "after compaction"
    reason = known(f.resumeSkipReason)
    if reason == "more_than_60_percent_used" and isinstance(used, (int, float)):
        return f"{_percent(used)} of the context window was in use {when}, above the {HEADROOM_LIMIT:.0%} limit"
    if reason == "stale_or_unreclaimed_token_telemetry":
        tokens = f.resumeCheckContextTokens if at_resume else f.contextTokensAfter
        return (f"the token count {when} ({_tokens(tokens)}) was not below the count before the request "
                f"({_tokens(f.contextTokensBefore)}), so the telemetry may be stale")
    if reason == "missing_token_telemetry":
        return f"no usable token telemetry {when}, so headroom could not be confirmed"
    return f"insufficient headroom ({reason or 'no reason recorded'})"


_CANCEL_WORDS = {
    "explicit_cancellation": "Cancelled on request",
    "new_user_input": "Cancelled: new user input arrived",
    "new_turn": "Cancelled: a new turn started",
    "goal_active": "Cancelled: the thread's goal became active (Codex runs its turns by itself until the goal is paused)",
    "user_turn_stopped": "Cancelled: the latest user turn was stopped",
}


def _unknown_words(f: JobStatus) -> str:
    if not known(f.outcomeMayBeUnknown):
        return ""
    from rekall.adapters.registry import owner_words

    return (f" The outcome may be unknown: a request may have reached {owner_words(known(f.platform))}, and its "
            "effect was not observed; check the thread before scheduling again.")


def _unknown_before_words(f: JobStatus) -> str:
    if known(f.contextTokensBefore) is not None:
        return ""
    return (f" The token count before the request was unknown, so only the {HEADROOM_LIMIT:.0%} limit was "
            "checked, not that the compaction reduced the count.")


def _delivery_words(f: JobStatus) -> str:
    """How the handoff reached the model after the compaction, where the job says."""
    delivery, note = known(f.handoffDelivery), str(known(f.handoffDeliveryNote) or "no reason recorded").rstrip(".")
    if delivery == "continuation":
        return " The handoff reached the model in the continuation turn."
    if delivery == "injected":
        size = f"{f.injectedBytes:,} bytes, " if isinstance(f.injectedBytes, int) else ""
        return (f" The handoff was injected into the thread's context ({size}{_ms(f.injectDelayMs)} after the "
                "compaction completed); no turn was started.")
    if delivery == "hook":
        at = f" at {f.handoffHookAt}" if isinstance(f.handoffHookAt, str) else ""
        return f" The handoff was {note}{at}; no turn was started."
    if delivery == "not_delivered":
        return f" The handoff was not delivered after the compaction: {note}."
    if delivery == "unknown":
        return f" Whether the handoff reached the thread is unknown: {note}."
    return ""


def describe_outcome(state: str, fields: JobStatus | Mapping[str, Any]) -> str:
    """One or two plain sentences saying how the job ended (or where it is), and how its handoff
    reached the model (from the store's record, or a status's JSON: a Node-written one, a row)."""
    f = fields if isinstance(fields, JobStatus) else read(fields)
    return _ending_words(state, f) + _delivery_words(f)


def _ending_words(state: str, f: JobStatus) -> str:
    if state == JobState.COMPLETED:
        if (reason := known(f.resumeSkipReason)) is not None:
            return f"Completed: {_compaction_words(f)}. No continuation: {reason}."
        return f"Completed: {_compaction_words(f)}; no continuation was asked for."
    if state == JobState.RESUMED:
        return (f"Resumed: {_compaction_words(f)}; continuation turn {known(f.resumeTurnId)} started "
                f"{_ms(f.resumeDelayMs)} after the compaction completed." + _unknown_before_words(f))
    if state == JobState.SKIPPED:
        return f"Resume skipped: {_skip_words(f)}. The compaction itself completed: {_compaction_words(f)}."
    if state == JobState.CANCELLED:
        reason = known(f.reason)
        return _CANCEL_WORDS.get(reason or "", f"Cancelled ({reason})") + "." + _unknown_words(f)
    error = str(known(f.error) or "no message recorded").rstrip(".")
    if state == JobState.TIMED_OUT:
        return f"Timed out: {error}." + _unknown_words(f)
    if state == JobState.FAILED:
        if f.errorCode == "worker_lost":
            return f"Failed: the worker process was lost ({error})." + _unknown_words(f)
        return f"Failed ({known(f.errorCode)}): {error}." + _unknown_words(f)
    try:
        return f"In progress ({state}): {JobState(state).doc}"
    except ValueError:
        return f"Unknown state {state!r}."


def _elapsed_ms(previous: Move | None, record: Any) -> int | None:
    if previous is None:
        return None
    elapsed = record.mono_ms - previous.mono_ms
    if elapsed < 0:  # different boots: fall back to the wall clock
        wall = datetime.fromisoformat(record.at) - datetime.fromisoformat(previous.at)
        elapsed = round(wall.total_seconds() * 1000)
    return elapsed


def _machine_of(record: Move) -> str:
    """Which machine moved: ``compaction`` or ``delivery``, or ``job`` for a record of the one machine that
    ran the whole job before the delivery had its own (:mod:`rekall.store.legacy`)."""
    if isinstance(record, DeliveryRecord):
        return "delivery"
    return "job" if is_legacy(record) else "compaction"


def path_diagram(job: Replay) -> str:
    """The lifecycle diagram with the moves taken numbered (by journal record) and the states visited styled."""
    from rekall.states import MACHINES, DeliveryState
    from rekall.states.render import mermaid

    lines = mermaid().splitlines()
    steps = [((move.source.value, move.dest.value, move.trigger), n)
             for n, (moves, _) in enumerate(job.moves, start=1) for move in moves]
    for i, line in enumerate(lines):
        edge, _, labels = line.strip().partition(": ")  # "a --> b: t1 [guard] | t2"
        numbers = {n for (src, dst, trigger), n in steps if edge == f"{src} --> {dst}"
                   and any(label.split(" [")[0] == trigger for label in labels.split(" | "))}
        if numbers:
            lines[i] = f"{line} (step {', '.join(map(str, sorted(numbers)))})"
    view = job.view
    current = [view.compaction.value] + ([] if view.delivery is DeliveryState.PENDING else [view.delivery.value])
    visited: list[str] = []  # each machine's states in the order visited, from where it started
    for table in MACHINES:
        dests = [move.dest.value for moves, _ in job.moves for move in moves if move.table is table]
        if table is MACHINES[0] or dests:
            visited += [table.initial.value, *dests]
    taken = [state for state in dict.fromkeys(visited) if state not in current]
    lines += [
        "  classDef taken fill:#e8f4ea,stroke:#2e7d32",
        "  classDef current fill:#2e7d32,color:#ffffff,stroke:#1b5e20",
        *([f"  class {','.join(taken)} taken"] if taken else []),
        f"  class {','.join(current)} current",
    ]
    return "\n".join(lines) + "\n"


def build_explanation(store: JobStore, job_or_thread_id: str) -> dict[str, Any]:
    """Everything ``rekall explain`` shows, as JSON-able data."""
    job = store.find(job_or_thread_id)
    if store.reap_if_dead(job.thread_id) is not None:  # a dead worker is recorded before it is explained
        job = store.load(job.thread_id, job.job_id)
    found = store.status_of(job)  # the journal's, unless a lost worker could not be journaled
    status = wire(found)  # shown as the status file holds it
    state = found.state
    assert isinstance(state, str)  # every status derived from a journal has its state
    timeline, previous = [], None
    for record in job.transitions:
        row = {
            "seq": record.seq,
            "at": record.at,
            "sincePreviousMs": _elapsed_ms(previous, record),
            "from": None if record.source is None else record.source.value,
            "to": record.dest.value,
            "trigger": record.trigger,
            "evidence": record.evidence,
            "guards": [{"to": v.to.value, "guard": v.guard, "passed": v.passed} for v in record.guards],
            "fields": record.fields,
        }
        row["machine"] = _machine_of(record)
        if isinstance(record, DeliveryRecord):
            row["route"] = record.route
        timeline.append(row)
        previous = record
    notes = [{"seq": n.seq, "at": n.at, "kind": n.kind, "detail": n.detail} for n in job.notes]
    explanation = {
        "jobId": job.job_id,
        "threadId": job.thread_id,
        "state": state,
        "terminal": JobState(state).terminal,
        "outcome": describe_outcome(state, found),
        "outcomeMayBeUnknown": known(found.outcomeMayBeUnknown),
        "errorCode": known(found.errorCode),
        "path": job.states_taken,
        "timeline": timeline,
        "notes": notes,
        "diagram": path_diagram(job),
        "journalPath": str(job.path),
        "status": status,
    }
    from rekall.store.checkpoint import summary

    checkpoint = summary(store.root, job.thread_id)
    if checkpoint is not None:
        explanation["checkpoint"] = checkpoint
    if job.scan.torn_bytes:
        explanation["tornTailBytes"] = job.scan.torn_bytes
    return explanation


# --- for people ----------------------------------------------------------------------------


def _short(value: Any) -> str:
    """Hashes and process identities are long; their first characters identify them on a screen.
    Anything up to a UUID's length (ids, reasons, names) is shown whole."""
    text = str(value)
    return text if len(text) <= 36 else text[:16] + "…"


def _pairs(value: Mapping[str, Any]) -> str:
    # Two spaces between pairs: a line wraps between them, never inside a pair.
    return "  ".join(f"{k}={_short(v)}" for k, v in value.items())


def _step(row: Mapping[str, Any]) -> Text:
    from rich.text import Text

    text = Text()
    if row.get("machine") in ("compaction", "delivery"):  # a record from before the split names the job's states
        text.append(f"{row['machine']}: ", style="dim")
    text.append(f"{row['from'] or '∅'} → {row['to']}", style="bold")
    if row.get("route"):
        text.append(f" ({row['route']})")
    text.append(f"  on {row['trigger']}")
    for verdict in row["guards"]:
        text.append(("\n✓ " if verdict["passed"] else "\n✗ ") + verdict["guard"],
                    style="green" if verdict["passed"] else "red")
    if row["evidence"]:
        text.append("\n" + _pairs(row["evidence"]), style="dim")
    return text


def _note(note: Mapping[str, Any]) -> Text:
    from rich.text import Text

    text = Text(f"note: {note['kind']}", style="dim")
    if note["detail"]:
        text.append("\n" + _pairs(note["detail"]), style="dim")
    return text


def print_timeline(explanation: Mapping[str, Any], console: Console) -> None:
    """One row per journal record: seq, time, time since the previous step, and what happened."""
    from rich.table import Table
    from rich.text import Text

    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(ratio=1)  # words wrap at spaces; only a word longer than a line is folded
    rows: list[tuple[int, list[Any]]] = []
    for row in explanation["timeline"]:
        since = "" if row["sincePreviousMs"] is None else f"+{_ms(row['sincePreviousMs'])}"
        rows.append((row["seq"], [str(row["seq"]), row["at"][11:23], since, _step(row)]))
    for note in explanation["notes"]:
        rows.append((note["seq"], [str(note["seq"]), note["at"][11:23], "", _note(note)]))
    for _, cells in sorted(rows, key=lambda r: r[0]):
        table.add_row(*cells)
    console.print(Text("Timeline", style="bold"))
    console.print(table)


def print_explanation(explanation: Mapping[str, Any], console: Console, *, show_journal: bool = True) -> None:
    from rich.panel import Panel
    from rich.text import Text

    from rekall.kernel.wrapping import longest_word

    state = explanation["state"]
    console.print(Text(f"job {explanation['jobId']}", style="bold"))
    console.print(Text("thread ", style="dim") + Text(explanation["threadId"]))
    console.print(Text("state ", style="dim") + Text(state, style="bold"))
    outcome = Text(explanation["outcome"])
    # A box cuts a word longer than its inside into pieces: such an outcome (a long path) goes unboxed.
    console.print(Panel(outcome, expand=False) if longest_word(outcome.plain) <= console.width - 4 else outcome)
    print_timeline(explanation, console)
    console.print(Text("Path: " + " → ".join(explanation["path"])))
    console.print()
    # Printed as is, never wrapped or boxed, so that a copied diagram is valid Mermaid.
    console.print(Text("Diagram (Mermaid, path marked; paste as is):", style="bold"))
    console.print(Text(explanation["diagram"].rstrip("\n")), soft_wrap=True)
    if show_journal:
        console.print(Text("journal: ", style="dim") + Text(explanation["journalPath"]), soft_wrap=True)
    if explanation.get("checkpoint"):
        print_checkpoint_summary(explanation["checkpoint"], console)


def checkpoint_lines(shown: Mapping[str, Any]) -> list[str]:
    """The thread's checkpoint in words: saved when, bytes, and each delivery with its compaction and route."""
    if shown["state"] == "cleared":
        head = f"cleared {shown.get('clearedAt')} (the last one saved {shown.get('savedAt')}, {shown.get('bytes')} bytes)"
    else:
        head = f"saved {shown.get('savedAt')}, {shown.get('bytes')} bytes, SHA-256 {str(shown.get('sha256'))[:12]}"
    lines = [f"Checkpoint: {head}; {shown['savedCount']} saved in all"]
    lines += [f"  delivered {d.get('at')} by {d.get('route')} after compaction {d['compaction'][:12]}"
              + (" (cut)" if d.get("cut") else "") for d in shown["deliveries"]]
    lines.append(f"  {shown['note']}")
    return lines


def print_checkpoint_summary(shown: Mapping[str, Any], console: Console) -> None:
    from rich.text import Text

    for line in checkpoint_lines(shown):
        console.print(Text(line))
