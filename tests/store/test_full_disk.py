"""A full disk mid-job: readers never crash, and report what can be proven.

The scenario of the issue: the continuation started, the ``turn_started`` append failed
(ENOSPC), the worker died. Until space frees, every reader must still answer: the worker is
gone, the journal could not be written after ``resuming``, a continuation may have started.

The main test runs on a real 1 MiB tmpfs (needs root to mount; skipped with the reason
otherwise); the same rule is checked everywhere with a fault-injecting ``FileOps``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rekall.usecases import service
from rekall.surfaces.explain import build_explanation
from rekall.surfaces.history import collect_history
from rekall.states.status import wire
from rekall.store import FileOps, JobStore, JournalUnusable
from rekall.testing import FakeClock
from tests.jobkit import idle, job_with_dead_worker, new_thread, open_store
from tests.support.mounts import tmpfs

PAGE = 4096


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "tmpfs", without_root="the FileOps test below covers the rule") as mount:
        yield mount


def _fill(directory: Path) -> None:
    """Take every free block of the filesystem."""
    with (directory / "filler").open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * PAGE)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        try:
            while True:
                handle.write(b"\0")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def _to_page_end(store: JobStore, thread: str, job: str) -> None:
    """Pad the journal with notes until its last page has no room for another record, so the
    next append needs a new block (tmpfs allocates whole pages)."""
    path = store.journal_path(thread, job)
    with store.open_lifecycle(thread, job) as lifecycle:
        while PAGE - path.stat().st_size % PAGE > 120:
            room = PAGE - path.stat().st_size % PAGE
            lifecycle.note("padding", fill="x" * max(1, min(room - 180, 2000)))


def _a_full_disk_met_by_a_dead_worker(mount: Path, state: str, trigger: str,
                                      **evidence: object) -> tuple[JobStore, str, str]:
    """A job in ``state`` whose worker met a full disk journaling ``trigger``, then died."""
    clock = FakeClock()
    store, thread = open_store(mount / "jobs", clock), new_thread()
    job = job_with_dead_worker(store, clock, thread, state)
    _to_page_end(store, thread, job)
    _fill(mount)
    with store.open_lifecycle(thread, job) as lifecycle, pytest.raises(JournalUnusable, match="No space left"):
        lifecycle.fire(trigger, **evidence)
    return store, thread, job


def _assert_reported_from_what_can_be_proven(status: dict) -> None:
    assert (status["state"], status["errorCode"], status["outcomeMayBeUnknown"]) == ("failed", "worker_lost", True)
    assert "the journal could not be written after `resuming`" in status["error"]
    assert "a continuation may have started" in status["error"]
    assert status["lastJournaledState"] == "resuming"


def test_on_a_full_disk_every_reader_reports_the_lost_worker_without_crashing(tiny_tmpfs: Path):
    store, thread, job = _a_full_disk_met_by_a_dead_worker(tiny_tmpfs, "resuming", "handoff_delivered",
                                                           turnId="turn-9", turnStatus="inProgress")
    env = {"REKALL_JOBS_DIR": str(store.root)}

    _assert_reported_from_what_can_be_proven(service.status_reply(thread, env=env))
    _assert_reported_from_what_can_be_proven(service.status_reply(thread, env=env))  # and again: still no crash
    explanation = build_explanation(JobStore.open_reader(env), job)
    assert explanation["state"] == "failed" and "a continuation may have started" in explanation["outcome"]
    [row] = collect_history(JobStore.open_reader(env))
    assert (row["state"], row["errorCode"]) == ("failed", "worker_lost")
    assert store.load(thread, job).state.value == "resuming"  # nothing was written, nothing was lost

    (tiny_tmpfs / "filler").unlink()  # space frees: the next reader journals the loss for good
    recorded = service.status_reply(thread, env=env)
    assert recorded["state"] == "failed" and "journalUnwritable" not in recorded
    assert store.load(thread, job).state.value == "failed"


def test_when_the_journal_refuses_writes_readers_report_the_lost_worker(tmp_path: Path):
    clock = FakeClock()
    store, thread = open_store(tmp_path / "jobs", clock), new_thread()
    job = job_with_dead_worker(store, clock, thread, "resuming")

    def no_space(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    full = JobStore(store.root, lock_root=store.lock_root, clock=clock, fs=FileOps()._replace(write=no_space))
    full.reap_if_dead(thread)
    status = full.read_status(thread)
    _assert_reported_from_what_can_be_proven(wire(status))  # as `rekall status` shows it
    assert store.lock_path(thread).exists()  # kept until the loss is journaled
    assert store.load(thread, job).state.value == "resuming"


def test_a_worker_that_could_not_journal_its_end_keeps_the_precise_words_once_space_comes_back(tiny_tmpfs: Path):
    store, thread, job = _a_full_disk_met_by_a_dead_worker(tiny_tmpfs, "waiting_for_resume_idle", "idle_stable",
                                                           **idle(31_000, handoffVerified=True))
    store.release_lock(thread, job)  # ... before it released its lock and exited, as a worker does
    env = {"REKALL_JOBS_DIR": str(store.root)}
    during = service.status_reply(thread, env=env)
    assert "the journal could not be written after `waiting_for_resume_idle`" in during["error"]

    (tiny_tmpfs / "filler").unlink()
    after = service.status_reply(thread, env=env)
    assert (after["state"], after["errorCode"]) == ("failed", "worker_lost") and "journalUnwritable" not in after
    assert after["error"].startswith("the worker process is gone and the journal could not be written after "
                                     "`waiting_for_resume_idle` (its worker released the lock without journaling "
                                     "how the job ended); nothing was sent after it"), after["error"]
    assert store.load(thread, job).state.value == "failed"
