"""Processes (not threads) racing to schedule the same thread produce exactly one job."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.jobkit import new_thread

CHILD = r"""
import json, sys
from rekall.store import JobStore
jobs, thread = sys.argv[1], sys.argv[2]
store = JobStore.open({"REKALL_JOBS_DIR": jobs})
print("ready", flush=True)
sys.stdin.readline()  # everyone starts together
created = store.create_job(thread, handoff=None, user_fingerprint="fp")
print(json.dumps({"job": created.job_id, "already": created.already_scheduled}), flush=True)
sys.stdin.readline()  # stay alive (the lock's holder) until everyone has tried
"""

RACERS = 4


@pytest.mark.slow
def test_racing_processes_schedule_exactly_one_job(tmp_path: Path):
    jobs, thread = tmp_path / "jobs", new_thread()
    root = Path(__file__).resolve().parents[2]
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(jobs), thread], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=root) for _ in range(RACERS)]
    watchdog = threading.Timer(60, lambda: [c.kill() for c in children])  # bounds every read below
    watchdog.start()
    try:
        assert [c.stdout.readline().strip() for c in children] == ["ready"] * RACERS
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [json.loads(c.stdout.readline()) for c in children]
        for child in children:
            child.stdin.write("done\n")
            child.stdin.flush()
        assert [c.wait(timeout=30) for c in children] == [0] * RACERS
    finally:
        watchdog.cancel()
        for child in children:
            child.kill()
    assert len({r["job"] for r in results}) == 1
    assert sorted(r["already"] for r in results) == [False] + [True] * (RACERS - 1)
    assert len(list(jobs.glob(f"{thread}.*.journal.jsonl"))) == 1
