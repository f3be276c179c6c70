"""``rekall prune`` removes old, ended jobs only; every file rekall reads has a size limit."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from rekall.surfaces.cli import main
from rekall.store import JobStore, LockBusy
from rekall.testing import FakeClock
from tests.jobkit import job_with_dead_worker, new_thread, open_store, schedule, scheduled_run

DAY_MS = 24 * 3600 * 1000


def _prune(capsys, *args: str) -> dict:
    assert main(["prune", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def jobs(monkeypatch, tmp_path: Path) -> tuple[JobStore, FakeClock]:
    monkeypatch.setenv("REKALL_JOBS_DIR", str(tmp_path / "jobs"))
    # `rekall prune` reads the real clock: these jobs start 60 days before now.
    clock = FakeClock(start=datetime.now(timezone.utc) - timedelta(days=60))
    return open_store(tmp_path / "jobs", clock), clock


def test_prune_removes_the_files_of_jobs_that_ended_long_enough_ago(jobs, capsys):
    store, clock = jobs
    thread = new_thread()
    old = scheduled_run(store, clock, thread, "completed")
    clock.advance(40 * DAY_MS)
    recent = scheduled_run(store, clock, thread, "cancelled")
    clock.advance(1 * DAY_MS)
    dry = _prune(capsys, "--older-than", "30", "--dry-run")
    assert [r["jobId"] for r in dry["pruned"]] == [old] and dry["dryRun"] is True
    assert store.journal_path(thread, old).exists()  # a dry run removes nothing
    done = _prune(capsys, "--older-than", "0")
    assert {r["jobId"] for r in done["pruned"]} == {old, recent}
    assert set(done["pruned"][0]["files"]) == {f"{thread}.{old}.journal.jsonl", f"{thread}.{old}.handoff.json"}
    assert done["freedBytes"] > 0 and store.all_jobs() == []
    assert not store.status_path(thread).exists()  # no job left to back it


def test_prune_keeps_the_newest_jobs_of_each_thread(jobs, capsys):
    store, clock = jobs
    thread, other = new_thread(), new_thread()
    first, second, third = (scheduled_run(store, clock, thread, "completed") for _ in range(3))
    alone = scheduled_run(store, clock, other, "failed")
    done = _prune(capsys, "--keep", "2")
    assert [r["jobId"] for r in done["pruned"]] == [first] and done["keptJobs"] == 3
    assert {j for _, j in store.all_jobs()} == {second, third, alone}
    assert store.read_status(thread).jobId == third


def test_prune_never_removes_an_unfinished_job_or_one_a_live_lock_names(jobs, capsys):
    store, clock = jobs
    running, thread = new_thread(), new_thread()
    live = schedule(store, running).job_id  # its lock names this live process
    ended = scheduled_run(store, clock, thread, "completed")
    store.lock_path(thread).write_text(store.lock_path(running).read_text().replace(live, ended)
                                       .replace(running, thread))  # a live lock still naming an ended job
    done = _prune(capsys, "--older-than", "0", "--keep", "0")
    assert done["pruned"] == [] and {j for _, j in store.all_jobs()} == {live, ended}


def test_prune_records_a_dead_worker_first_and_then_may_remove_its_job(jobs, capsys):
    store, clock = jobs
    thread = new_thread()
    lost = job_with_dead_worker(store, clock, thread, "requesting")
    done = _prune(capsys, "--keep", "0")
    assert [(r["jobId"], r["state"]) for r in done["pruned"]] == [(lost, "failed")]


@pytest.mark.parametrize("args, field", [(["--older-than", "-1"], "--older-than"), (["--keep", "two"], "--keep"),
                                         ([], "--older-than")])
def test_prune_refuses_bad_rules_naming_the_option(capsys, args, field):
    assert main(["prune", *args, "--json"]) != 0
    assert json.loads(capsys.readouterr().out)["error"]["field"] == field


# --- size limits ---------------------------------------------------------------------------


def _grow(path: Path, size: int) -> None:
    with path.open("r+b" if path.exists() else "wb") as handle:
        handle.truncate(size)  # sparse: no disk, but a reader without a limit would load it all


def test_a_huge_status_file_is_not_read_and_is_rebuilt_from_the_journal(store: JobStore, thread: str):
    STATUS_LIMIT = 4 * 1024 * 1024  # rekall.store.fsread.STATUS_LIMIT

    job = scheduled_run(store, store.clock, thread, "completed")  # ended: readers may rewrite its status
    _grow(store.status_path(thread), 200 * 1024 * 1024)
    status = store.read_status(thread)
    assert status.jobId == job and "too large" in status.statusFileProblem
    assert f"over the limit of {STATUS_LIMIT:,}" in status.statusFileProblem
    assert store.status_path(thread).stat().st_size < STATUS_LIMIT  # rewritten from the journal


def test_a_huge_lock_is_reported_and_left_alone(store: JobStore, thread: str):
    LOCK_LIMIT = 64 * 1024  # rekall.store.fsread.LOCK_LIMIT

    schedule(store, thread)
    _grow(store.lock_path(thread), LOCK_LIMIT + 1)
    with pytest.raises(LockBusy, match="over the limit"):
        store.lock_holder(thread)
    assert store.lock_path(thread).stat().st_size == LOCK_LIMIT + 1


def test_a_handoff_file_that_never_ends_is_refused_after_the_limit(tmp_path: Path):
    from rekall.kernel.errors import InvalidInput
    from rekall.store import read_handoff_file

    with pytest.raises(InvalidInput, match="larger than"):
        read_handoff_file("/dev/zero")  # stat says 0 bytes; reading it all would never end
