from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rekall.errors import InvalidInput, StoreError
from rekall.states import JobState
from rekall.store import (
    HISTORY_LIMIT,
    FileOps,
    HandoffChanged,
    JobStore,
    LockBusy,
    StatusCorrupt,
    UnknownJob,
    process_start_time,
)
from rekall.store.wire import encode_lock
from rekall.store.owner import LockOwner
from rekall.testing import FakeClock

from tests.jobkit import FINGERPRINT, handoff, idle, me, new_thread, schedule, scheduled_run, snapshot


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait(timeout=30)
    return child.pid


def _write_lock(store: JobStore, thread: str, **owner) -> None:
    store.lock_path(thread).write_bytes(encode_lock(LockOwner(thread_id=thread, **owner)))


# --- creating ------------------------------------------------------------------------------


def test_a_new_job_has_its_lock_handoff_journal_and_status_all_private(store: JobStore, thread: str):
    created = schedule(store, thread)
    assert not created.already_scheduled and created.status["state"] == "scheduled"
    job = created.job_id
    for path in (store.lock_path(thread), store.handoff_path(thread, job), store.journal_path(thread, job),
                 store.status_path(thread)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    owner = store.lock_owner(thread)
    assert (owner.job_id, owner.pid, owner.process_start_time) == (job, os.getpid(), process_start_time(os.getpid()))
    on_disk = json.loads(store.status_path(thread).read_text())
    assert on_disk == store.read_status(thread)
    assert on_disk["jobNumber"] == 1 and on_disk["resume"] is True and on_disk["userFingerprint"] == FINGERPRINT


def test_the_handoff_record_is_sealed_by_the_hash_of_its_exact_bytes(store: JobStore, thread: str):
    import hashlib

    created = schedule(store, thread)
    data = store.handoff_path(thread, created.job_id).read_bytes()
    assert hashlib.sha256(data).hexdigest() == created.status["handoffSha256"]
    assert json.loads(data) == {"version": 1, "threadId": thread, "jobId": created.job_id, "handoff": handoff()}
    record = store.verify_handoff(thread, created.job_id, created.status["handoffSha256"])
    assert record["handoff"]["nextStep"] == handoff()["nextStep"]


def test_any_change_to_the_saved_handoff_is_detected(store: JobStore, thread: str):
    created = schedule(store, thread)
    path = store.handoff_path(thread, created.job_id)
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(HandoffChanged, match="SHA-256"):
        store.verify_handoff(thread, created.job_id, created.status["handoffSha256"])


def test_a_handoff_record_naming_another_job_is_refused_even_with_a_matching_hash(store: JobStore, thread: str):
    import hashlib

    created = schedule(store, thread)
    path = store.handoff_path(thread, created.job_id)
    forged = json.dumps({"version": 1, "threadId": thread, "jobId": new_thread(), "handoff": handoff()}).encode()
    path.write_bytes(forged)
    with pytest.raises(HandoffChanged, match="does not authorise"):
        store.verify_handoff(thread, created.job_id, hashlib.sha256(forged).hexdigest())


def test_a_job_without_a_handoff_has_nothing_to_verify(store: JobStore, thread: str):
    created = schedule(store, thread, with_handoff=False)
    assert created.status["resume"] is False and "handoffSha256" not in created.status
    with pytest.raises(HandoffChanged, match="no saved handoff"):
        store.verify_handoff(thread, created.job_id, None)


def test_extra_fields_are_kept_but_cannot_overwrite_the_stores_own(store: JobStore, thread: str):
    created = store.create_job(thread, handoff=None, user_fingerprint=None, extra={"ownerIdAtSchedule": "o1"})
    assert created.status["ownerIdAtSchedule"] == "o1"
    with pytest.raises(InvalidInput, match="reserved"):
        store.create_job(new_thread(), handoff=None, user_fingerprint=None, extra={"state": "resumed"})


def test_a_live_job_makes_a_second_schedule_return_it(store: JobStore, thread: str):
    first = schedule(store, thread)
    again = schedule(store, thread)
    assert again.already_scheduled and again.job_id == first.job_id
    assert len(store.layout.journals(thread=thread)) == 1


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
        with pytest.raises(OSError, match="No space"):
            schedule(store, thread)
        assert snapshot(store.root) == {}
        assert not schedule(JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}), thread).already_scheduled
    else:
        created = schedule(store, thread)  # the status file is a derived view: the job stands
        assert store.read_status(thread)["jobId"] == created.job_id


# --- the lock and dead owners -------------------------------------------------------------


@pytest.mark.parametrize(("steps", "was", "unknown"), [
    ([], "scheduled", False),
    (["worker_started"], "waiting_for_idle", False),
    (["worker_started", "idle_stable"], "requesting", True),
    (["worker_started", "idle_stable", "compaction_accepted"], "accepted", True),
])
def test_a_dead_owner_is_reported_as_worker_lost_and_a_new_job_can_follow(store: JobStore, thread: str, steps,
                                                                         was, unknown):
    old = schedule(store, thread).job_id
    gone = dead_pid()
    evidence = {"worker_started": {**me(old), "pid": gone, "processStartTime": None},
                "idle_stable": idle(90_000), "compaction_accepted": {"ownerId": "o1"}}
    with store.open_lifecycle(thread, old) as lifecycle:
        for trigger in steps:
            lifecycle.fire(trigger, **evidence[trigger])
    store.set_lock_owner(thread, old, gone, None)

    new = schedule(store, thread)
    assert not new.already_scheduled and new.job_id != old
    lost = store.load(thread, old).view.fields
    assert (store.load(thread, old).state, lost["errorCode"], lost["outcomeMayBeUnknown"]) == (
        JobState.FAILED, "worker_lost", unknown)
    assert was in lost["error"]
    assert [h["jobId"] for h in new.status["history"]] == [old]
    assert new.status["history"][0]["errorCode"] == "worker_lost"
    assert store.lock_owner(thread).job_id == new.job_id


def test_a_reused_pid_is_not_mistaken_for_the_owner(store: JobStore, thread: str):
    old = schedule(store, thread).job_id
    _write_lock(store, thread, job_id=old, pid=os.getpid(), process_start_time="linux:another-boot:1",
                host=store.host)
    assert not schedule(store, thread).already_scheduled
    assert store.load(thread, old).view.fields["errorCode"] == "worker_lost"


def test_a_lock_from_another_host_is_never_taken_over(store: JobStore, thread: str):
    old = schedule(store, thread).job_id
    _write_lock(store, thread, job_id=old, pid=1, process_start_time="x", host="elsewhere.example")
    before = snapshot(store.root)
    with pytest.raises(LockBusy, match="cannot be told"):
        schedule(store, thread)
    assert snapshot(store.root) == before
    assert store.reap_if_dead(thread) is None


def test_a_node_lock_without_a_pid_is_never_taken_over(store: JobStore, thread: str):
    old = schedule(store, thread).job_id
    store.lock_path(thread).write_text(json.dumps({"jobId": old, "threadId": thread}))
    with pytest.raises(LockBusy):
        schedule(store, thread)
    assert store.lock_path(thread).exists()


def test_an_unreadable_lock_is_reported_and_left_alone(store: JobStore, thread: str):
    store.lock_path(thread).write_text("{garbage")
    with pytest.raises(LockBusy, match="unreadable"):
        schedule(store, thread)
    assert store.lock_path(thread).read_text() == "{garbage"


def test_reap_if_dead_leaves_a_live_job_and_reaps_a_dead_one(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    assert store.reap_if_dead(thread) is None
    store.set_lock_owner(thread, job, dead_pid(), None)
    report = store.reap_if_dead(thread)
    assert report == {"jobId": job, "reaped": True, "lockRemoved": True, "state": "failed"}
    assert store.lock_owner(thread) is None and store.read_status(thread)["errorCode"] == "worker_lost"


def test_a_job_that_lost_its_lock_is_reaped_once_its_worker_is_gone(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    with store.open_lifecycle(thread, job) as lifecycle:
        lifecycle.fire("worker_started", **{**me(job), "pid": dead_pid(), "processStartTime": None})
    store.lock_path(thread).unlink()
    assert store.reap_if_dead(thread) == {"jobId": job, "reaped": True, "lockRemoved": False, "state": "failed"}


def test_a_job_that_lost_its_lock_but_whose_worker_runs_blocks_scheduling(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    with store.open_lifecycle(thread, job) as lifecycle:
        lifecycle.fire("worker_started", **me(job))
    store.lock_path(thread).unlink()
    with pytest.raises(LockBusy, match="without its lock"):
        schedule(store, thread)


def test_the_lock_can_be_handed_to_the_worker_only_by_its_own_job(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    before = store.lock_path(thread).read_bytes()
    assert store.set_lock_owner(thread, new_thread(), 4242, None) is False
    assert store.lock_path(thread).read_bytes() == before
    assert store.set_lock_owner(thread, job, 4242, "linux:b:7") is True
    owner = store.lock_owner(thread)
    assert (owner.job_id, owner.pid, owner.process_start_time) == (job, 4242, "linux:b:7")


def test_a_lock_is_released_only_by_the_job_it_names(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    assert store.release_lock(thread, new_thread()) is False
    assert store.lock_path(thread).exists()
    assert store.release_lock(thread, job) is True
    assert store.lock_owner(thread) is None
    assert store.release_lock(thread, job) is False


# --- status -----------------------------------------------------------------------------------


def test_a_thread_without_jobs_is_not_scheduled(store: JobStore, thread: str):
    assert store.read_status(thread) == {"threadId": thread, "status": "not_scheduled", "state": "not_scheduled"}


@pytest.mark.parametrize(("damage", "problem"), [
    (lambda p: p.unlink(), "missing"),
    (lambda p: p.write_text("{not json"), "corrupt"),
    (lambda p: p.write_bytes(b"\xff\xfe"), "corrupt"),
    (lambda p: p.write_text(json.dumps({"state": "resumed"})), "stale"),
])
def test_a_damaged_status_file_is_reported_and_rebuilt_from_the_journal(store: JobStore, clock: FakeClock,
                                                                        thread: str, damage, problem):
    job = scheduled_run(store, clock, thread, "completed")
    good = store.read_status(thread)
    damage(store.status_path(thread))
    status = store.read_status(thread)
    assert status["statusFileProblem"].startswith(problem)
    assert {k: v for k, v in status.items() if k != "statusFileProblem"} == good
    assert json.loads(store.status_path(thread).read_text()) == good  # repaired: no live owner
    assert store.read_status(thread) == good and good["jobId"] == job


def test_a_corrupt_status_file_with_no_journal_behind_it_is_an_error(store: JobStore, thread: str):
    store.status_path(thread).write_text("{oops")
    with pytest.raises(StatusCorrupt, match="no journal"):
        store.read_status(thread)
    assert store.status_path(thread).read_text() == "{oops"


def test_a_node_status_file_without_a_journal_is_shown_as_found(store: JobStore, thread: str):
    store.status_path(thread).write_text(json.dumps({"threadId": thread, "status": "completed"}))
    status = store.read_status(thread)
    assert status["status"] == "completed" and "no journal" in status["statusFileProblem"]


def test_history_keeps_the_last_twenty_jobs_including_a_lost_worker(store: JobStore, clock: FakeClock,
                                                                    thread: str):
    done = [scheduled_run(store, clock, thread, "completed") for _ in range(HISTORY_LIMIT + 1)]
    lost = schedule(store, thread).job_id
    store.set_lock_owner(thread, lost, dead_pid(), None)
    latest = schedule(store, thread)
    history = latest.status["history"]
    assert len(history) == HISTORY_LIMIT
    assert [h["jobId"] for h in history] == done[2:] + [lost]
    assert history[-1]["status"] == "failed" and history[-1]["errorCode"] == "worker_lost"
    assert history[0]["jobNumber"] == 3 and latest.status["jobNumber"] == HISTORY_LIMIT + 3
    assert set(history[0]) >= {"createdAt", "endedAt", "contextTokensBefore", "contextTokensAfter",
                               "tokensReclaimed", "reclaimedFraction", "compactionDurationMs", "resumeDelayMs"}
    # A neutral end time: the lost job did not complete, and no entry says it did.
    assert history[-1]["endedAt"] is not None and "completedAt" not in history[-1]


# --- cancel -----------------------------------------------------------------------------------


def test_cancelling_writes_the_marker_once_and_is_a_no_op_after_the_end(store: JobStore, clock: FakeClock,
                                                                        thread: str):
    job = schedule(store, thread).job_id
    assert store.request_cancel(thread, job)["cancellationRequested"] is True
    assert store.request_cancel(thread, job)["cancellationRequested"] is True
    assert store.cancel_path(thread, job).read_text() == "cancel\n"
    with store.open_lifecycle(thread, job) as lifecycle:
        lifecycle.fire("cancel", reason="explicit_cancellation")
    assert store.request_cancel(thread, job) == {"threadId": thread, "jobId": job, "state": "cancelled",
                                                 "cancellationRequested": False}


def test_cancelling_checks_the_job_belongs_to_the_thread_and_is_current(store: JobStore, clock: FakeClock,
                                                                        thread: str):
    old = scheduled_run(store, clock, thread, "completed")
    schedule(store, thread)
    with pytest.raises(StoreError, match="not the current job") as caught:
        store.request_cancel(thread, old)
    assert caught.value.code == "job_identity_mismatch"
    with pytest.raises(UnknownJob):
        store.request_cancel(new_thread(), old)


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["../../etc/passwd", "not-a-uuid", "", "0199a5c2-0000-4000-8000-00000000000/"])
def test_a_bad_id_is_rejected_before_any_path_is_built(store: JobStore, thread: str, bad: str):
    job = schedule(store, thread).job_id
    before = snapshot(store.root)
    calls = [
        lambda: store.create_job(bad, handoff=None, user_fingerprint=None),
        lambda: store.read_status(bad),
        lambda: store.open_lifecycle(thread, bad),
        lambda: store.request_cancel(bad, job),
        lambda: store.verify_handoff(thread, bad, "0" * 64),
        lambda: store.release_lock(bad, job),
        lambda: store.set_lock_owner(thread, bad, 1, None),
        lambda: store.reap_if_dead(bad),
        lambda: store.cancel_path(thread, bad),
        lambda: store.find(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidInput) as caught:
            call()
        assert caught.value.code == "invalid_id"
    assert snapshot(store.root) == before


def test_an_unknown_job_is_reported_not_guessed(store: JobStore, thread: str):
    with pytest.raises(UnknownJob):
        store.open_lifecycle(thread, new_thread())
    with pytest.raises(UnknownJob):
        store.find(new_thread())


def test_ids_are_lower_cased_so_a_thread_has_one_spelling(store: JobStore, thread: str):
    created = schedule(store, thread.upper())
    assert store.read_status(thread)["jobId"] == created.job_id


def test_the_worker_log_path_is_private_to_the_job(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    assert store.log_path(thread, job).parent == store.root
    assert store.read_status(thread)["logPath"] == str(store.log_path(thread, job))
