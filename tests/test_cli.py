"""The command line: exit codes, --json, the thread default, and a job watched live."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rekall.cli import main
from rekall.sim import start_sim_in_thread

THREAD = "0199a5c2-2222-4000-8000-000000000002"


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rekall", *args], capture_output=True, text=True,
                          env=env if env is not None else dict(os.environ), timeout=timeout)


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "jobs"
    monkeypatch.setenv("REKALL_JOBS_DIR", str(path))
    return path


def test_a_missing_thread_is_a_usage_error_and_is_never_guessed(jobs, capsys):
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert "no thread id" in err and "CODEX_THREAD_ID" in err


def test_the_thread_defaults_to_codex_thread_id(jobs, monkeypatch, capsys):
    monkeypatch.setenv("CODEX_THREAD_ID", THREAD)
    assert main(["status", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["threadId"] == THREAD and out["state"] == "not_scheduled"


def test_a_path_like_thread_id_is_rejected_with_exit_2(jobs, capsys):
    assert main(["status", "../../etc/passwd"]) == 2
    assert "threadId must be a UUID" in capsys.readouterr().err
    assert not jobs.exists() or not any(jobs.iterdir())


def test_errors_are_json_for_scripts(jobs, capsys):
    assert main(["cancel", "0199a5c2-2222-4000-8000-0000000000ff", "--thread", THREAD, "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "job_identity_mismatch" and "hint" in error


def test_an_unknown_verb_or_option_exits_2():
    assert main(["frobnicate"]) == 2
    assert main(["status", "--bogus"]) == 2


def test_a_handoff_file_that_is_not_json_is_refused_before_anything_happens(jobs, tmp_path, capsys):
    bad = tmp_path / "handoff.json"
    bad.write_bytes(b"\xff\xfe not utf-8")
    assert main(["schedule", THREAD, "--handoff", str(bad)]) == 2
    assert "UTF-8" in capsys.readouterr().err
    assert not jobs.exists() or not list(jobs.glob("*.journal.jsonl"))


def test_schedule_then_watch_status_until_the_job_ends(tmp_path):
    handoff = tmp_path / "handoff.json"
    handoff.write_text(json.dumps({"summary": "s", "preserve": [], "discard": [], "nextStep": "stop after tests",
                                   "resume": True}), encoding="utf-8")
    with start_sim_in_thread() as sim:
        env = {**os.environ, **sim.env, "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "REKALL_IDLE_STABLE_MS": "50",
               "CODEX_THREAD_ID": sim.thread_id}
        scheduled = run("schedule", "--handoff", str(handoff), "--json", env=env)
        assert scheduled.returncode == 0, scheduled.stderr
        assert json.loads(scheduled.stdout)["state"] == "scheduled"
        watched = run("status", "--watch", "--json", env=env)
        assert watched.returncode == 0, watched.stderr
        final = json.loads(watched.stdout)
        assert final["state"] == "resumed"
        people = run("status", env=env)
        assert "resumed" in people.stdout and "tokens after" in people.stdout
        live = run("status", "--watch", env=env)  # a finished job: the whole path, then the table
        assert "scheduled → waiting_for_idle → requesting → accepted" in live.stdout
        assert "resuming → resumed" in live.stdout
        explained = json.loads(run("explain", sim.thread_id, "--json", env=env).stdout)
        assert explained["jobId"] == final["jobId"]
        assert explained["path"][-1] == "resumed" and explained["outcome"].startswith("Resumed")


def test_the_demo_ends_resumed_and_leaves_no_process_behind():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CODEX_", "CONTEXT_COMPACT_"))}
    done = run("demo", "--json", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)
    assert final["state"] == "resumed" and final["tokensReclaimed"] == 80000
    with pytest.raises(ProcessLookupError):
        os.kill(final["pid"], 0)
    assert not Path(final["handoffPath"]).exists()  # the demo's private directory is gone
