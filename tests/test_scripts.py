"""scripts/test: in CI a real Codex that cannot be installed fails the run; elsewhere the codex tests skip.

The script runs from a private copy of the repository layout with a stand-in installer that
fails and a stand-in ``.venv/bin/python`` that records how it was called, so that the cached
real Codex and the shared virtual environment are never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.codexkit import real_codex
from tests.support.pinned import running_in_ci

ROOT = Path(__file__).resolve().parents[1]


def _fake_checkout(root: Path) -> Path:
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "test", root / "scripts" / "test")
    installer = root / "scripts" / "install-codex"
    installer.write_text("#!/bin/sh\necho 'install-codex: npm not found; install Node.js and npm' >&2\nexit 3\n")
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho \"$*\" >> {root / 'calls'}\n")
    for path in (installer, python):
        path.chmod(0o755)
    return root


def _run(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "REKALL_TEST_CODEX")}
    return subprocess.run([str(root / "scripts" / "test"), "-q"], env={**clean, **env}, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_in_ci_a_codex_that_cannot_be_installed_fails_the_run(tmp_path: Path, ci: str):
    root = _fake_checkout(tmp_path / "repo")
    done = _run(root, CI=ci)
    assert done.returncode != 0
    assert "npm not found" in done.stderr and "requires it" in done.stderr
    assert "-m pytest" not in (root / "calls").read_text()  # the tests never ran, so none could skip


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_outside_ci_the_codex_tests_are_skipped_with_the_reason(tmp_path: Path, ci: str | None):
    root = _fake_checkout(tmp_path / "repo")
    done = _run(root, **({} if ci is None else {"CI": ci}))
    assert done.returncode == 0, done.stderr
    assert "tests marked 'codex' will be skipped" in done.stderr
    assert "-m pytest -q" in (root / "calls").read_text()


@pytest.mark.parametrize(("ci", "expected"), [("true", True), ("1", True), ("false", False), ("False", False),
                                              ("", False), (None, False)])
def test_ci_is_any_value_but_empty_or_false(ci: str | None, expected: bool):
    assert running_in_ci({} if ci is None else {"CI": ci}) is expected


def test_the_codex_fixture_fails_in_ci_and_skips_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("REKALL_TEST_CODEX", str(tmp_path / "nowhere" / "codex"))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI requires the real Codex"):
        real_codex()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="real Codex not found"):
        real_codex()


def test_the_type_check_runs_before_the_tests_and_a_type_error_stops_the_run(tmp_path: Path):
    root = _fake_checkout(tmp_path / "repo")
    done = _run(root)
    assert done.returncode == 0, done.stderr
    calls = (root / "calls").read_text().splitlines()
    assert calls.index("-m mypy") < calls.index("-m pytest -q")
    failing = _fake_checkout(tmp_path / "failing")
    python = failing / ".venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho \"$*\" >> {failing / 'calls'}\n"
                      "[ \"$2\" = mypy ] && { echo 'registry.py: error: Incompatible types' >&2; exit 1; }\nexit 0\n")
    done = _run(failing)
    assert done.returncode == 1 and "Incompatible types" in done.stderr
    assert "-m pytest" not in (failing / "calls").read_text()
