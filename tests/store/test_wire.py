"""Reading a record without cattrs gives exactly what cattrs gives; anything unusual goes to cattrs."""

from __future__ import annotations

import json

import pytest

from rekall.store import JobStore
from rekall.store.wire import BadRecord, NoteRecord, TransitionRecord, converter, decode_line, encode_record
from rekall.testing import FakeClock
from tests.jobkit import new_thread, scheduled_run


def _bodies(store: JobStore) -> list[bytes]:
    lines = []
    for thread, job in store.all_jobs():
        lines += store.journal_path(thread, job).read_bytes().splitlines(keepends=True)
    return lines


def _structured_by_cattrs(line: bytes) -> TransitionRecord | NoteRecord:
    data = json.loads(line)["record"]
    cls = {"transition": TransitionRecord, "note": NoteRecord}[data.pop("type")]
    data.pop("v")
    return converter().structure(data, cls)


def test_every_record_a_real_job_writes_reads_the_same_without_cattrs(store: JobStore, clock: FakeClock):
    thread = new_thread()
    for outcome in ("resumed", "failed", "cancelled", "skipped_at_resume", "timed_out"):
        scheduled_run(store, clock, thread, outcome)
    lines = _bodies(store)
    assert len(lines) > 20
    for line in lines:
        decoded = decode_line(line)
        assert decoded == _structured_by_cattrs(line)
        assert encode_record(decoded) == line


def _line(record: dict) -> bytes:
    import zlib

    raw = json.dumps(record, separators=(",", ":")).encode()
    return b'{"crc32":"%08x","record":%s}\n' % (zlib.crc32(raw), raw)


TRANSITION = {"v": 2, "type": "transition", "seq": 1, "at": "2026-01-01T00:00:00Z", "monoMs": 5,
              "trigger": "schedule", "from": None, "to": "scheduled", "evidence": {}, "guards": [], "fields": {}}


def test_a_record_that_is_not_exactly_as_written_is_left_to_cattrs_which_converts_or_names_the_fault():
    as_float = decode_line(_line({**TRANSITION, "seq": 1.0}))
    assert as_float.seq == 1 and type(as_float.seq) is int  # cattrs' conversion, as before
    with pytest.raises(BadRecord, match="extra fields"):
        decode_line(_line({**TRANSITION, "surprise": 1}))
    with pytest.raises(BadRecord, match="scheduledd|JobState|not a valid"):
        decode_line(_line({**TRANSITION, "to": "scheduledd"}))
