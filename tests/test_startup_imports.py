"""The paths that must start fast never import the heavy modules.

Each command runs in a fresh interpreter (a subprocess), which then reports what it had
imported, so that a later top-level import anywhere on the path makes this fail instead of
silently slowing ``rekall status`` down. The speed itself is measured by
``bench/lifecycle.py``, never here.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rekall.usecases import service
from rekall.sim import start_sim_in_thread
from rekall.store import JobStore
from rekall.testing import FakeClock
from tests.jobkit import new_thread, scheduled_run

#: Top-level packages (or modules) that the fast paths must not load.
HEAVY = ("mcp", "mcp_types", "transitions", "rich", "cattrs", "psutil", "websockets", "asyncio", "ssl",
         "rekall.kernel.credentials", "rekall.adapters.extension.bundles", "msgspec", "rekall.transports.fastdecode")

#: The quick answers (rekall.surfaces.cli_entry) load less still: not even the CLI's argparse and logging,
#: nor attrs, typing or the store's records.
QUICK_HEAVY = (*HEAVY, "attr", "attrs", "argparse", "logging", "typing", "rekall.surfaces.cli", "rekall.states",
               "rekall.store.jobstore", "rekall.store.journal")

#: Runs the CLI (or where ``rekall`` starts: ``rekall.surfaces.cli_entry``) in-process, then prints the modules
#: loaded (stdout of the command goes to stderr).
PROBE = """
import contextlib, json, sys
from {module} import main
with contextlib.redirect_stdout(sys.stderr):
    code = main(sys.argv[1:])
print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}))
"""


def loaded_by(argv: list[str], env: dict[str, str], module: str = "rekall.surfaces.cli") -> tuple[int, set[str], str]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(module=module), *argv], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    return report["code"], set(report["modules"]), done.stderr


def heavy_in(modules: set[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy))


@pytest.fixture
def busy_thread(jobs_dir: Path, clock: FakeClock) -> str:
    """A thread with finished jobs behind it, so the read path replays real journals."""
    store = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock)
    thread = new_thread()
    for outcome in ("resumed", "failed", "skipped", "resumed"):
        scheduled_run(store, clock, thread, outcome)
    return thread


@pytest.mark.parametrize("argv", [["status", "{thread}", "--json"], ["history", "--json", "--limit", "3000"],
                                  ["history", "--json", "--thread", "{thread}"]],
                         ids=["status", "history", "history-of-a-thread"])
def test_the_json_read_paths_load_no_heavy_module(argv: list[str], busy_thread: str, jobs_dir: Path):
    env = {**os.environ, "REKALL_JOBS_DIR": str(jobs_dir)}
    code, modules, output = loaded_by([a.format(thread=busy_thread) for a in argv], env)
    assert code == 0, output
    assert busy_thread in output  # the jobs were really read
    assert heavy_in(modules) == []


@pytest.mark.parametrize("argv", [["status", "{thread}", "--json"], ["history", "--json", "--limit", "3000"],
                                  ["history", "--json", "--thread", "{thread}"]],
                         ids=["status", "history", "history-of-a-thread"])
def test_the_answer_from_viewss_load_neither_the_cli_nor_the_stores_records(argv: list[str], busy_thread: str,
                                                                         jobs_dir: Path):
    env = {**os.environ, "REKALL_JOBS_DIR": str(jobs_dir)}
    argv = [a.format(thread=busy_thread) for a in argv]
    loaded_by(["history", "--json"], env)  # the full path saves the history rows the quick one serves
    code, modules, output = loaded_by(argv, env, module="rekall.surfaces.cli_entry")
    assert code == 0, output
    assert busy_thread in output
    assert heavy_in(modules, QUICK_HEAVY) == []


def test_the_quick_probe_sees_the_cli_when_the_view_cannot_be_trusted(busy_thread: str, jobs_dir: Path):
    # No history rows saved yet: the quick path hands over to the CLI, and the probe sees it.
    env = {**os.environ, "REKALL_JOBS_DIR": str(jobs_dir)}
    code, modules, _ = loaded_by(["history", "--json"], env, module="rekall.surfaces.cli_entry")
    assert code == 0
    assert {"rekall.surfaces.cli", "argparse", "attrs"} <= set(heavy_in(modules, QUICK_HEAVY))


def test_the_probe_sees_a_heavy_module_when_one_is_loaded(busy_thread: str, jobs_dir: Path):
    # The same probe, on a path that prints with rich: proves the check can fail.
    env = {**os.environ, "REKALL_JOBS_DIR": str(jobs_dir)}
    code, modules, _ = loaded_by(["status", busy_thread], env)
    assert code == 0
    assert "rich" in heavy_in(modules)


def test_the_mcp_light_path_loads_no_heavy_module(busy_thread: str, jobs_dir: Path):
    # The opening real Codex sends (initialize, its lists) and one compaction_status, without the SDK or pydantic
    # (its warm-up off: run_light reports what the answers loaded).
    from tests.support import codex_opening
    from tests.surfaces.test_mcp_light import run_light

    env = {**os.environ, "REKALL_JOBS_DIR": str(jobs_dir)}
    replies, modules = run_light([*codex_opening.OPENING,
                                  codex_opening.tool_call(4, "compaction_status", {"threadId": busy_thread}, 3)], env)
    assert busy_thread in replies[-1]  # the jobs were really read
    assert heavy_in(modules | {"rekall.surfaces.mcp_light"}) == [] and "rekall.surfaces.mcp_light" in modules
    assert not any(m == "pydantic" or m.startswith(("pydantic.", "pydantic_core")) for m in modules)


def test_the_mcp_probe_sees_the_sdk_once_the_session_is_handed_over(jobs_dir: Path):
    from tests.surfaces.test_mcp_light import initialize, request, run_light

    env = {**os.environ, "REKALL_JOBS_DIR": str(jobs_dir)}
    _, modules = run_light([*initialize("2025-06-18"), request(2, "ping")], env)
    assert "mcp" in heavy_in(modules)


#: What a worker may not have loaded when its follow goes out: following only reads, so the
#: policy, the lifecycle machine (transitions), psutil and cattrs (the claim) load after; the CLI
#: and its argument parser are not on the worker's way at all.
NOT_BEFORE_FOLLOWING = ("rekall.worker.policy", "transitions", "psutil", "cattrs", "rich", "mcp", "mcp_types", "websockets",
                        "rekall.kernel.credentials", "rekall.surfaces.cli", "argparse", "msgspec")

#: Runs ``python -m rekall worker THREAD JOB`` in-process (runpy, as ``-m`` does) and prints the
#: modules executed when the follow message was built (by the adapter, on either way of following)
#: and when the worker had finished. A module set up to load on first use (importlib's
#: LazyLoader) and not used yet is not counted.
WORKER_PROBE = """
import json, runpy, sys
from rekall.adapters.extension import ipc

def executed():
    return sorted(name for name, module in list(sys.modules.items()) if type(module).__name__ != "_LazyModule")

seen = {}
follow_broadcast = ipc.IpcAdapter.follow_broadcast
def recording(self, *args, **kwargs):
    seen.setdefault("following", executed())
    return follow_broadcast(self, *args, **kwargs)
ipc.IpcAdapter.follow_broadcast = recording
sys.argv = ["rekall", "worker", *sys.argv[1:]]
try:
    runpy.run_module("rekall", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "following": seen.get("following"), "finished": executed()}))
"""


def loaded(names: list[str], heavy: tuple[str, ...]) -> list[str]:
    return sorted(m for m in names if any(m == h or m.startswith(h + ".") for h in heavy))


def run_worker_probe(jobs_dir: Path, *, told: bool) -> dict:
    """Schedule a job and run its worker under ``WORKER_PROBE``, with the SCHEDULED argument
    schedule gives it (``told``) or without it (a worker started by an earlier rekall)."""
    argument: list[str] = []

    def spawn(thread_id: str, job_id: str, *, scheduled, **_: object) -> int:
        argument.append(scheduled.to_argument())
        return os.getpid()

    with start_sim_in_thread(compaction_delay_s=0.01) as sim:
        env = {**os.environ, **sim.env, "REKALL_JOBS_DIR": str(jobs_dir), "REKALL_IDLE_STABLE_MS": "50"}
        job = asyncio.run(service.schedule(sim.thread_id, None, env=env, spawn=spawn))["jobId"]
        done = subprocess.run([sys.executable, "-c", WORKER_PROBE, sim.thread_id, job, *argument[:told]], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.stdout, done.stderr
        report = json.loads(done.stdout.splitlines()[-1])
        assert report["code"] == 0 and sim.call(lambda owner: len(owner.compact_requests)) == 1, done.stderr
    assert report["following"] is not None  # the worker really followed the thread
    return report


def test_a_worker_follows_the_thread_before_it_loads_the_policy_the_machine_or_psutil(jobs_dir: Path):
    report = run_worker_probe(jobs_dir, told=False)
    assert loaded(report["following"], NOT_BEFORE_FOLLOWING) == []
    # The same probe sees them once the job is done: the check can fail.
    assert {"rekall.worker.policy", "transitions", "psutil", "cattrs"} <= set(loaded(report["finished"], NOT_BEFORE_FOLLOWING))


#: What a worker told what schedule journaled has not loaded either when its follow goes out:
#: the store (journal replay, the lifecycle, the job's records) and the lifecycle's states; nor the
#: event loop, the session or the reactor: it follows on a blocking socket (rekall.adapters.extension.first_follow).
NOT_BEFORE_FOLLOWING_TOLD = (*NOT_BEFORE_FOLLOWING, "rekall.states", "rekall.store.jobstore", "rekall.store.catalog",
                             "rekall.store.replay", "rekall.store.journal", "rekall.store.wire",
                             "rekall.store.lifecycle", "rekall.store.handoff", "rekall.worker.continuation",
                             "asyncio", "ssl", "concurrent", "rekall.worker.reactor", "rekall.worker.timers",
                             "rekall.adapters.extension.session", "rekall.adapters.extension.platform", "rekall.transports.channel",
                             "rekall.transports.socketstream", "rekall.thread.mirror", "rekall.kernel.events",
                             "rekall.adapters.contract")


def test_a_worker_told_what_schedule_journaled_follows_before_it_loads_the_store_the_lifecycle_or_the_event_loop(jobs_dir: Path):
    report = run_worker_probe(jobs_dir, told=True)
    assert loaded(report["following"], NOT_BEFORE_FOLLOWING_TOLD) == []
    finished = set(loaded(report["finished"], NOT_BEFORE_FOLLOWING_TOLD))
    assert {"rekall.states.machine", "rekall.store.replay", "rekall.store.jobstore", "transitions",
            "cattrs", "asyncio", "rekall.worker.reactor", "rekall.adapters.extension.session"} <= finished
