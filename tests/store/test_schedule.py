"""Scheduling a job (rekall.store.schedule): a whole job or nothing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rekall.kernel.errors import StoreError, InvalidInput
from rekall.states.status import ABSENT, wire
from rekall.store import FileOps, HandoffChanged, JobStore, process_start_time
from rekall.store.views import unsealed
from rekall.testing import FakeClock

from tests.jobkit import FINGERPRINT, handoff, new_thread, schedule, snapshot


# --- creating ------------------------------------------------------------------------------


def test_a_new_job_has_its_lock_handoff_journal_and_status_all_private(store: JobStore, thread: str):
    created = schedule(store, thread)
    assert not created.already_scheduled and created.status.state == "scheduled"
    job = created.job_id
    for path in (store.lock_path(thread), store.handoff_path(thread, job), store.journal_path(thread, job),
                 store.status_path(thread)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    holder = store.lock_holder(thread)
    assert (holder.job_id, holder.pid, holder.process_start_time) == (job, os.getpid(), process_start_time(os.getpid()))
    on_disk = unsealed(json.loads(store.status_path(thread).read_text()))
    assert on_disk == wire(store.read_status(thread))
    assert on_disk["jobNumber"] == 1 and on_disk["resume"] is True and on_disk["userFingerprint"] == FINGERPRINT


def test_the_handoff_record_is_sealed_by_the_hash_of_its_exact_bytes(store: JobStore, thread: str):
    import hashlib

    created = schedule(store, thread)
    data = store.handoff_path(thread, created.job_id).read_bytes()
    assert hashlib.sha256(data).hexdigest() == created.status.handoffSha256
    assert json.loads(data) == {"version": 1, "threadId": thread, "jobId": created.job_id, "handoff": handoff()}
    record = store.verify_handoff(thread, created.job_id, created.status.handoffSha256)
    assert record["handoff"]["nextStep"] == handoff()["nextStep"]


def test_any_change_to_the_saved_handoff_is_detected(store: JobStore, thread: str):
    created = schedule(store, thread)
    path = store.handoff_path(thread, created.job_id)
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(HandoffChanged, match="SHA-256"):
        store.verify_handoff(thread, created.job_id, created.status.handoffSha256)


def test_a_handoff_record_naming_another_job_is_refused_even_with_a_matching_hash(store: JobStore, thread: str):
    import hashlib

    created = schedule(store, thread)
    path = store.handoff_path(thread, created.job_id)
    forged = json.dumps({"version": 1, "threadId": thread, "jobId": new_thread(), "handoff": handoff()}).encode()
    path.write_bytes(forged)
    with pytest.raises(HandoffChanged, match="does not authorise"):
        store.verify_handoff(thread, created.job_id, hashlib.sha256(forged).hexdigest())


def _count_validations(monkeypatch) -> list[object]:
    from rekall.store import handoff as handoff_module

    seen: list[object] = []
    real = handoff_module.validate_handoff
    monkeypatch.setattr(handoff_module, "validate_handoff", lambda value: (seen.append(value), real(value))[1])
    return seen


def test_bytes_already_validated_are_read_again_and_compared_but_neither_hashed_nor_validated_again(
        store: JobStore, thread: str, monkeypatch):
    from rekall.store import handoff as handoff_module

    created = schedule(store, thread)
    expected = created.status.handoffSha256
    validations = _count_validations(monkeypatch)
    verified = store.verify_sealed_handoff(thread, created.job_id, expected)
    assert verified.sha256 == expected and verified.record == store.verify_handoff(thread, created.job_id, expected)
    assert verified.data == store.handoff_path(thread, created.job_id).read_bytes()
    validations.clear()
    reads, hashes = [], []
    real_read, real_hash = handoff_module.read_private, handoff_module.sha256_hex
    monkeypatch.setattr(handoff_module, "read_private", lambda path, **kw: (reads.append(path), real_read(path, **kw))[1])
    monkeypatch.setattr(handoff_module, "sha256_hex", lambda data: (hashes.append(data), real_hash(data))[1])
    assert store.verify_sealed_handoff(thread, created.job_id, expected, verified) is verified
    # Read again from the file, compared with the bytes that were hashed and validated: equal bytes hash alike.
    assert reads == [store.handoff_path(thread, created.job_id)] and hashes == [] and validations == []


def test_a_validated_handoff_does_not_vouch_for_a_same_size_rewrite_with_its_timestamps_put_back(
        store: JobStore, thread: str):
    created = schedule(store, thread)
    expected = created.status.handoffSha256
    verified = store.verify_sealed_handoff(thread, created.job_id, expected)
    path = store.handoff_path(thread, created.job_id)
    before = os.stat(path)
    data = path.read_bytes()
    at = data.index(b'"summary": "') + len(b'"summary": "')
    rewritten = data[:at] + (b"X" if data[at:at + 1] != b"X" else b"Y") + data[at + 1:]  # still a valid record
    assert len(rewritten) == len(data) and rewritten != data and json.loads(rewritten)["jobId"] == created.job_id
    with open(path, "r+b") as handle:  # in place: the same file, the same size
        handle.write(rewritten)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    with pytest.raises(HandoffChanged, match="changed after it was saved"):
        store.verify_sealed_handoff(thread, created.job_id, expected, verified)


def test_a_validated_handoff_does_not_vouch_for_bytes_written_after_it(store: JobStore, thread: str):
    created = schedule(store, thread)
    expected = created.status.handoffSha256
    verified = store.verify_sealed_handoff(thread, created.job_id, expected)
    path = store.handoff_path(thread, created.job_id)
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(HandoffChanged, match="changed after it was saved"):
        store.verify_sealed_handoff(thread, created.job_id, expected, verified)


def test_a_validated_handoff_from_other_bytes_is_ignored_and_the_file_is_validated_in_full(
        store: JobStore, thread: str, monkeypatch):
    from rekall.store.handoff import Verified

    created = schedule(store, thread)
    expected = created.status.handoffSha256
    path = store.handoff_path(thread, created.job_id)
    other = Verified({"version": 1, "threadId": thread, "jobId": created.job_id,
                      "handoff": {**handoff(), "nextStep": "something never validated"}}, "0" * 64, b"{}", path)
    validations = _count_validations(monkeypatch)
    verified = store.verify_sealed_handoff(thread, created.job_id, expected, other)
    assert verified is not other and verified.record["handoff"] == handoff() and len(validations) == 1


def test_a_job_without_a_handoff_has_nothing_to_verify(store: JobStore, thread: str):
    created = schedule(store, thread, with_handoff=False)
    assert created.status.resume is False and created.status.handoffSha256 is ABSENT
    with pytest.raises(HandoffChanged, match="no saved handoff"):
        store.verify_handoff(thread, created.job_id, None)


def test_extra_fields_are_kept_but_cannot_overwrite_the_stores_own(store: JobStore, thread: str):
    created = store.create_job(thread, handoff=None, user_fingerprint=None, extra={"ownerIdAtSchedule": "o1"})
    assert created.status.ownerIdAtSchedule == "o1"
    with pytest.raises(InvalidInput, match="reserved"):
        store.create_job(new_thread(), handoff=None, user_fingerprint=None, extra={"state": "resumed"})


def test_a_live_job_makes_a_second_schedule_return_it(store: JobStore, thread: str):
    first = schedule(store, thread)
    again = schedule(store, thread)
    assert again.already_scheduled and again.job_id == first.job_id
    assert len(store.paths.journals(thread=thread)) == 1


@pytest.mark.parametrize("failing_call", range(1, 9))
def test_a_failure_at_any_fsync_while_scheduling_leaves_a_whole_job_or_nothing(jobs_dir: Path, clock: FakeClock,
                                                                              thread: str, failing_call: int):
    calls = {"n": 0}

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == failing_call:
            raise OSError(28, "No space left on device")
        os.fsync(fd)

    store = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock, fs=FileOps(fsync=fsync))
    # fsyncs 1-6: the lock, the handoff and the journal (file, then directory, each); 7-8: the status file.
    if failing_call <= 6:
        with pytest.raises((OSError, StoreError), match="No space"):  # the job's own files: said as a StoreError
            schedule(store, thread)
        assert snapshot(store.root) == {}
        assert not schedule(JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}), thread).already_scheduled
    else:
        created = schedule(store, thread)  # the status file is a derived view: the job stands
        assert store.read_status(thread).jobId == created.job_id
