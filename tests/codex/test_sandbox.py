"""Every CLI verb under the real ``codex sandbox``, in the modes agents' shell commands run in.

Inside Codex's Linux sandbox ``send()`` and ``connect()`` on sockets are refused
(:mod:`rekall.kernel.sandbox`). Each verb must either work there (the readers: their output) or
fail at once naming the sandbox and the ways out (anything that must reach Codex's sockets). A
simulated owner listens on a real socket outside the sandbox, so that reaching it is possible
but for the sandbox. The bound is the subprocess finishing before its timeout: before the fix,
``doctor`` and ``schedule`` never returned.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rekall.sim.threaded import SimHandle, start_sim_in_thread
from tests.codex.test_registration import REKALL_COMMAND
from tests.jobkit import open_store, schedule
from tests.support.appserver import app_server_env

pytestmark = pytest.mark.codex

MODES = ("read-only", "workspace-write")
#: Well above the issue's 5 s on a busy 2-core machine: only a hang or a wait on a refused wake-up misses it.
BOUND_S = 20.0


@pytest.fixture
def sim() -> SimHandle:
    with start_sim_in_thread() as handle:
        yield handle


def in_sandbox(codex_binary: Path, mode: str, env: dict[str, str], *verb: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(codex_binary), "sandbox", "-c", f'sandbox_mode="{mode}"', "--", str(REKALL_COMMAND),
                           *verb, "--json"], capture_output=True, text=True, timeout=BOUND_S, env=env,
                          cwd=env["CODEX_HOME"])


@pytest.fixture
def sandbox_env(sim: SimHandle, private_dir: Path) -> dict[str, str]:
    home = private_dir / "codex-home"
    home.mkdir(mode=0o700)
    return {**app_server_env(home), **sim.env, "REKALL_JOBS_DIR": str(private_dir / "jobs"),
            "CODEX_THREAD_ID": sim.thread_id}


def sandbox_refusal(done: subprocess.CompletedProcess[str], verb: str) -> dict[str, str]:
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "sandboxed" and f"`rekall {verb}`" in error["message"], error
    assert "Codex's sandbox" in error["message"] and "MCP tool" in error["hint"], error
    assert f"`!rekall {verb}`" in error["hint"], error
    return error


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("verb", ["probe", "schedule"])
def test_a_verb_that_must_reach_codex_fails_at_once_in_the_sandbox_naming_it_and_the_ways_out(
        codex_binary: Path, sandbox_env: dict[str, str], mode: str, verb: str) -> None:
    error = sandbox_refusal(in_sandbox(codex_binary, mode, sandbox_env, verb), verb)
    assert "refused the connection to " + sandbox_env["REKALL_PIPE"] in error["message"]
    assert "permission" not in error["message"].lower()  # not blamed on folders or another user
    assert not Path(sandbox_env["REKALL_JOBS_DIR"]).exists()  # nothing was created


@pytest.mark.parametrize("mode", MODES)
def test_doctor_returns_in_the_sandbox_with_its_report_whose_first_row_names_the_sandbox(
        codex_binary: Path, sandbox_env: dict[str, str], mode: str) -> None:
    done = in_sandbox(codex_binary, mode, sandbox_env, "doctor")
    report = json.loads(done.stdout)
    first = report["rows"][0]
    assert done.returncode == 1 and report["verdict"] == "RED"
    assert (first["name"], first["level"]) == ("sandbox", "RED") and "`!rekall doctor`" in first["hint"], first
    router = next(row for row in report["rows"] if row["name"] == "router")
    assert "Codex's sandbox refused the connection" in router["detail"], router


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("verb", ["status", "explain", "history", "cancel"])
def test_a_verb_on_the_jobs_directory_answers_in_the_sandbox_or_names_it(
        codex_binary: Path, sandbox_env: dict[str, str], mode: str, verb: str) -> None:
    # The job's worker is gone (jobkit's), so each reader first records it as worker_lost: a write,
    # which the read-only sandbox refuses and workspace-write allows here (the jobs are under /tmp).
    job = schedule(open_store(Path(sandbox_env["REKALL_JOBS_DIR"])), sandbox_env["CODEX_THREAD_ID"])
    done = in_sandbox(codex_binary, mode, sandbox_env, verb, *([job.job_id] if verb in ("explain", "cancel") else []))
    if done.returncode == 0:
        assert job.job_id in done.stdout, done.stdout
    else:
        sandbox_refusal(done, verb)
    assert mode != "workspace-write" or done.returncode == 0, done.stdout


@pytest.mark.parametrize("mode", MODES)
def test_status_without_a_job_answers_in_the_sandbox(codex_binary: Path, sandbox_env: dict[str, str],
                                                     mode: str) -> None:
    done = in_sandbox(codex_binary, mode, sandbox_env, "status")
    assert done.returncode == 0 and json.loads(done.stdout)["state"] == "not_scheduled", done.stdout
