"""The worker_lost rule (rekall.store.reaper): a provably dead worker's job is recorded."""

from __future__ import annotations

import pytest

from rekall.states import JobState
from rekall.store import JobStore, LockBusy
from rekall.store.jobstore import Reaped

from tests.jobkit import FINGERPRINT, dead_pid, idle, me, schedule


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
    store.set_lock_holder(thread, old, gone, None)

    new = schedule(store, thread)
    assert not new.already_scheduled and new.job_id != old
    lost = store.load(thread, old).view.fields
    assert (store.load(thread, old).state, lost["errorCode"], lost["outcomeMayBeUnknown"]) == (
        JobState.FAILED, "worker_lost", unknown)
    assert was in lost["error"]
    assert [h["jobId"] for h in new.status.history] == [old]
    assert new.status.history[0]["errorCode"] == "worker_lost"
    assert store.lock_holder(thread).job_id == new.job_id


def test_reap_if_dead_leaves_a_live_job_and_reaps_a_dead_one(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    assert store.reap_if_dead(thread) is None
    store.set_lock_holder(thread, job, dead_pid(), None)
    report = store.reap_if_dead(thread)
    assert report == Reaped(job_id=job, reaped=True, lock_removed=True, state="failed")
    assert store.lock_holder(thread) is None and store.read_status(thread).errorCode == "worker_lost"


def test_a_job_that_lost_its_lock_is_reaped_once_its_worker_is_gone(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    with store.open_lifecycle(thread, job) as lifecycle:
        lifecycle.fire("worker_started", **{**me(job), "pid": dead_pid(), "processStartTime": None})
    store.lock_path(thread).unlink()
    assert store.reap_if_dead(thread) == Reaped(job_id=job, reaped=True, lock_removed=False, state="failed")


def test_a_job_that_lost_its_lock_but_whose_worker_runs_blocks_scheduling(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    with store.open_lifecycle(thread, job) as lifecycle:
        lifecycle.fire("worker_started", **me(job))
    store.lock_path(thread).unlink()
    with pytest.raises(LockBusy, match="without its lock"):
        schedule(store, thread)


@pytest.mark.parametrize(("platform", "owner"), [("app-server", "the shared app-server"),
                                                 ("extension-ipc", "the extension"), (None, "the extension")])
def test_a_lost_workers_record_names_the_owner_in_its_platforms_words(store: JobStore, thread: str, platform, owner):
    extra = {"platform": platform} if platform else {}
    job = store.create_job(thread, handoff=None, user_fingerprint=FINGERPRINT, extra=extra).job_id
    gone = dead_pid()
    with store.open_lifecycle(thread, job) as lifecycle:
        lifecycle.fire("worker_started", **{**me(job), "pid": gone, "processStartTime": None})
        lifecycle.fire("idle_stable", **idle(90_000))
        lifecycle.fire("compaction_accepted", ownerId="o1")
    store.set_lock_holder(thread, job, gone, None)
    store.reap_if_dead(thread)
    error = store.read_status(thread).error
    assert f"after {owner} accepted the compaction request" in error
    assert platform != "app-server" or "extension" not in error
