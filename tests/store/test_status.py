"""A thread's status (rekall.store.status): derived from the journal, the file repaired."""

from __future__ import annotations

import json
import os

import attrs
import pytest

from rekall.states.status import ABSENT, wire
from rekall.store import HISTORY_LIMIT, JobStore, StatusCorrupt
from rekall.store.views import unsealed
from rekall.testing import FakeClock

from tests.jobkit import dead_pid, schedule, scheduled_run


def test_a_thread_without_jobs_is_not_scheduled(store: JobStore, thread: str):
    assert wire(store.read_status(thread)) == {"threadId": thread, "status": "not_scheduled", "state": "not_scheduled"}


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
    assert status.statusFileProblem.startswith(problem)
    assert attrs.evolve(status, statusFileProblem=ABSENT) == good
    assert unsealed(json.loads(store.status_path(thread).read_text())) == wire(good)  # repaired: no live owner
    assert store.read_status(thread) == good and good.jobId == job


def test_a_fifo_planted_at_the_status_file_is_named_at_once_and_replaced_by_the_rebuilt_file(
        store: JobStore, clock: FakeClock, thread: str):
    # It used to be read as a stream: `rekall status` waited 30 s for a writer that never came.
    scheduled_run(store, clock, thread, "completed")
    good = store.read_status(thread)
    path = store.status_path(thread)
    path.unlink()
    os.mkfifo(path, 0o600)
    status = store.read_status(thread)
    assert status.statusFileProblem.startswith(f"not a regular file ({path} is a FIFO (named pipe))")
    assert attrs.evolve(status, statusFileProblem=ABSENT) == good
    assert unsealed(json.loads(path.read_text())) == wire(good)


def test_a_corrupt_status_file_with_no_journal_behind_it_is_an_error(store: JobStore, thread: str):
    store.status_path(thread).write_text("{oops")
    with pytest.raises(StatusCorrupt, match="no journal"):
        store.read_status(thread)
    assert store.status_path(thread).read_text() == "{oops"


def test_a_node_status_file_without_a_journal_is_shown_as_found(store: JobStore, thread: str):
    store.status_path(thread).write_text(json.dumps({"threadId": thread, "status": "completed"}))
    status = store.read_status(thread)
    assert status.status == "completed" and "no journal" in status.statusFileProblem


def test_history_keeps_the_last_twenty_jobs_including_a_lost_worker(store: JobStore, clock: FakeClock,
                                                                    thread: str):
    done = [scheduled_run(store, clock, thread, "completed") for _ in range(HISTORY_LIMIT + 1)]
    lost = schedule(store, thread).job_id
    store.set_lock_holder(thread, lost, dead_pid(), None)
    latest = schedule(store, thread)
    history = latest.status.history
    assert len(history) == HISTORY_LIMIT
    assert [h["jobId"] for h in history] == done[2:] + [lost]
    assert history[-1]["status"] == "failed" and history[-1]["errorCode"] == "worker_lost"
    assert history[0]["jobNumber"] == 3 and latest.status.jobNumber == HISTORY_LIMIT + 3
    assert set(history[0]) >= {"createdAt", "endedAt", "contextTokensBefore", "contextTokensAfter",
                               "tokensReclaimed", "reclaimedFraction", "compactionDurationMs", "resumeDelayMs"}
    # A neutral end time: the lost job did not complete, and no entry says it did.
    assert history[-1]["endedAt"] is not None and "completedAt" not in history[-1]
