"""From a journal to what the job is: replay, check against the table, derive the status.

Replay accepts only what the lifecycle allows: the first record creates the job (trigger
``schedule``, into ``scheduled``, naming the job and thread of the file), sequence numbers
are contiguous, and every move starts in its machine's replayed state and is a row of that
machine's table (a record from before the delivery machine stands for the moves
:mod:`rekall.store.legacy` gives, and must lead to the state it names). Anything else is
reported as corruption rather than believed.

The status file is a view derived from here (plus a summary of the thread's earlier jobs);
it can always be rebuilt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from rekall.states import COMPACTION, SCHEDULE, JobState, JobView
from rekall.states.status import ABSENT, HistoryEntry, ended_at, known, unknown, wire
from rekall.store.delivery import fold_into
from rekall.store.errors import JournalCorrupt
from rekall.store.journal import Scan, scan_journal
from rekall.store.legacy import MachineMove, is_legacy, moves_of
from rekall.store.wire import Move, NoteRecord, TransitionRecord

#: How many earlier jobs the status file summarises under ``history``.
HISTORY_LIMIT = 20


@attrs.frozen
class Replay:
    thread_id: str
    job_id: str
    path: Path
    view: JobView
    #: The machines' moves, as journaled (the first is the job's creation).
    transitions: tuple[Move, ...]
    notes: tuple[NoteRecord, ...]
    scan: Scan
    #: For each of ``transitions`` after the first: the moves it stands for, and the job's state after it.
    moves: tuple[tuple[tuple[MachineMove, ...], JobState], ...] = ()

    @property
    def state(self) -> JobState:
        return self.view.state

    @property
    def job_number(self) -> int:
        return known(self.view.status.jobNumber) or 0

    @property
    def created_at(self) -> str:
        return self.transitions[0].at

    @property
    def states_taken(self) -> list[str]:
        """The job's states in the order it went through them. A move that left the job's state as it was
        (an injection being sent) adds none, nor does the handover between the two records of one completion
        (``compacted`` shows only where the job stayed: its journal ends there, or the job ended there)."""
        states = [JobState.SCHEDULED, *(state for _, state in self.moves)]
        handed_over = {i for i, state in enumerate(states[:-1])
                       if state is JobState.COMPACTED and states[i + 1] not in COMPACTION.terminal}
        return [state.value for i, state in enumerate(states)
                if (i == 0 or state is not states[i - 1]) and i not in handed_over]

    @property
    def next_seq(self) -> int:
        return len(self.scan.records)


def _bad(path: Path, seq: int, reason: str) -> JournalCorrupt:
    return JournalCorrupt(f"{path} record {seq}: {reason}",
                          hint="the journal does not follow the lifecycle; keep it for inspection and move it "
                               "aside to schedule again; nothing was changed")


def replay_scan(path: Path, scan: Scan, thread_id: str, job_id: str) -> Replay:
    records = scan.records
    if not records:
        raise JournalCorrupt(f"{path} holds no intact record", hint="move it aside; nothing was changed")
    first = records[0]
    if not (isinstance(first, TransitionRecord) and first.trigger == SCHEDULE and first.source is None
            and first.dest is JobState.SCHEDULED and first.seq == 0):
        raise _bad(path, 0, "the first record must schedule the job")
    if first.fields.get("jobId") != job_id or first.fields.get("threadId") != thread_id:
        raise _bad(path, 0, "it names another job or thread than its file name")
    view = JobView(job_id, thread_id, JobState.SCHEDULED, first.fields, {JobState.SCHEDULED: first.mono_ms})
    transitions: list[Move] = [first]
    notes, moves = [], []
    for expected_seq, record in enumerate(records[1:], start=1):
        if record.seq != expected_seq:
            raise _bad(path, expected_seq, f"sequence number {record.seq} breaks the order")
        if isinstance(record, NoteRecord):
            notes.append(record)
            continue
        view, taken = _replayed(path, view, record)
        transitions.append(record)
        moves.append((taken, view.state))
    return Replay(thread_id, job_id, path, with_claim(view, path), tuple(transitions), tuple(notes), scan,
                  tuple(moves))


def _replayed(path: Path, view: JobView, record: Move) -> tuple[JobView, tuple[MachineMove, ...]]:
    """``view`` after ``record``, checked against both machines' tables, and the moves it stands for."""
    said = f"{record.source and record.source.value} --{record.trigger}--> {record.dest.value}"
    if view.state.terminal:
        raise _bad(path, record.seq, f"{said} comes after the job ended {view.state.value}")
    legacy = is_legacy(record)
    if legacy and record.source is not view.state:
        raise _bad(path, record.seq, f"starts in {record.source} but the job was {view.state.value}")
    moves = moves_of(record)
    if moves is None:
        raise _bad(path, record.seq, f"{said} is not a transition")
    for i, move in enumerate(moves):
        now = view.state_in(move.table.name)
        if move.source is not now:
            was = f"the job was {view.state.value}" if move.table is COMPACTION else f"the delivery was {now.value}"
            raise _bad(path, record.seq, f"starts in {move.source.value} but {was}")
        if move.table is not COMPACTION and view.compaction is not JobState.COMPACTED:
            raise _bad(path, record.seq, f"{said}: the delivery moves before the compaction completed")
        if move.table.find_row(move.source, move.trigger, move.dest) is None:
            raise _bad(path, record.seq, f"{said} is not a transition")
        fields = record.fields if i == len(moves) - 1 else {}
        view = view.moved(move.dest, fields, record.mono_ms, move.route)
    if legacy and view.state is not record.dest:
        raise _bad(path, record.seq, f"{said} leads to {view.state.value}")
    return view, moves


def with_claim(view: JobView, journal_path: Path) -> JobView:
    """``view`` with the job's delivery claim folded in (:mod:`rekall.store.delivery`): a handoff the
    plugin's hook delivered is part of the job's record though the journal never says so."""
    fields = fold_into(view.fields, journal_path)
    return view if fields is view.fields else attrs.evolve(view, fields=fields)


def replay_file(path: Path, thread_id: str, job_id: str) -> Replay:
    return replay_scan(path, scan_journal(path), thread_id, job_id)


# --- derived views -------------------------------------------------------------------------


def summarize(job: Replay) -> dict[str, Any]:
    """One ``history`` entry: the Node version's fields (its ``completedAt`` renamed ``endedAt``) plus state,
    errorCode, outcomeMayBeUnknown."""
    f = job.view.status
    entry = HistoryEntry(
        jobId=job.job_id, jobNumber=job.job_number, status=job.state.value, state=job.state.value,
        createdAt=known(f.createdAt),
        endedAt=ended_at(job.view.fields),  # neutral: a cancelled or failed job did not complete
        contextTokensBefore=known(f.contextTokensBefore), contextTokensAfter=known(f.contextTokensAfter),
        tokensReclaimed=known(f.tokensReclaimed), reclaimedFraction=known(f.reclaimedFraction),
        compactionDurationMs=known(f.compactionDurationMs), resumeDelayMs=known(f.resumeDelayMs),
        errorCode=known(f.errorCode), outcomeMayBeUnknown=known(f.outcomeMayBeUnknown),
        resumeSkipped=ABSENT if known(f.resumeSkipped) is None else f.resumeSkipped,
        handoffDelivery=f.handoffDelivery,
    )
    return wire(entry)


def history_before(job: Replay, earlier: list[Replay]) -> list[dict[str, Any]]:
    """Summaries of the thread's last ``HISTORY_LIMIT`` ended jobs before ``job``, oldest first."""
    ended = [e for e in earlier if e.job_number < job.job_number and e.state.terminal]
    ended.sort(key=lambda e: (e.job_number, e.created_at))
    return [summarize(e) for e in ended[-HISTORY_LIMIT:]]


def derive_status(view: JobView, last: Move, journal_path: Path, log_path: Path,
                  history: list[dict[str, Any]]) -> dict[str, Any]:
    """The status file's content, built only from the journal (and the thread's history), with the
    job's delivery claim folded in."""
    view = with_claim(view, journal_path)
    state = view.state.value
    derived = attrs.evolve(view.status, jobId=view.job_id, threadId=view.thread_id, status=state, state=state,
                           updatedAt=last.at, journalSeq=last.seq, journalPath=str(journal_path),
                           logPath=str(log_path), history=history)
    status = wire(derived)
    # A journal field this version does not know (a newer rekall wrote it) is kept as found.
    status.update((key, view.fields[key]) for key in unknown(view.fields))
    return status
