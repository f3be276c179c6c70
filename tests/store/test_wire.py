"""Reading a record without cattrs gives exactly what cattrs gives; anything unusual goes to cattrs."""

from __future__ import annotations

import json

import pytest

from rekall.store import JobStore
from rekall.store.wire import BadRecord, DeliveryRecord, NoteRecord, Record, TransitionRecord, converter, \
    decode_line, encode_record
from rekall.testing import FakeClock
from tests.jobkit import new_thread, scheduled_run


def _bodies(store: JobStore) -> list[bytes]:
    lines = []
    for thread, job in store.all_jobs():
        lines += store.journal_path(thread, job).read_bytes().splitlines(keepends=True)
    return lines


def _structured_by_cattrs(line: bytes) -> Record:
    data = json.loads(line)["record"]
    cls = {"transition": TransitionRecord, "delivery": DeliveryRecord, "note": NoteRecord}[data.pop("type")]
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


# --- writing: the hand-built record is byte-equal to the converter's ----------------------------

from hypothesis import given, strategies as st  # noqa: E402

from rekall.states import GuardVerdict, JobState  # noqa: E402
from rekall.store import wire as wire_module  # noqa: E402


def _encoded_by_cattrs(record: Record) -> bytes:
    """``encode_record`` as it was before the hand-built path: everything through the converter."""
    import zlib

    kind = {TransitionRecord: "transition", DeliveryRecord: "delivery", NoteRecord: "note"}[type(record)]
    raw = wire_module.dumps({"v": wire_module.RECORD_VERSION, "type": kind,
                             **converter().unstructure(record)}).encode("utf-8")
    return b'{"crc32":"%08x","record":%s}\n' % (zlib.crc32(raw), raw)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
#: Values cattrs converts (an enum to its value, a tuple, an attrs record to a dict): the hand path
#: must leave these to it.
_converted = (st.sampled_from(list(JobState)) | st.tuples(st.integers(), st.text())
              | st.builds(GuardVerdict, st.sampled_from(list(JobState)), st.text(), st.booleans()))
_values = st.recursive(_json | _converted,
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3),
                       max_leaves=8)
_free_form = st.dictionaries(st.text(max_size=12), _values, max_size=6)
_verdicts = st.lists(st.builds(GuardVerdict, st.sampled_from(list(JobState)), st.text(max_size=20), st.booleans()),
                     max_size=3).map(tuple)
_transitions = st.builds(
    TransitionRecord, seq=st.integers(min_value=0), at=st.text(max_size=30), mono_ms=st.integers(),
    trigger=st.text(max_size=20), source=st.none() | st.sampled_from(list(JobState)),
    dest=st.sampled_from(list(JobState)), evidence=_free_form, guards=_verdicts, fields=_free_form)
_notes = st.builds(NoteRecord, seq=st.integers(min_value=0), at=st.text(max_size=30), mono_ms=st.integers(),
                   kind=st.text(max_size=20), detail=_free_form)


@given(_transitions | _notes)
def test_a_record_written_by_hand_is_byte_equal_to_the_converters(record):
    assert encode_record(record) == _encoded_by_cattrs(record)


@given(_transitions)
def test_a_transition_whose_dicts_hold_only_json_values_is_written_without_the_converter(record):
    plain = all(wire_module._native(d) for d in (record.evidence, record.fields))
    assert (wire_module._written_plainly(record) is not None) is plain


def test_every_record_a_real_job_writes_is_built_by_hand(store: JobStore, clock: FakeClock):
    thread = new_thread()
    for outcome in ("resumed", "failed", "cancelled", "skipped_at_resume", "timed_out"):
        scheduled_run(store, clock, thread, outcome)
    for line in _bodies(store):
        record = decode_line(line)
        assert wire_module._written_plainly(record) is not None
        assert encode_record(record) == _encoded_by_cattrs(record) == line


def test_a_record_field_of_another_type_than_declared_is_left_to_the_converter():
    record = TransitionRecord(seq=True, at="x", mono_ms=1, trigger="schedule", source=None, dest=JobState.SCHEDULED,
                              evidence={}, fields={})
    assert wire_module._written_plainly(record) is None
    assert encode_record(record) == _encoded_by_cattrs(record)
