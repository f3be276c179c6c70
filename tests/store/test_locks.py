"""The per-thread lock (rekall.store.locks): who may take, hand over and release it."""

from __future__ import annotations

import json
import os

import pytest

from rekall.store import JobStore, LockBusy
from rekall.store.wire import encode_lock
from rekall.store.processes import LockHolder

from tests.jobkit import new_thread, schedule, snapshot


def _write_lock(store: JobStore, thread: str, **holder) -> None:
    store.lock_path(thread).write_bytes(encode_lock(LockHolder(thread_id=thread, **holder)))


def test_a_reused_pid_is_not_mistaken_for_the_holder(store: JobStore, thread: str):
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


def test_the_lock_can_be_handed_to_the_worker_only_by_its_own_job(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    before = store.lock_path(thread).read_bytes()
    assert store.set_lock_holder(thread, new_thread(), 4242, None) is False
    assert store.lock_path(thread).read_bytes() == before
    assert store.set_lock_holder(thread, job, 4242, "linux:b:7") is True
    holder = store.lock_holder(thread)
    assert (holder.job_id, holder.pid, holder.process_start_time) == (job, 4242, "linux:b:7")


def test_a_lock_is_released_only_by_the_job_it_names(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    assert store.release_lock(thread, new_thread()) is False
    assert store.lock_path(thread).exists()
    assert store.release_lock(thread, job) is True
    assert store.lock_holder(thread) is None
    assert store.release_lock(thread, job) is False
