"""The quick answers (``rekall status --json``, ``rekall history --json`` from trusted views) are
byte for byte what the full CLI prints, and are given only while the views can be trusted.

Each test builds a store with the real store code, asks the quick path first, then runs the
full CLI in-process on the same disk, and compares.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rekall.surfaces import cli
from rekall.surfaces.cli_entry import answer_from_views
from rekall.store import JobStore
from rekall.store.paths import JobPaths
from rekall.store.views import SEAL, HistoryRows
from rekall.testing import FakeClock
from tests.jobkit import run, schedule, scheduled_run

OUTCOMES = ("resumed", "failed", "skipped", "cancelled", "timed_out", "resumed")


@pytest.fixture
def paths(store: JobStore, jobs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> JobPaths:
    monkeypatch.setenv("REKALL_JOBS_DIR", str(jobs_dir))
    return store.paths


@pytest.fixture
def thread(store: JobStore, clock: FakeClock, paths: JobPaths) -> str:
    """A thread whose six jobs have ended, one of each outcome, behind another thread's two."""
    other = "00000000-0000-4000-8000-000000000001"
    for outcome in ("resumed", "failed"):
        scheduled_run(store, clock, other, outcome)
    busy = "00000000-0000-4000-8000-000000000002"
    for outcome in OUTCOMES:
        scheduled_run(store, clock, busy, outcome)
    return busy


def full(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def quick_then_full(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[tuple[str, str] | None, tuple[str, str]]:
    return answer_from_views(argv, os.environ), full(argv, capsys)


def status_argv(thread: str) -> list[str]:
    return ["status", thread, "--json"]


HISTORY = ["history", "--json", "--limit", "0"]


def test_the_status_of_an_ended_job_is_answered_quickly_with_the_full_commands_bytes(thread, capsys):
    quick, printed = quick_then_full(status_argv(thread), capsys)
    assert quick == printed
    assert json.loads(quick[0])["jobNumber"] == len(OUTCOMES)  # the thread's latest job, with its history
    assert len(json.loads(quick[0])["history"]) == len(OUTCOMES) - 1


def test_the_thread_may_come_from_codex_thread_id(thread, capsys, monkeypatch):
    monkeypatch.setenv("CODEX_THREAD_ID", thread)
    quick, printed = quick_then_full(["status", "--json"], capsys)
    assert quick == printed and quick is not None


def test_history_is_answered_quickly_once_its_rows_are_saved(thread, capsys, paths):
    assert answer_from_views(HISTORY, os.environ) is None  # no rows saved yet
    first = full(HISTORY, capsys)  # the full path saves the rows of the ended jobs
    assert paths.history_rows().exists()
    assert paths.history_rows().stat().st_mode & 0o777 == 0o600
    quick, printed = quick_then_full(HISTORY, capsys)
    assert quick == printed == first
    assert len(json.loads(quick[0])) == len(OUTCOMES) + 2


@pytest.mark.parametrize("argv", [["history", "--json"], ["history", "--json", "--limit", "3"],
                                  ["history", "--limit", "1", "--json"],
                                  ["history", "--json", "--thread", "00000000-0000-4000-8000-000000000001"]],
                         ids=["default-limit", "limit-3", "limit-first", "one-thread"])
def test_history_limits_and_thread_filter_match_the_full_command(thread, capsys, argv):
    full(HISTORY, capsys)
    quick, printed = quick_then_full(argv, capsys)
    assert quick == printed and quick is not None
    if "3" in argv:
        assert quick[1] == f"rekall: {len(OUTCOMES) + 2 - 3} older jobs left out; pass --limit 0 for all\n"


def test_a_running_job_is_left_to_the_full_command(thread, store, capsys):
    full(HISTORY, capsys)
    schedule(store, thread)  # scheduled: its worker would decide liveness, which only the full path checks
    assert answer_from_views(status_argv(thread), os.environ) is None
    assert answer_from_views(HISTORY, os.environ) is None
    printed = full(HISTORY, capsys)
    assert json.loads(printed[0])[0]["state"] == "scheduled"


def test_a_record_added_to_a_journal_after_the_seal_is_noticed(thread, store, clock, capsys, paths):
    full(HISTORY, capsys)
    job = json.loads(full(status_argv(thread), capsys)[0])["jobId"]
    with paths.journal(thread, job).open("ab") as journal:  # any append changes the stamp
        journal.write(b"\n")
    assert answer_from_views(status_argv(thread), os.environ) is None
    assert answer_from_views(HISTORY, os.environ) is None


def test_a_new_job_that_has_ended_is_served_after_its_worker_wrote_the_status(thread, store, clock, capsys):
    full(HISTORY, capsys)
    created = schedule(store, thread)
    run(store, clock, thread, created.job_id, "resumed")
    store.release_lock(thread, created.job_id)
    quick, printed = quick_then_full(status_argv(thread), capsys)  # sealed by the worker's last transition
    assert quick == printed
    assert json.loads(quick[0])["jobId"] == created.job_id
    assert answer_from_views(HISTORY, os.environ) is None  # its row is not saved yet
    full(HISTORY, capsys)
    quick, printed = quick_then_full(HISTORY, capsys)
    assert quick == printed and json.loads(quick[0])[0]["jobId"] == created.job_id


def test_a_hand_edited_status_file_is_not_served(thread, capsys, paths):
    path = paths.status_file(thread)
    found = json.loads(path.read_text())
    found["state"] = "failed"  # the seal is kept, the content is not what was sealed
    path.write_text(json.dumps(found, indent=2))
    assert answer_from_views(status_argv(thread), os.environ) is None
    printed = json.loads(full(status_argv(thread), capsys)[0])
    assert printed["state"] == "resumed" and "statusFileProblem" in printed


def test_a_status_file_without_a_seal_is_sealed_by_the_next_full_read(thread, capsys, paths):
    path = paths.status_file(thread)
    found = json.loads(path.read_text())
    del found[SEAL]  # as an earlier rekall wrote it
    path.write_text(json.dumps(found, indent=2, ensure_ascii=False) + "\n")
    assert answer_from_views(status_argv(thread), os.environ) is None
    first = full(status_argv(thread), capsys)
    assert "statusFileProblem" not in first[0]  # right, only not sealed: nothing to report
    quick, printed = quick_then_full(status_argv(thread), capsys)
    assert quick == printed == first


def test_a_seal_from_another_rekall_version_is_not_trusted(thread, paths):
    path = paths.status_file(thread)
    found = json.loads(path.read_text())
    found[SEAL]["rekall"] = "0.0.1"
    path.write_text(json.dumps(found, indent=2, ensure_ascii=False) + "\n")
    assert answer_from_views(status_argv(thread), os.environ) is None


def test_an_earlier_job_pruned_changes_the_history_so_neither_view_is_served(thread, store, capsys, paths):
    full(HISTORY, capsys)
    oldest = json.loads(full(status_argv(thread), capsys)[0])["history"][0]["jobId"]
    paths.journal(thread, oldest).unlink()
    assert answer_from_views(status_argv(thread), os.environ) is None
    quick, printed = quick_then_full(HISTORY, capsys)  # a removed journal's row is simply not listed
    assert quick == printed
    assert oldest not in quick[0]
    shown = json.loads(full(status_argv(thread), capsys)[0])
    assert oldest not in [entry["jobId"] for entry in shown["history"]]


def test_a_damaged_journal_is_not_hidden_by_a_saved_row(thread, capsys, paths):
    full(HISTORY, capsys)
    job = json.loads(full(status_argv(thread), capsys)[0])["jobId"]
    path = paths.journal(thread, job)
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01  # same size, one bit flipped, written again (a new modification time)
    os.utime(path, ns=(0, 0))
    path.write_bytes(bytes(data))
    assert answer_from_views(status_argv(thread), os.environ) is None
    assert answer_from_views(HISTORY, os.environ) is None
    rows = json.loads(full(HISTORY, capsys)[0])
    assert [row["state"] for row in rows if row["jobId"] == job] == ["unreadable"]


def test_a_journal_replaced_by_a_symlink_is_not_served(thread, capsys, paths, tmp_path):
    full(HISTORY, capsys)
    job = json.loads(full(status_argv(thread), capsys)[0])["jobId"]
    path = paths.journal(thread, job)
    copy = tmp_path / "elsewhere.jsonl"
    copy.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(copy)
    assert answer_from_views(status_argv(thread), os.environ) is None
    assert answer_from_views(HISTORY, os.environ) is None


def test_damaged_saved_rows_are_not_served_and_are_saved_again(thread, capsys, paths):
    first = full(HISTORY, capsys)
    rows = paths.history_rows()
    data = bytearray(rows.read_bytes())
    data[-5] ^= 0x01
    rows.write_bytes(bytes(data))
    assert HistoryRows.load(paths) is None
    assert answer_from_views(HISTORY, os.environ) is None
    assert full(HISTORY, capsys) == first
    assert answer_from_views(HISTORY, os.environ) == first


def test_the_node_versions_jobs_leave_history_to_the_full_command(thread, capsys, isolated_env):
    full(HISTORY, capsys)
    node_dir = isolated_env / "tools" / "context-compact" / "jobs"
    node_dir.mkdir(parents=True, mode=0o700)
    assert answer_from_views(HISTORY, os.environ) is None


def test_without_a_jobs_directory_the_full_command_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("REKALL_JOBS_DIR", str(tmp_path / "absent"))
    assert answer_from_views(status_argv("00000000-0000-4000-8000-000000000002"), os.environ) is None
    assert answer_from_views(HISTORY, os.environ) is None
    assert not (tmp_path / "absent").exists()


@pytest.mark.parametrize("argv", [
    ["status", "00000000-0000-4000-8000-000000000002"],  # for people: rich
    ["status", "00000000", "--json"],  # a prefix: resolved by the CLI
    ["status", "00000000-0000-4000-8000-00000000000A", "--json"],  # upper case: lower-cased by the CLI
    ["status", "--json", "--watch", "00000000-0000-4000-8000-000000000002"],
    ["status", "--json", "--json", "00000000-0000-4000-8000-000000000002"],
    ["status", "--json"],  # no thread and no CODEX_THREAD_ID: the CLI explains
    ["history", "--json", "--since", "2026-01-01"],
    ["history", "--json", "--limit", "-1"],
    ["history", "--json", "--limit"],
    ["history", "--json", "--limit=3"],
    ["history", "--json", "--thread", "00000000"],
    ["history"],
    ["explain", "00000000-0000-4000-8000-000000000002", "--json"],
    [],
], ids=lambda argv: " ".join(argv) or "nothing")
def test_every_other_command_goes_to_the_full_cli(thread, capsys, argv):
    full(HISTORY, capsys)
    assert answer_from_views(argv, os.environ) is None


def test_rekall_started_as_a_module_answers_quickly_and_falls_back(thread, capsys, jobs_dir):
    # The same bytes from `python -m rekall` (quick) and the CLI, in a fresh interpreter each.
    import subprocess
    import sys

    env = {**os.environ, "REKALL_JOBS_DIR": str(jobs_dir)}
    for argv in (status_argv(thread), status_argv(thread.upper())):  # quick, then the CLI
        started = subprocess.run([sys.executable, "-m", "rekall", *argv], env=env, capture_output=True, text=True,
                                 timeout=60, check=True)
        assert started.stdout == full(status_argv(thread), capsys)[0]


NO_JOB = "00000000-0000-4000-8000-000000000003"


def test_a_thread_with_nothing_on_disk_is_answered_quickly_with_the_full_commands_bytes(thread, capsys):
    quick, whole = quick_then_full(status_argv(NO_JOB), capsys)
    assert quick == whole
    assert json.loads(whole[0]) == {"threadId": NO_JOB, "status": "not_scheduled", "state": "not_scheduled"}


def test_a_thread_with_a_lock_or_a_status_file_but_no_journal_is_left_to_the_full_command(thread, store, capsys):
    lock = store.locks.places(NO_JOB)[0]
    lock.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock.write_text("{}")  # a lock being taken, or a stale one the full path judges
    assert answer_from_views(status_argv(NO_JOB), os.environ) is None
    lock.unlink()
    store.paths.status_file(NO_JOB).write_text('{"state": "completed"}')  # the Node version's, or by hand
    assert answer_from_views(status_argv(NO_JOB), os.environ) is None
