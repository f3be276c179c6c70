"""The cancel marker (rekall.store.cancel)."""

from __future__ import annotations

import pytest

from rekall.kernel.errors import StoreError
from rekall.states.status import wire
from rekall.store import JobStore, UnknownJob
from rekall.testing import FakeClock

from tests.jobkit import new_thread, schedule, scheduled_run


def test_cancelling_writes_the_marker_once_and_is_a_no_op_after_the_end(store: JobStore, clock: FakeClock,
                                                                        thread: str):
    job = schedule(store, thread).job_id
    assert store.request_cancel(thread, job).cancellationRequested is True
    assert store.request_cancel(thread, job).cancellationRequested is True
    assert store.cancel_path(thread, job).read_text() == "cancel\n"
    with store.open_lifecycle(thread, job) as lifecycle:
        lifecycle.fire("cancel", reason="explicit_cancellation")
    assert wire(store.request_cancel(thread, job)) == {"threadId": thread, "jobId": job, "state": "cancelled",
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
