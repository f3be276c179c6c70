"""The Node version's jobs directory is read, never written, and its jobs are shown, marked."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rekall.usecases import service
from rekall.surfaces.history import collect_history
from rekall.store import JobStore, LockBusy
from tests.jobkit import handoff, new_thread, snapshot


def _node_dir(codex_home: Path) -> Path:
    """``$CODEX_HOME/tools/context-compact/jobs`` as the Node version leaves it: default modes."""
    node = codex_home / "tools" / "context-compact" / "jobs"
    node.mkdir(parents=True)
    os.chmod(node, 0o755)
    return node


def _node_job(node: Path, thread: str, status: str, *, pid: int | None = None, lock: bool = False) -> str:
    job = new_thread()
    earlier = {"jobId": new_thread(), "jobNumber": 1, "status": "completed", "createdAt": "2026-11-01T10:00:00.000Z",
               "completedAt": "2026-11-01T10:01:00.000Z", "tokensReclaimed": 80000}
    record = {"jobId": job, "threadId": thread, "status": status, "createdAt": "2026-11-02T10:00:00.000Z",
              "jobNumber": 2, "resume": False, "history": [earlier], **({"pid": pid} if pid else {})}
    (node / f"{thread}.json").write_text(json.dumps(record, indent=2))
    if lock:
        (node / f"{thread}.lock").write_text(json.dumps({"jobId": job, "threadId": thread}))
    return job


def test_rekall_leaves_the_node_versions_directory_exactly_as_it_was(isolated_env: Path):
    node, thread = _node_dir(isolated_env), new_thread()
    _node_job(node, thread, "completed")
    before = snapshot(node)
    service.status_reply(thread)
    collect_history(JobStore.open_reader())
    JobStore.open().create_job(thread, handoff=handoff(), user_fingerprint="fp")
    assert snapshot(node) == before and sorted(os.listdir(node)) == [f"{thread}.json"]
    assert stat.S_IMODE(node.stat().st_mode) == 0o755
    assert JobStore.open().root == isolated_env / "tools" / "rekall" / "jobs"


@pytest.mark.parametrize("by_variable", [False, True], ids=["default", "CONTEXT_COMPACT_JOBS_DIR"])
def test_node_jobs_are_shown_in_status_and_history_marked_as_the_node_versions(isolated_env: Path, tmp_path: Path,
                                                                             monkeypatch, by_variable: bool):
    if by_variable:
        node = tmp_path / "node-jobs"
        node.mkdir()
        monkeypatch.setenv("CONTEXT_COMPACT_JOBS_DIR", str(node))
    else:
        node = _node_dir(isolated_env)
    thread = new_thread()
    job = _node_job(node, thread, "failed")
    status = service.status_reply(thread)
    assert (status["jobId"], status["state"], status["writtenBy"], status["jobsDir"]) == (job, "failed", "node",
                                                                                          str(node))
    rows = collect_history(JobStore.open_reader())
    assert [(r["jobNumber"], r["state"], r["writtenBy"]) for r in rows] == [(2, "failed", "node"),
                                                                           (1, "completed", "node")]
    assert "Node version" in rows[0]["outcome"]


def test_a_thread_whose_node_job_may_still_run_is_not_scheduled_twice(isolated_env: Path):
    node, thread = _node_dir(isolated_env), new_thread()
    _node_job(node, thread, "waiting_for_idle", pid=os.getpid(), lock=True)  # a live Node worker
    with pytest.raises(LockBusy, match="Node version"):
        JobStore.open().create_job(thread, handoff=handoff(), user_fingerprint="fp")


def test_a_leftover_node_lock_of_an_ended_job_does_not_hold_the_thread(isolated_env: Path):
    node, thread = _node_dir(isolated_env), new_thread()
    _node_job(node, thread, "completed", pid=os.getpid(), lock=True)
    created = JobStore.open().create_job(thread, handoff=handoff(), user_fingerprint="fp")
    assert not created.already_scheduled
    assert (node / f"{thread}.lock").exists()  # not ours to remove
