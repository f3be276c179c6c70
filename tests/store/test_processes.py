from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from rekall.store import Liveness, LockHolder, process_start_time
from rekall.store import processes
from rekall.store.processes import liveness, this_host


def _holder(**changes) -> LockHolder:
    base = dict(job_id="j", thread_id="t", pid=os.getpid(), process_start_time=process_start_time(os.getpid()),
                host=this_host())
    return LockHolder(**{**base, **changes})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux start token")
def test_the_start_token_of_a_process_is_stable_and_names_the_boot():
    token = process_start_time(os.getpid())
    assert token == process_start_time(os.getpid()) and token.startswith("linux:")
    assert int(token.rsplit(":", 1)[1]) > 0  # clock ticks since boot (two processes may share a tick)


def test_this_process_is_alive():
    assert liveness(_holder()) is Liveness.ALIVE


def test_an_exited_process_is_dead():
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait(timeout=30)
    assert liveness(_holder(pid=child.pid, process_start_time=None)) is Liveness.DEAD


@pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs waitid")
def test_a_zombie_is_dead():
    child = subprocess.Popen([sys.executable, "-c", ""])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        assert liveness(_holder(pid=child.pid, process_start_time=None)) is Liveness.DEAD
    finally:
        child.wait(timeout=30)


def test_a_live_pid_with_another_start_time_is_a_reused_pid():
    assert liveness(_holder(process_start_time="linux:other-boot:1")) is Liveness.DEAD


@pytest.mark.parametrize("changes", [{"host": "another.example", "process_start_time": "linux:another-boot:5"},
                                     {"pid": None}, {"host": None, "process_start_time": None}])
def test_without_a_provable_identity_liveness_is_unknown(changes):
    assert liveness(_holder(**changes)) is Liveness.UNKNOWN


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait(timeout=30)
    return child.pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the boot id exists on Linux")
def test_a_dead_workers_lock_of_this_boot_is_dead_after_the_host_was_renamed():
    token = process_start_time(os.getpid())
    assert liveness(_holder(pid=_dead_pid(), process_start_time=token, host="old-name.example")) is Liveness.DEAD


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a ps that prints local time")
def test_the_start_token_does_not_depend_on_the_readers_time_zone(monkeypatch, mocker):
    # The macOS/BSD path, taken here: before psutil it parsed `ps -o lstart`, which prints local time.
    mocker.patch.object(processes, "_LINUX", False, create=True)
    monkeypatch.setattr(sys, "platform", "darwin")
    tokens = set()
    for zone in ("UTC", "Asia/Tokyo", "America/Los_Angeles"):
        monkeypatch.setenv("TZ", zone)
        tokens.add(process_start_time(os.getpid()))
    assert len(tokens) == 1 and None not in tokens


@pytest.mark.parametrize("linux", [True, False], ids=["linux", "other"])
def test_a_live_worker_stays_alive_when_the_clock_is_set(mocker, linux):
    if linux and not sys.platform.startswith("linux"):
        pytest.skip("the boot id exists on Linux")
    mocker.patch.object(processes, "_LINUX", linux)
    recorded = process_start_time(os.getpid())
    created, booted = psutil.Process(os.getpid()).create_time(), psutil.boot_time()
    # Setting the clock an hour ahead moves psutil's wall-clock start and boot times together.
    mocker.patch.object(psutil.Process, "create_time", return_value=created + 3600)
    mocker.patch.object(psutil, "boot_time", return_value=booted + 3600)
    assert liveness(_holder(process_start_time=recorded)) is Liveness.ALIVE


def test_a_pid_reused_by_a_process_started_at_another_time_is_dead_on_every_platform(mocker):
    mocker.patch.object(processes, "_LINUX", False)
    current = process_start_time(os.getpid())
    kind, created, booted = current.split(":")
    older = f"psutil:{float(created) - 600:.3f}:{booted}"  # same boot, started ten minutes earlier
    assert liveness(_holder(process_start_time=older)) is Liveness.DEAD


def test_a_start_token_of_an_earlier_version_that_cannot_be_compared_is_unknown_not_dead():
    assert liveness(_holder(process_start_time="ps:Mon Nov 30 17:00:00 2026")) is Liveness.UNKNOWN


# --- the worker scan ----------------------------------------------------------------------

_THREAD, _JOB = "0199a5c2-2222-7000-8000-0000000000a1", "0199a5c2-3333-7000-8000-0000000000a2"


def _lookalike(jobs_dir) -> subprocess.Popen:
    """A process that looks like `python -m rekall worker THREAD JOB` and waits for its stdin to close."""
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-m", "rekall", "worker",
                             _THREAD, _JOB], stdin=subprocess.PIPE,
                            env={**os.environ, "REKALL_JOBS_DIR": str(jobs_dir)})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker scan is checked on Linux")
def test_the_worker_scan_names_each_workers_ids_and_the_jobs_directory_its_environment_resolves(tmp_path):
    child = _lookalike(tmp_path / "jobs")
    try:
        found = [w for w in processes.worker_processes() if w.pid == child.pid]
    finally:
        child.communicate(b"", timeout=30)
    assert found == [processes.WorkerProcess(child.pid, _THREAD, _JOB, tmp_path / "jobs")]


@pytest.mark.skipif(not (sys.platform.startswith("linux") and hasattr(os, "waitid")), reason="Linux, waitid")
def test_the_worker_scan_and_the_lock_judge_share_one_rule_a_zombie_worker_has_stopped(tmp_path):
    child = _lookalike(tmp_path / "jobs")
    try:
        child.stdin.close()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: a zombie
        listed = [w for w in processes.worker_processes() if w.pid == child.pid]
        assert processes.pid_exists(child.pid) is False
        assert listed == []
    finally:
        child.wait(timeout=30)


def test_the_worker_scan_reads_the_ids_of_a_worker_told_what_schedule_journaled():
    told = '{"platform":"extension-ipc","generationAtSchedule":null}'
    argv = [sys.executable, "-m", "rekall", "worker", _THREAD, _JOB, told]
    assert processes._worker_ids(argv) == (_THREAD, _JOB)
    assert processes._worker_ids(["/venv/bin/rekall", "worker", _THREAD, _JOB, told]) == (_THREAD, _JOB)
    assert processes._worker_ids([sys.executable, "-m", "rekall", "worker", _THREAD, told]) is None
