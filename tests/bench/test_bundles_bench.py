"""The bundle-reading benchmark runs and finds the table it planted (its figures are not checked here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_bundle_benchmark_finds_the_planted_table_and_reports_its_figures():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bundles.py"), "--json", "--mb", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["bundle_mb"] == 1 and {"scan_s", "peak_mb", "cached_s"} <= result.keys()
