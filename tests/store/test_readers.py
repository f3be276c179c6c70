"""Readers (status, history, explain, compaction_status, cancel) create and chmod nothing, and
record a provably dead worker before they report its job."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rekall.usecases import service
from rekall.surfaces.cli import main
from rekall.surfaces.explain import build_explanation
from rekall.surfaces.history import collect_history
from rekall.store import JobStore
from rekall.testing import FakeClock
from rekall.transports.endpoint import EndpointMissing, resolve_endpoint
from tests.jobkit import job_with_dead_worker, new_thread, open_store

READ_VERBS = [["status", "{thread}"], ["status", "{thread}", "--watch"], ["history"], ["explain", "{thread}"],
              ["cancel", "{job}", "--thread", "{thread}"], ["prune", "--keep", "1", "--dry-run"]]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str], **ids: str) -> tuple[int, dict]:
    code = main([part.format(**ids) for part in argv] + ["--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


@pytest.mark.parametrize("argv", READ_VERBS, ids=lambda a: " ".join(a[:1] + a[2:3]))
def test_a_reader_creates_no_folder_under_a_mistyped_codex_home(tmp_path: Path, monkeypatch, capsys, argv):
    typo = tmp_path / "codex-hmoe"
    monkeypatch.setenv("CODEX_HOME", str(typo))
    _run(argv, capsys, thread=new_thread(), job=new_thread())
    assert not typo.exists()
    assert not (Path(os.environ["HOME"]) / ".rekall").exists()


def test_compaction_status_creates_no_folder_under_a_mistyped_codex_home(tmp_path: Path):
    typo = tmp_path / "codex-hmoe"
    assert service.status_reply(new_thread(), env={"CODEX_HOME": str(typo)})["state"] == "not_scheduled"
    assert not typo.exists()


@pytest.mark.parametrize("argv", READ_VERBS, ids=lambda a: " ".join(a[:1] + a[2:3]))
def test_a_reader_never_tightens_or_adds_to_an_existing_folder(tmp_path: Path, monkeypatch, capsys, argv):
    jobs = tmp_path / "shared-jobs"
    jobs.mkdir()
    os.chmod(jobs, 0o755)
    monkeypatch.setenv("REKALL_JOBS_DIR", str(jobs))
    _run(argv, capsys, thread=new_thread(), job=new_thread())
    assert stat.S_IMODE(jobs.stat().st_mode) == 0o755
    assert os.listdir(jobs) == []


@pytest.mark.parametrize("argv", [["status", "{thread}"], ["history"], ["explain", "{thread}"],
                                  ["cancel", "{job}", "--thread", "{thread}"], ["schedule", "{thread}"],
                                  ["prune", "--keep", "1"]], ids=lambda a: a[0])
def test_a_relative_codex_home_is_refused_by_every_verb(tmp_path: Path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CODEX_HOME", "relative/codex")
    monkeypatch.setenv("REKALL_PIPE", str(tmp_path / "no-socket"))  # schedule must fail on CODEX_HOME first
    code, out = _run(argv, capsys, thread=new_thread(), job=new_thread())
    assert code != 0 and out["error"]["field"] == "CODEX_HOME", out
    assert "absolute" in out["error"]["message"]
    assert not (tmp_path / "relative").exists()


def test_a_leading_tilde_means_home_in_every_path(monkeypatch, tmp_path: Path):
    home = Path(os.environ["HOME"])
    env = {"HOME": str(home), "CODEX_HOME": "~/codex", "REKALL_JOBS_DIR": "~/jobs"}
    store = JobStore.open_reader(env)
    assert (store.root, store.lock_root) == (home / "jobs", home / ".rekall" / "locks")
    (home / "codex").mkdir()
    with pytest.raises(EndpointMissing, match=str(home / "codex" / "ipc" / "ipc.sock")):
        resolve_endpoint({**env, "TMPDIR": str(tmp_path)})


# --- every reader records a dead worker first ----------------------------------------------


@pytest.fixture
def dead(tmp_path: Path) -> tuple[JobStore, str, str]:
    """A job in waiting_for_idle whose worker was killed (kill -9): nobody has run `status` yet."""
    clock = FakeClock()
    store, thread = open_store(tmp_path / "jobs", clock), new_thread()
    return store, thread, job_with_dead_worker(store, clock, thread, "waiting_for_idle")


def test_explain_records_a_dead_worker_before_explaining_its_job(dead):
    store, thread, job = dead
    explanation = build_explanation(open_store(store.root), job)
    assert (explanation["state"], explanation["errorCode"]) == ("failed", "worker_lost")
    assert explanation["outcome"].startswith("Failed: the worker process was lost")
    assert not store.lock_path(thread).exists()


def test_history_records_a_dead_worker_before_listing_its_job(dead):
    store, thread, job = dead
    rows = collect_history(open_store(store.root))
    assert [(r["jobId"], r["state"], r["errorCode"]) for r in rows] == [(job, "failed", "worker_lost")]


@pytest.mark.parametrize("state, words, unknown", [
    ("waiting_for_resume_idle", "the thread was compacted, and the continuation did not run", False),
    ("resuming", "the thread was compacted, and a continuation may have started", True),
    ("accepted", "the compaction may still complete", True),
])
def test_a_worker_lost_after_the_compaction_says_the_thread_was_compacted(tmp_path: Path, state, words, unknown):
    clock = FakeClock()
    store, thread = open_store(tmp_path / "jobs", clock), new_thread()
    job_with_dead_worker(store, clock, thread, state)
    status = service.status_reply(thread, env={"REKALL_JOBS_DIR": str(store.root)})
    assert (status["state"], status["errorCode"], status["outcomeMayBeUnknown"]) == ("failed", "worker_lost", unknown)
    assert words in status["error"] and state in status["error"]
    if state != "accepted":
        assert status["compactionId"] == "cmp-2"  # the compaction's evidence stays with the job
