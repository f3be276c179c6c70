from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rekall.store import Liveness, LockOwner, process_start_time
from rekall.store.owner import liveness, this_host


def _owner(**changes) -> LockOwner:
    base = dict(job_id="j", thread_id="t", pid=os.getpid(), process_start_time=process_start_time(os.getpid()),
                host=this_host())
    return LockOwner(**{**base, **changes})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux start token")
def test_the_start_token_of_a_process_is_stable_and_names_the_boot():
    token = process_start_time(os.getpid())
    assert token == process_start_time(os.getpid()) and token.startswith("linux:")
    assert int(token.rsplit(":", 1)[1]) > 0  # clock ticks since boot (two processes may share a tick)


def test_this_process_is_alive():
    assert liveness(_owner()) is Liveness.ALIVE


def test_an_exited_process_is_dead():
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait(timeout=30)
    assert liveness(_owner(pid=child.pid, process_start_time=None)) is Liveness.DEAD


@pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs waitid")
def test_a_zombie_is_dead():
    child = subprocess.Popen([sys.executable, "-c", ""])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        assert liveness(_owner(pid=child.pid, process_start_time=None)) is Liveness.DEAD
    finally:
        child.wait(timeout=30)


def test_a_live_pid_with_another_start_time_is_a_reused_pid():
    assert liveness(_owner(process_start_time="linux:other-boot:1")) is Liveness.DEAD


@pytest.mark.parametrize("changes", [{"host": "another.example"}, {"pid": None}, {"host": None}])
def test_without_a_provable_identity_liveness_is_unknown(changes):
    assert liveness(_owner(**changes)) is Liveness.UNKNOWN
