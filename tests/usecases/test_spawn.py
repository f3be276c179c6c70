"""Starting the detached worker: its log is opened like every jobs-directory file, and a spawn
that fails fails the job with its cause and frees the thread."""

from __future__ import annotations

import errno
import logging
import os
import stat
import sys
from pathlib import Path

import psutil
import pytest

from rekall.usecases import service
from rekall.kernel.errors import RekallError
from rekall.adapters.resume import ResumeToken
from rekall.sim import SimulatedOwner
from rekall.usecases.spawn import spawn_worker
from rekall.store import JobStore
from rekall.store.processes import WorkerProcess, worker_processes
from rekall.worker.start import configure_logging
from tests.jobkit import new_thread
from tests.mcpkit import HANDOFF, job_env, wait_for_note, wait_for_worker_exit


def test_the_worker_log_is_never_opened_through_a_symlink(tmp_path: Path):
    target = tmp_path / "elsewhere" / "authorized_keys"
    target.parent.mkdir()
    log = tmp_path / "jobs" / "t.j.log"
    log.parent.mkdir()
    log.symlink_to(target)
    with pytest.raises(OSError) as caught:
        spawn_worker(new_thread(), new_thread(), log_path=log, env=dict(os.environ))
    assert caught.value.errno == errno.ELOOP and not target.exists()
    with pytest.raises(OSError):
        configure_logging(log)  # the worker's own logging, the same rule
    assert not target.exists()


def test_the_worker_log_is_private(tmp_path: Path):
    log = tmp_path / "w.log"
    root = logging.getLogger("rekall")
    handlers, level, old = list(root.handlers), root.level, os.umask(0)
    try:
        configure_logging(log)
    finally:
        os.umask(old)
        for handler in set(root.handlers) - set(handlers):
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


@pytest.mark.anyio
async def test_a_worker_that_cannot_be_started_fails_its_job_and_frees_the_thread(tmp_path: Path, mocker):
    async with SimulatedOwner() as sim:
        env = {**sim.env, "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
        mocker.patch("rekall.usecases.spawn.subprocess.Popen", side_effect=OSError(errno.EAGAIN, "Resource temporarily "
                                                                                         "unavailable"))
        with pytest.raises(RekallError, match="Resource temporarily unavailable") as caught:
            await service.schedule(sim.thread_id, HANDOFF, env=env)
        assert caught.value.code == "spawn_failed"
        mocker.stopall()

        status = service.status_reply(sim.thread_id, env=env)
        assert (status["state"], status["errorCode"], status["outcomeMayBeUnknown"]) == ("failed", "spawn_failed",
                                                                                        False)
        assert "could not be started" in status["error"]
        store = JobStore.open_reader(env)
        assert not store.lock_path(sim.thread_id).exists()
        assert store.journal_path(sim.thread_id, status["jobId"]).exists()  # the journal is kept
        cancelled = service.cancel(sim.thread_id, status["jobId"], env=env)
        assert cancelled["cancellationRequested"] is False

        again = await service.schedule(sim.thread_id, HANDOFF, env=env, spawn=lambda *a, **k: os.getpid())
        assert again["alreadyScheduled"] is False and again["jobNumber"] == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker scan is checked on Linux")
@pytest.mark.anyio
async def test_a_spawned_worker_carries_what_schedule_journaled_and_the_worker_scan_still_recognises_it(jobs_dir: Path):
    # A generation without owner discovery: the worker reuses the one schedule settled, and says
    # in its log which client answered its follow.
    async with SimulatedOwner(runtime="active", generation="26.721") as sim:
        env = job_env(sim.env, jobs_dir)
        scheduled = await service.schedule(sim.thread_id, HANDOFF, env=env)  # the real spawn
        pid, job = scheduled["pid"], scheduled["jobId"]
        try:
            await wait_for_note(jobs_dir, job, "connected")  # running: it waits for the thread to go idle
            argv = psutil.Process(pid).cmdline()
            found = [w for w in worker_processes() if w.pid == pid]
        finally:
            sim.backend.complete_turn("completed")
            await wait_for_worker_exit(pid, timeout=30)
    assert argv[-4:-1] == ["worker", sim.thread_id, job]
    status = JobStore.open_reader(env).read_status(sim.thread_id)
    assert ResumeToken.from_argument(argv[-1]) == ResumeToken(status.platform, status.generationAtSchedule)
    assert found == [WorkerProcess(pid, sim.thread_id, job, jobs_dir)]
    assert status.state == "resumed"
    connected = next(n for n in JobStore.open_reader(env).load(sim.thread_id, job).notes if n.kind == "connected")
    assert connected.detail["generationSettled"] == "reused from schedule"
    # What the worker logged before it opened the store, its follow included, is in the job's log, in order.
    logged = Path(status.logPath).read_text(encoding="utf-8").splitlines()
    said = (f"worker {job} starting", "answered following", "worker_started: scheduled", "worker finished")
    order = [next((i for i, line in enumerate(logged) if text in line), None) for text in said]
    assert None not in order and order == sorted(order), logged
