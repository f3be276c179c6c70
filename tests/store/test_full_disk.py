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
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rekall import service
from rekall.explain import build_explanation
from rekall.history import collect_history
from rekall.store import FileOps, JobStore, JournalUnusable
from rekall.testing import FakeClock
from tests.jobkit import idle, job_with_dead_worker, new_thread, open_store

PAGE = 4096


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the FileOps test below covers the rule")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


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


def _assert_reported_from_what_can_be_proven(status: dict) -> None:
    assert (status["state"], status["errorCode"], status["outcomeMayBeUnknown"]) == ("failed", "worker_lost", True)
    assert "the journal could not be written after `resuming`" in status["error"]
    assert "a continuation may have started" in status["error"]
    assert status["lastJournaledState"] == "resuming"


def test_on_a_full_disk_every_reader_reports_the_lost_worker_without_crashing(tiny_tmpfs: Path):
    clock = FakeClock()
    jobs = tiny_tmpfs / "jobs"
    store, thread = open_store(jobs, clock), new_thread()
    job = job_with_dead_worker(store, clock, thread, "resuming")
    _to_page_end(store, thread, job)
    _fill(tiny_tmpfs)
    with store.open_lifecycle(thread, job) as lifecycle, pytest.raises(JournalUnusable, match="No space left"):
        lifecycle.fire("turn_started", turnId="turn-9", turnStatus="inProgress")  # what the worker met
    env = {"REKALL_JOBS_DIR": str(jobs)}

    _assert_reported_from_what_can_be_proven(service.status(thread, env=env))
    _assert_reported_from_what_can_be_proven(service.status(thread, env=env))  # and again: still no crash
    explanation = build_explanation(JobStore.open_reader(env), job)
    assert explanation["state"] == "failed" and "a continuation may have started" in explanation["outcome"]
    [row] = collect_history(JobStore.open_reader(env))
    assert (row["state"], row["errorCode"]) == ("failed", "worker_lost")
    assert store.load(thread, job).state.value == "resuming"  # nothing was written, nothing was lost

    (tiny_tmpfs / "filler").unlink()  # space frees: the next reader journals the loss for good
    recorded = service.status(thread, env=env)
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
    _assert_reported_from_what_can_be_proven(status)
    assert store.lock_path(thread).exists()  # kept until the loss is journaled
    assert store.load(thread, job).state.value == "resuming"


def test_a_worker_that_could_not_journal_its_end_keeps_the_precise_words_once_space_comes_back(tiny_tmpfs: Path):
    clock = FakeClock()
    jobs = tiny_tmpfs / "jobs"
    store, thread = open_store(jobs, clock), new_thread()
    job = job_with_dead_worker(store, clock, thread, "waiting_for_resume_idle")
    _to_page_end(store, thread, job)
    _fill(tiny_tmpfs)
    with store.open_lifecycle(thread, job) as lifecycle, pytest.raises(JournalUnusable, match="No space left"):
        lifecycle.fire("idle_stable", **idle(31_000, handoffVerified=True))  # what the worker met ...
    store.release_lock(thread, job)  # ... before it released its lock and exited, as a worker does
    env = {"REKALL_JOBS_DIR": str(jobs)}
    during = service.status(thread, env=env)
    assert "the journal could not be written after `waiting_for_resume_idle`" in during["error"]

    (tiny_tmpfs / "filler").unlink()
    after = service.status(thread, env=env)
    assert (after["state"], after["errorCode"]) == ("failed", "worker_lost") and "journalUnwritable" not in after
    assert after["error"].startswith("the worker process is gone and the journal could not be written after "
                                     "`waiting_for_resume_idle` (its worker released the lock without journaling "
                                     "how the job ended); nothing was sent after it"), after["error"]
    assert store.load(thread, job).state.value == "failed"
