"""The lifecycle verbs of the CLI: states, explain, history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rekall.surfaces.cli import main
from rekall.kernel.errors import InvalidInput
from rekall.store import UnknownJob
from rekall.states.render import render
from rekall.testing import FakeClock

from tests.jobkit import new_thread, open_store, scheduled_run


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "jobs"
    monkeypatch.setenv("REKALL_JOBS_DIR", str(path))
    return path


@pytest.mark.parametrize("fmt", ["mermaid", "markdown", "json"])
def test_states_prints_the_machine_in_each_format(fmt: str, capsys: pytest.CaptureFixture[str]):
    assert main(["states", "--format", fmt]) == 0
    assert capsys.readouterr().out == render(fmt)


def test_states_json_flag_means_the_json_format(capsys: pytest.CaptureFixture[str]):
    assert main(["states", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["initial"] == "scheduled"


def test_explain_prints_a_job_written_by_the_store(jobs: Path, capsys: pytest.CaptureFixture[str]):
    clock = FakeClock()
    store = open_store(jobs, clock)
    thread = new_thread()
    job = scheduled_run(store, clock, thread, "skipped")
    assert main(["explain", job, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["jobId"] == job and data["path"][-1] == "skipped" and data["timeline"][-1]["to"] == "settled"
    assert main(["explain", thread]) == 0
    assert "Resume skipped" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["../../etc/passwd", "nope"])
def test_explain_rejects_a_bad_id_with_a_clear_error(jobs: Path, bad: str, capsys: pytest.CaptureFixture[str]):
    assert main(["explain", bad]) == InvalidInput.exit_status != 0
    err = capsys.readouterr().err
    assert "jobId must be a UUID" in err and "next:" in err


def test_explain_of_an_unknown_job_says_so_in_json(jobs: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["explain", new_thread(), "--json"]) == UnknownJob.exit_status != 0
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "unknown_job"


def test_history_lists_jobs_and_rejects_a_bad_date(jobs: Path, capsys: pytest.CaptureFixture[str]):
    clock = FakeClock()
    store = open_store(jobs, clock)
    thread = new_thread()
    job = scheduled_run(store, clock, thread, "completed")
    assert main(["history", "--json", "--thread", thread]) == 0
    assert [r["jobId"] for r in json.loads(capsys.readouterr().out)] == [job]
    assert main(["history", "--since", "yesterday"]) == InvalidInput.exit_status != 0
    assert "--since" in capsys.readouterr().err


def test_python_dash_m_rekall_states_runs(tmp_path: Path):
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "rekall", "states", "--format", "mermaid"], cwd=root,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out == render("mermaid")
