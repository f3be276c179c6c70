"""The JobStatus record: one definition of the status fields, and what is derived from it."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, strategies as st
from rich.console import Console

from rekall.kernel.errors import InvalidInput
from rekall.surfaces.render import print_job
from rekall.states import JobState, JobView
from rekall.states.status import (
    ABSENT,
    ANCHORS,
    LIFECYCLE,
    NAMES,
    RESERVED,
    SHOWN,
    STORE,
    HistoryEntry,
    JobStatus,
    ended_at,
    json_fields,
    read,
    unknown,
    wire,
)
from rekall.store.replay import derive_status
from rekall.store.wire import DeliveryRecord, TransitionRecord
from tests.jobkit import RESUME_NEEDED, handoff, new_thread, open_store, run, schedule, script

OUTCOMES = ("completed", "skipped", "skipped_at_resume", "resumed", "cancelled", "failed", "timed_out")


def test_the_reserved_names_are_the_fields_the_store_sets():
    # The list the store kept by hand before the record; now derived from each field's ``by``.
    assert RESERVED == {"jobId", "threadId", "status", "state", "createdAt", "jobNumber", "userFingerprint", "resume",
                        "handoffPath", "handoffSha256", "errorCode", "outcomeMayBeUnknown", "updatedAt", "journalSeq",
                        "journalPath", "logPath", "history"}
    assert ANCHORS == {"contextTokensAtSchedule", "modelContextWindowAtSchedule", "ownerIdAtSchedule", "platform",
                       "generationAtSchedule"}


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_every_field_a_journal_records_is_a_record_field_set_by_whom_the_record_says(tmp_path, clock, outcome):
    store = open_store(tmp_path / "jobs", clock)
    thread = new_thread()
    created = store.create_job(thread, handoff=handoff(RESUME_NEEDED.get(outcome, True)), user_fingerprint="fp-1",
                               extra={"ownerIdAtSchedule": "o1"})
    run(store, clock, thread, created.job_id, outcome)
    first, *moves = store.load(thread, created.job_id).transitions
    by = {field.name: field.metadata["by"] for field in json_fields(JobStatus)}
    assert {by[name] for name in first.fields} <= {STORE, "anchor"}
    for record in moves:
        # Only a delivery move may set nothing (a continuation chosen, an injection about to leave).
        assert record.fields or isinstance(record, DeliveryRecord), record.trigger
        assert set(record.fields) <= NAMES, record.trigger
        # errorCode and outcomeMayBeUnknown start as the store's defaults; transitions update them.
        assert {name for name in record.fields if by[name] != LIFECYCLE} <= {"errorCode", "outcomeMayBeUnknown"}
    triggers = [trigger for trigger, _ in script(created.job_id, outcome)]
    # The completion is one event and two moves: the compaction machine's handover, the route's choice.
    assert len(moves) == len(triggers) + triggers.count("compaction_completed")


def test_a_field_left_out_is_absent_from_the_json_while_a_null_is_kept():
    fields = wire(JobStatus(requestedAt="2026-11-30T12:00:00.000Z", contextTokensBefore=None))
    assert fields == {"requestedAt": "2026-11-30T12:00:00.000Z", "contextTokensBefore": None}
    assert read(fields).acceptedAt is ABSENT and read(fields).contextTokensBefore is None


#: The values a field is set to: what matters is set, null kept, or left out, not the value itself.
_VALUES = st.sampled_from([None, 0, -1, 2**40, "", "x", "été"])


def _some_fields_set(cls: type) -> st.SearchStrategy[tuple[type, dict[str, object]]]:
    # Each field independently set or left out: one cheap choice per field, where drawing a list of
    # names and then a text per name spent the input budget of a busy machine (hypothesis' too_slow check).
    optional = {field.name: _VALUES for field in json_fields(cls)}
    return st.tuples(st.just(cls), st.fixed_dictionaries({}, optional=optional))


@given(st.one_of(_some_fields_set(JobStatus), _some_fields_set(HistoryEntry)))
def test_the_json_fields_of_a_record_are_its_set_attributes_in_the_records_order(drawn):
    cls, values = drawn
    names = [a.name for a in json_fields(cls)]
    record = cls(**values)
    fields = wire(record)
    as_attrs_says = {k: v for k, v in attrs.asdict(record, recurse=False).items() if v is not ABSENT and k in names}
    assert list(fields.items()) == list(as_attrs_says.items())
    assert list(fields) == [name for name in names if name in values]


def test_a_status_read_from_json_is_written_back_with_every_field_the_unknown_ones_after_the_records():
    found = {"writtenBy": "node", "nodeOnly": {"a": 1}, "state": "completed", "threadId": "t", "jobId": None}
    record = read(found)
    assert wire(record) == found
    assert list(wire(record)) == ["jobId", "threadId", "state", "writtenBy", "nodeOnly"]
    assert (record.state, record.jobId, record.threadId) == ("completed", None, "t")
    changed = attrs.evolve(record, state="failed", jobId=ABSENT, message="m")
    assert wire(changed) == {"threadId": "t", "state": "failed", "writtenBy": "node", "message": "m",
                             "nodeOnly": {"a": 1}}
    assert record == read(dict(found)) and record != read({**found, "nodeOnly": 2})


def test_a_misspelt_status_field_fails_where_it_is_written():
    with pytest.raises(TypeError, match="contextTokensBefor"):
        JobStatus(contextTokensBefor=1)  # type: ignore[call-arg]


def test_a_journal_field_this_version_does_not_know_is_kept_in_the_derived_status(tmp_path):
    thread, job = new_thread(), "0199a5c2-0000-4000-8000-00000000000a"
    fields = {"jobId": job, "threadId": thread, "createdAt": "2026-11-30T12:00:00.000Z", "jobNumber": 1,
              "userFingerprint": None, "resume": False, "errorCode": None, "outcomeMayBeUnknown": False,
              "fromANewerRekall": [1, 2]}
    view = JobView(job, thread, JobState.SCHEDULED, fields, {JobState.SCHEDULED: 0})
    last = TransitionRecord(seq=0, at="2026-11-30T12:00:00.000Z", mono_ms=0, trigger="schedule", source=None,
                            dest=JobState.SCHEDULED, evidence={}, fields=fields)
    status = derive_status(view, last, tmp_path / "j", tmp_path / "l", [])
    assert unknown(status) == ["fromANewerRekall"] and status["fromANewerRekall"] == [1, 2]
    assert {k: v for k, v in status.items() if k in fields} == fields


def test_rekall_status_shows_a_person_the_records_labels_in_reading_order(tmp_path, clock):
    store = open_store(tmp_path / "jobs", clock)
    thread = new_thread()
    job = schedule(store, thread).job_id
    run(store, clock, thread, job, "resumed")
    console = Console(record=True, width=120)
    print_job(wire(store.read_status(thread)), console)
    lines = console.export_text().splitlines()
    label = {field.name: field.metadata["label"] for field in (*json_fields(HistoryEntry), *json_fields(JobStatus))}
    shown = [name for name, _ in SHOWN if any(line.strip().startswith(label[name] + " ") for line in lines)]
    assert shown == ["jobId", "jobNumber", "resume", "createdAt", "requestedAt", "acceptedAt", "compactionCompletedAt",
                     "endedAt", "contextTokensBefore", "contextTokensAfter", "reclaimedFraction",
                     "compactionDurationMs", "contextWindowUsedFraction", "resumeTurnId", "resumeDelayMs",
                     "handoffDelivery"]
    positions = [next(i for i, line in enumerate(lines) if line.strip().startswith(label[name] + " "))
                 for name in shown]
    assert positions == sorted(positions)


def test_a_job_ends_at_whichever_time_its_ending_recorded():
    assert ended_at({"cancelledAt": "c"}) == "c"
    assert ended_at({"completedAt": "a", "resumedAt": "b"}) == "a"  # older files used completedAt for all
    assert ended_at({"requestedAt": "r"}) is None


def test_extra_status_fields_from_a_scheduler_must_be_its_anchors(store):
    with pytest.raises(InvalidInput, match="requestedAt is not one a scheduler sets"):
        store.create_job(new_thread(), handoff=None, user_fingerprint=None, extra={"requestedAt": "now"})
    with pytest.raises(InvalidInput, match="reserved"):
        store.create_job(new_thread(), handoff=None, user_fingerprint=None, extra={"journalSeq": 9})
    assert schedule(store, new_thread()).status.jobNumber == 1


def test_reading_a_status_through_the_record_loads_no_schema_or_converter_library_of_its_own(tmp_path, clock):
    # The MCP schema is derived in rekall.surfaces.mcp_server (pydantic); `rekall status` never pays for it.
    import json
    import os
    import subprocess
    import sys

    store = open_store(tmp_path / "jobs", clock)
    thread = new_thread()
    run(store, clock, thread, schedule(store, thread).job_id, "resumed")
    code = ("import json, sys\nfrom rekall.surfaces.cli import main\n"
            f"code = main(['status', {thread!r}, '--json'])\n"
            "print(json.dumps({'code': code, 'loaded': sorted({m.split('.')[0] for m in sys.modules} & "
            "{'pydantic', 'mcp', 'jsonschema', 'rekall'}), 'record': 'rekall.states.status' in sys.modules}), "
            "file=sys.stderr)")
    env = {**os.environ, "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert json.loads(out.stderr.strip().splitlines()[-1]) == {"code": 0, "loaded": ["rekall"], "record": True}
    assert json.loads(out.stdout)["contextTokensBefore"] == 90_000
