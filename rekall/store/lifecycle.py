"""One job's lifecycle as the lock's holder drives it: journal first, then memory, then status.

``fire`` routes a trigger through the machine. When a row's guard passes, the machine calls
back here before it moves; the record (sequence number, wall and monotonic time, from, to,
trigger, evidence, guard verdicts, the fields it sets) is appended and fsynced. Only then
does the state change in memory, and only then is the status file rewritten. An illegal or
refused event, or a failed write, changes neither memory nor disk.

The status file is a derived view: if writing it fails, the transition still stands (the
journal is the truth) and the failure is logged; the next write or ``read_status`` repairs
it. For the same reason its owner may hold it back (``hold_status``) and write it later with
``save_status``: the worker does so, so that a request leaves right after its journal record
(a crash in between leaves a status file behind its journal, which every reader detects).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rekall.kernel.errors import InvalidInput
from rekall.states import DELIVERY, JobMachine, JobState, JobView, Step
from rekall.states.status import JobStatus
from rekall.store.clock import Clock
from rekall.store.journal import JournalWriter
from rekall.store.replay import Replay, derive_status
from rekall.store.wire import DeliveryRecord, Move, NoteRecord, TransitionRecord

log = logging.getLogger("rekall.store")


class Lifecycle:
    """Drive one job. Only the holder of the job's lock may: one writer per journal."""

    def __init__(self, replay: Replay, writer: JournalWriter, *, clock: Clock, log_path: Path,
                 history: list[dict[str, Any]], write_status: Callable[[dict[str, Any]], None]) -> None:
        self.thread_id, self.job_id = replay.thread_id, replay.job_id
        self._machine = JobMachine(replay.view)
        self._writer = writer
        self._clock = clock
        self._log_path = log_path
        self._history = history
        self._write_status = write_status
        self._last = replay.transitions[-1]
        self._seq = replay.next_seq
        #: Why the last status write failed, if it did (the journal still holds the truth).
        self.status_error: str | None = None
        #: While True, ``fire`` leaves the status file for ``save_status`` (see the module doc).
        self.hold_status = False
        self._status_behind = False

    @property
    def state(self) -> JobState:
        return self._machine.state

    @property
    def view(self) -> JobView:
        """The job as both machines have it (states, route, fields)."""
        return self._machine.view

    @property
    def job_status(self) -> JobStatus:
        """The job's fields so far as a record (what ``status`` shows of the job, without deriving
        it all); read once per transition, which the guards read too."""
        return self._machine.view.status

    @property
    def derived_status(self) -> dict[str, Any]:
        """The whole status, as the status file holds it, derived from the journal so far."""
        return derive_status(self._machine.view, self._last, self._writer.path, self._log_path, self._history)

    def fire(self, trigger: str, **evidence: Any) -> JobState:
        """Apply ``trigger`` with its evidence; returns the new state.

        Raises ``IllegalTransition`` (no row), ``TransitionRefused`` (every guard said no),
        ``InvalidEvidence``/``UnknownTrigger`` (bad call) or ``JournalUnusable`` (the record
        could not be made durable). In each case nothing changed.
        """
        self._machine.fire(trigger, evidence, self._clock.now(), self._commit)
        self._status_behind = True
        if not self.hold_status:
            self.save_status()
        return self.state

    def _commit(self, step: Step) -> None:
        record: Move
        if step.machine == DELIVERY.name:
            record = DeliveryRecord(seq=self._seq, at=step.now.iso, mono_ms=step.now.mono_ms, trigger=step.trigger,
                                    source=step.source, dest=step.dest, route=step.route,  # type: ignore[arg-type]
                                    evidence=dict(step.evidence), guards=step.verdicts, fields=dict(step.fields))
        else:
            record = TransitionRecord(seq=self._seq, at=step.now.iso, mono_ms=step.now.mono_ms,
                                      trigger=step.trigger, source=step.source, dest=step.dest,  # type: ignore[arg-type]
                                      evidence=dict(step.evidence), guards=step.verdicts, fields=dict(step.fields))
        self._writer.append(record)
        self._seq += 1
        self._last = record

    def note(self, kind: str, **detail: Any) -> None:
        """Journal an observation that changes no state (shown by ``rekall explain``)."""
        if not isinstance(kind, str) or not kind.strip():
            raise InvalidInput("a note needs a non-empty kind", field="kind", hint="fix the caller")
        try:  # notes are diagnostics: a value JSON cannot hold is written as its text
            detail = json.loads(json.dumps(detail, default=str, allow_nan=False))
        except ValueError as exc:
            raise InvalidInput(f"note {kind}: detail is not JSON ({exc})", field="detail",
                               hint="pass finite numbers, strings, lists and mappings") from exc
        now = self._clock.now()
        self._writer.append(NoteRecord(seq=self._seq, at=now.iso, mono_ms=now.mono_ms, kind=kind, detail=detail))
        self._seq += 1

    def save_status(self) -> None:
        """Write the status file (atomically, fsynced) if a transition has not reached it yet."""
        if not self._status_behind:
            return
        self._status_behind = False
        try:
            self._write_status(self.derived_status)
        except OSError as exc:
            self.status_error = f"{exc.strerror or exc}"
            log.warning("job %s: the status file could not be written (%s); the journal holds the "
                        "transition and `rekall status` rebuilds it", self.job_id, self.status_error)
        else:
            self.status_error = None

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> Lifecycle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
