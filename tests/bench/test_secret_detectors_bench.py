"""The credential benchmark runs on both corpora and reports rekall beside detect-secrets (a test dependency)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_credential_benchmark_reports_caught_and_false_positives_on_both_corpora_beside_detect_secrets():
    pytest.importorskip("detect_secrets", reason="pip install -e '.[test]'")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "secret_detectors.py"), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    corpora = json.loads(done.stdout)["corpora"]
    assert set(corpora) == {"first", "documented"}
    for found in corpora.values():
        rows = found["detectors"]
        assert set(rows) == {"rekall", "detect-secrets (all plugins)", "detect-secrets (no entropy plugins)"}
        # The suite holds rekall to every credential and no false positive; the bench reports the same.
        assert rows["rekall"] == {"caught": found["credentials"], "falsePositives": 0, "addsToRekall": 0}
