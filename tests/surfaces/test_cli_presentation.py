"""How the command line presents itself: help, short ids, history's limit, exit codes, notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rekall.surfaces.cli import main
from rekall.testing import FakeClock

from tests.jobkit import dead_pid, new_thread, open_store, schedule, scheduled_run


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "jobs"
    monkeypatch.setenv("REKALL_JOBS_DIR", str(path))
    return path


def _thread_with_prefix(prefix: str) -> str:
    return prefix + new_thread()[len(prefix):]


# --- help --------------------------------------------------------------------------------------


def test_help_shows_no_internal_verb_and_no_markup(capsys: pytest.CaptureFixture[str]):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "SUPPRESS" not in out and "worker" not in out and "``" not in out
    assert "Exit codes: 0 success, 1 a failed or refused operation, 2 a usage error" in " ".join(out.split())


def test_an_unknown_verb_does_not_offer_the_internal_worker(capsys: pytest.CaptureFixture[str]):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and "'explain'" in err and "worker" not in err


# --- short ids ---------------------------------------------------------------------------------


def test_explain_and_cancel_accept_the_short_ids_history_shows(jobs: Path, capsys: pytest.CaptureFixture[str]):
    clock = FakeClock()
    store = open_store(jobs, clock)
    thread = new_thread()
    done = scheduled_run(store, clock, thread, "completed")
    assert main(["history", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["jobId"] == done
    assert main(["history"]) == 0
    assert f"job {done[:8]}" in capsys.readouterr().out
    assert main(["explain", done[:8], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobId"] == done
    assert main(["explain", thread[:13]]) == 0  # a thread prefix: its latest job
    assert done in capsys.readouterr().out
    running = schedule(store, thread).job_id
    assert main(["cancel", running[:8], "--json"]) == 0  # the thread comes from the job's journal
    assert json.loads(capsys.readouterr().out)["cancellationRequested"] is True
    assert main(["status", thread[:8], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobId"] == running


def test_an_ambiguous_prefix_is_refused_with_the_candidates(jobs: Path, capsys: pytest.CaptureFixture[str]):
    clock = FakeClock()
    store = open_store(jobs, clock)
    first, second = _thread_with_prefix("abcdef12-a"), _thread_with_prefix("abcdef12-b")
    scheduled_run(store, clock, first, "completed")
    scheduled_run(store, clock, second, "completed")
    assert main(["status", "abcdef12", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "ambiguous_id" and first in error["message"] and second in error["message"]
    assert main(["status", "abcdef12-b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["threadId"] == second


@pytest.mark.parametrize("text", ["abcdef1", "ABCDEF1Z", "../../etc"])
def test_a_prefix_shorter_than_eight_or_not_hex_is_refused_before_the_store_is_touched(
        jobs: Path, text: str, capsys: pytest.CaptureFixture[str]):
    assert main(["explain", text]) == 2
    assert "at least 8 characters" in capsys.readouterr().err
    assert not jobs.exists()


def test_a_prefix_nothing_starts_with_is_unknown(jobs: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["explain", "0123abcd", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "unknown_job"


# --- history --------------------------------------------------------------------------------


def test_history_shows_twenty_by_default_and_says_how_many_were_left_out(jobs: Path,
                                                                         capsys: pytest.CaptureFixture[str]):
    clock = FakeClock()
    store = open_store(jobs, clock)
    made = [scheduled_run(store, clock, new_thread(), "completed") for _ in range(23)]
    assert main(["history"]) == 0
    out = capsys.readouterr().out
    assert out.count("completed  job ") == 20 and f"job {made[-1][:8]}" in out and f"job {made[2][:8]}" not in out
    assert "3 older jobs left out" in out
    assert main(["history", "--limit", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert [row["jobId"] for row in json.loads(captured.out)] == made[:-3:-1]
    assert "21 older jobs left out" in captured.err
    assert main(["history", "--limit", "0", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 23
    assert main(["history", "--limit", "-1"]) == 2


def test_history_shows_that_the_outcome_may_be_unknown(jobs: Path, capsys: pytest.CaptureFixture[str]):
    clock = FakeClock()
    store = open_store(jobs, clock)
    scheduled_run(store, clock, new_thread(), "failed")
    assert main(["history"]) == 0
    assert "outcome may be unknown" in capsys.readouterr().out.lower()


# --- exit codes and notes ----------------------------------------------------------------------


@pytest.mark.parametrize(("outcome", "status"), [("failed", 1), ("timed_out", 1), ("resumed", 0), ("skipped", 0)])
def test_status_watch_exits_1_when_the_job_failed_or_timed_out(jobs: Path, outcome: str, status: int,
                                                               capsys: pytest.CaptureFixture[str]):
    clock = FakeClock()
    store = open_store(jobs, clock)
    thread = new_thread()
    scheduled_run(store, clock, thread, outcome)
    assert main(["status", thread, "--watch", "--json"]) == status
    assert json.loads(capsys.readouterr().out)["state"] == outcome
    assert main(["status", thread, "--watch"]) == status


def test_store_warnings_reach_people_as_rekall_notes_not_bare_log_lines(jobs: Path,
                                                                        capsys: pytest.CaptureFixture[str]):
    store = open_store(jobs)
    thread = new_thread()
    job = schedule(store, thread).job_id
    store.set_lock_holder(thread, job, dead_pid(), None)
    assert main(["status", thread, "--json"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("rekall: note: removed the stale lock of thread")
    assert all(line.startswith("rekall: ") for line in err.splitlines())


# --- names from the disk or the environment, printed -------------------------------------------

#: A folder name that clears the screen, sets the terminal's title, reverses the text and starts a C1 sequence.
HOSTILE = "jobs\x1b[2J\x1b]0;owned\x07\u202e\x9b31m"
_RAW = ("\x1b", "\x07", "\u202e", "\x9b")


def test_a_hostile_path_in_an_error_is_printed_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]):
    not_a_folder = tmp_path / HOSTILE
    not_a_folder.write_text("")
    monkeypatch.setenv("REKALL_JOBS_DIR", str(not_a_folder))
    assert main(["history"]) != 0
    err = capsys.readouterr().err
    assert not any(raw in err for raw in _RAW)
    assert "jobs\\x1b[2J\\x1b]0;owned\\x07\\u202e\\x9b31m" in err


def test_a_hostile_path_in_history_is_printed_escaped_and_kept_in_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    jobs = tmp_path / HOSTILE
    monkeypatch.setenv("REKALL_JOBS_DIR", str(jobs))
    store = open_store(jobs)
    job = schedule(store, new_thread()).job_id
    store.journal_path(new_thread(), job).mkdir()  # an unreadable row, whose outcome names its path
    assert main(["history"]) == 0
    out = capsys.readouterr().out
    assert "Unreadable journal: cannot read the journal" in out
    assert not any(raw in out for raw in _RAW)
    assert "\\x1b[2J" in out.replace("\n", "").replace(" ", "")
    assert main(["history", "--json"]) == 0
    out = capsys.readouterr().out
    assert not any(raw in out for raw in _RAW)
    assert any(str(jobs) in row.get("outcome", "") for row in json.loads(out))


def test_a_hostile_name_in_a_store_note_is_printed_escaped(jobs: Path, capsys: pytest.CaptureFixture[str]):
    import logging

    assert main(["history"]) == 0  # installs the notes' handler
    logging.getLogger("rekall.store").warning("the jobs directory %s could not be recorded", HOSTILE)
    err = capsys.readouterr().err
    assert err.startswith("rekall: note: the jobs directory jobs\\x1b[2J") and not any(raw in err for raw in _RAW)

