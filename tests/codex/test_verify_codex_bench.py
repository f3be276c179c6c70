"""``bench/verify_codex.py`` keeps working: one run on the real engine, through the relay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.codex
def test_one_verification_run_reports_a_real_reduction_and_a_continuation(codex_binary: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "verify_codex.py"), "--runs", "1", "--json", "--binary", str(codex_binary)],
        capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    (run,) = report["runs"]
    assert run["contextTokensAfter"] < run["contextTokensBefore"]
    assert run["tokensReclaimed"] == run["contextTokensBefore"] - run["contextTokensAfter"]
    assert 0 < run["reduction"] < 1 and run["modelContextWindow"] > 0
    assert run["compactionDurationMs"] > 0 and run["continuationDelayMs"] > 0
    assert run["continuationReachedModel"] is True and report["allContinuationsReachedModel"] is True
    assert report["engine"]["codexVersion"] and "mock" in report["model"]


@pytest.mark.codex
def test_one_job_on_the_shared_app_server_daemon_is_reported_beside_the_extension(codex_binary: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "verify_codex.py"), "--runs", "1", "--path", "app-server", "--json",
         "--idle-stable-ms", "50", "--binary", str(codex_binary)], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    (run,) = report["appServerRuns"]
    assert run["state"] == "resumed" and run["continuationRequests"] == 1 and report["allAppServerJobsResumed"]
    assert run["contextTokensAfter"] < run["contextTokensBefore"]
    for figure in ("dispatchOverheadMs", "resumeOverheadMs", "attachMs", "scheduleToResumedMs"):
        assert isinstance(run[figure], (int, float)), figure  # recorded; how long is bench's business
    assert set(report["appServerMedian"]) >= {"dispatchOverheadMs", "resumeOverheadMs", "contextTokensBefore"}
