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


def _matrix_checkout(root: Path, installs: str = "echo \"/cache/codex-${REKALL_CODEX_VERSION:-pinned}/codex\"") -> Path:
    """A checkout whose installer succeeds (or runs ``installs``) and whose python names two CI releases."""
    _fake_checkout(root)
    (root / "scripts" / "install-codex").write_text(f"#!/bin/sh\n{installs}\n")
    (root / ".venv" / "bin" / "python").write_text(
        f"#!/bin/sh\necho \"$* [$REKALL_CODEX_VERSION $REKALL_TEST_CODEX]\" >> {root / 'calls'}\n"
        "[ \"$2\" = tests.support.pinned ] && printf '0.156.0\\n0.163.0\\n'\nexit 0\n")
    return root


def _run_whole(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "REKALL_TEST_CODEX", "REKALL_CODEX_MATRIX",
                                                              "REKALL_CODEX_VERSION")}
    return subprocess.run([str(root / "scripts" / "test"), *args], env={**clean, **env}, capture_output=True,
                          text=True, timeout=60)


def test_the_whole_suite_then_runs_the_daemon_tests_on_each_other_ci_release_installed_into_the_cache(
        tmp_path: Path):
    root = _matrix_checkout(tmp_path / "repo")
    done = _run_whole(root, CI="true")
    assert done.returncode == 0, done.stderr
    calls = (root / "calls").read_text().splitlines()
    pytest_calls = [c for c in calls if c.startswith("-m pytest")]
    assert pytest_calls[0] == "-m pytest [ /cache/codex-pinned/codex]"  # the whole suite on the pinned release
    for call, version in zip(pytest_calls[1:], ("0.156.0", "0.163.0"), strict=True):
        assert call.startswith("-m pytest -q -m codex tests/codex/test_app_server_job.py tests/codex/test_terminal_ui.py")
        assert call.endswith(f"[{version} /cache/codex-{version}/codex]")
    # Arguments (a part of the suite) leave the matrix out, unless asked for.
    assert "tests.support.pinned" not in _run_and_calls(tmp_path / "part", "-q")
    assert "tests.support.pinned" in _run_and_calls(tmp_path / "asked", "-q", REKALL_CODEX_MATRIX="1")


def _run_and_calls(root: Path, *args: str, **env: str) -> str:
    done = _run_whole(_matrix_checkout(root), *args, **env)
    assert done.returncode == 0, done.stderr
    return (root / "calls").read_text()


def test_in_ci_a_ci_release_that_cannot_be_installed_fails_the_run_after_the_others_ran(tmp_path: Path):
    installs = ('[ "$REKALL_CODEX_VERSION" = 0.156.0 ] && { echo "install-codex: no such version" >&2; exit 3; }\n'
                'echo "/cache/codex-${REKALL_CODEX_VERSION:-pinned}/codex"')
    root = _matrix_checkout(tmp_path / "repo", installs)
    done = _run_whole(root, CI="true")
    assert done.returncode == 1 and "Codex 0.156.0 could not be installed" in done.stderr
    assert "[0.163.0 /cache/codex-0.163.0/codex]" in (root / "calls").read_text()
    elsewhere = _run_whole(_matrix_checkout(tmp_path / "local", installs))
    assert elsewhere.returncode == 0 and "its end-to-end tests are skipped" in elsewhere.stderr
