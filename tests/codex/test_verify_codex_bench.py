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
