"""Lifecycle latency and start-up costs, measured against the simulated owner in one run.

    python bench/lifecycle.py --json [--jobs 30] [--debounce-ms 200]

Each job runs the real path: ``service.schedule`` (what the MCP tool calls), a detached
worker process, the simulated owner on a real Unix socket. Times are taken on the owner's
side, where the extension would see them:

* dispatch overhead: the thread becomes idle → the compact request arrives, minus the debounce;
* resume delay: the compaction completes → the start-turn request arrives; its overhead is
  the delay minus the debounce (the Node version measured 812–1065 ms with a 750 ms
  debounce and a 100 ms polling loop);
* ``status_cli_ms`` against ``python_startup_ms``: cold ``rekall status`` processes against
  cold ``python -c pass`` processes, medians, same interpreter, same run;
* ``mcp_ready_ms``: spawning ``rekall mcp`` until ``tools/list`` is answered.

Targets: both overheads ≤ 10 ms at p95; status ≤ startup + 120 ms; MCP ready ≤ 1500 ms.

``--app-server-jobs N`` adds the other platform beside it: N whole jobs on the real shared
app-server daemon with the same debounce (bench/app_server_jobs.py), reported under
``app_server`` with the same overhead figures; no target (a real engine, reported only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rekall import service  # noqa: E402
from rekall.store.paths import resolve_lock_dir  # noqa: E402
from rekall.sim import start_sim_in_thread  # noqa: E402

HANDOFF = {"summary": "bench", "preserve": [], "discard": [], "nextStep": "stop", "resume": True}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _instrument(owner: Any, marks: dict[str, list[float]]) -> None:
    """Record, on the owner's loop, when requests arrive and when a compaction completes."""
    backend = owner.backend
    handle, publish = backend.handle, owner.publish

    async def timed_handle(method: str, params: Any) -> Any:
        marks.setdefault(method, []).append(time.monotonic())
        return await handle(method, params)

    def timed_publish(patches: list[dict[str, Any]]) -> None:
        if any(p.get("path", [])[-1:] == ["completed"] and p.get("value") is True for p in patches):
            marks.setdefault("completed", []).append(time.monotonic())
        publish(patches)

    backend.handle = timed_handle
    owner.publish = timed_publish


def _wait_unlocked(lock: Path, timeout: float = 10.0) -> None:
    """The worker releases the thread's lock just after its terminal transition."""
    end = time.monotonic() + timeout
    while lock.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"{lock} still held")
        time.sleep(0.005)


def run_jobs(count: int, debounce_ms: int) -> dict[str, Any]:
    dispatch, resume, worker_resume_delay = [], [], []
    with tempfile.TemporaryDirectory(prefix="rekall-bench-") as tmp, \
            start_sim_in_thread(runtime="active", turn_duration_s=None, compaction_delay_s=0.05) as sim:
        marks: dict[str, list[float]] = {}
        sim.call(lambda owner: _instrument(owner, marks))
        env = {**os.environ, **sim.env, "REKALL_JOBS_DIR": str(Path(tmp) / "jobs"),
               "REKALL_IDLE_STABLE_MS": str(debounce_ms)}
        for n in range(1, count + 1):
            sim.set_telemetry(90_000, 100_000)  # refill the context: each job starts 90% full
            follows = sim.follow_count
            asyncio.run(service.schedule(sim.thread_id, HANDOFF, env=env))
            # Wait on the owner's side, without polling: the new worker follows once it waits for idle.
            try:
                sim.wait_until(lambda owner: owner.follow_count > follows + 1, timeout=30)
            except TimeoutError:
                raise RuntimeError(f"job {n}: the worker never followed the thread: "
                                   f"{service.status(sim.thread_id, env=env)}") from None
            idle_at = sim.call(lambda owner: (owner.backend.complete_turn("completed"), time.monotonic())[1])
            sim.wait_until(lambda owner: len(owner.start_turn_requests) >= n, timeout=30)
            _wait_unlocked(resolve_lock_dir(env) / f"{sim.thread_id}.lock")
            final = service.status(sim.thread_id, env=env)
            if final["state"] != "resumed":
                raise RuntimeError(f"bench job ended {final['state']}: {final}")
            dispatch.append((marks["thread-follower-compact-thread"][n - 1] - idle_at) * 1000 - debounce_ms)
            resume.append((marks["thread-follower-start-turn"][n - 1] - marks["completed"][-1]) * 1000)
            worker_resume_delay.append(final["resumeDelayMs"])
    resume_overhead = [d - debounce_ms for d in resume]
    if os.environ.get("BENCH_DEBUG"):
        print("dispatch", [round(d, 1) for d in dispatch], "resume", [round(d - debounce_ms, 1) for d in resume], file=sys.stderr)
    return {
        "jobs": count,
        "debounce_ms": debounce_ms,
        "resume_delay_ms_p50": round(percentile(resume, 0.5), 2),
        "resume_delay_ms_p95": round(percentile(resume, 0.95), 2),
        "resume_overhead_ms_p95": round(percentile(resume_overhead, 0.95), 2),
        "dispatch_overhead_ms_p50": round(percentile(dispatch, 0.5), 2),
        "dispatch_overhead_ms_p95": round(percentile(dispatch, 0.95), 2),
        "worker_reported_resume_delay_ms_p50": round(percentile(worker_resume_delay, 0.5), 2),
    }


def _median_ms(argv: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def startup_costs(runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rekall-bench-") as tmp:
        env = {**os.environ, "REKALL_JOBS_DIR": str(Path(tmp) / "jobs")}
        thread = "0199a5c2-3333-4000-8000-000000000003"
        python_ms = _median_ms([sys.executable, "-c", "pass"], env, runs)
        status_ms = _median_ms([sys.executable, "-m", "rekall", "status", thread, "--json"], env, runs)
        ready = [mcp_ready_ms(env) for _ in range(max(3, runs // 3))]
    return {"python_startup_ms": round(python_ms, 1), "status_cli_ms": round(status_ms, 1),
            "status_cli_over_startup_ms": round(status_ms - python_ms, 1),
            "mcp_ready_ms": round(statistics.median(ready), 1)}


def mcp_ready_ms(env: dict[str, str]) -> float:
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    start = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "rekall", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env)
    try:
        server.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
        server.stdin.flush()
        while True:
            line = server.stdout.readline()
            if not line:
                raise RuntimeError("rekall mcp exited before answering tools/list")
            if json.loads(line).get("id") == 2:
                return (time.perf_counter() - start) * 1000
    finally:
        server.kill()
        server.wait()


def app_server_figures(count: int, debounce_ms: int) -> dict[str, Any]:
    """The same overheads for whole jobs on the real shared app-server daemon (reported, no target)."""
    import anyio

    from bench.app_server_jobs import app_server_jobs
    from tests.support.pinned import find_real_codex

    binary, reason = find_real_codex()
    if binary is None:
        raise SystemExit(f"--app-server-jobs needs the real Codex: {reason}")
    shared = anyio.run(app_server_jobs, binary, count, debounce_ms)
    if not shared["allResumed"]:
        raise RuntimeError(f"an app-server bench job did not resume: {shared['runs']}")
    runs = shared["runs"]
    dispatch = [r["dispatchOverheadMs"] for r in runs]
    resume = [r["resumeOverheadMs"] for r in runs]
    return {"jobs": count, "debounce_ms": debounce_ms,
            "dispatch_overhead_ms_p50": percentile(dispatch, 0.5), "dispatch_overhead_ms_p95": percentile(dispatch, 0.95),
            "resume_overhead_ms_p50": percentile(resume, 0.5), "resume_overhead_ms_p95": percentile(resume, 0.95),
            "attach_ms_p50": percentile([r["attachMs"] for r in runs], 0.5),
            "schedule_to_resumed_ms_p50": percentile([r["scheduleToResumedMs"] for r in runs], 0.5),
            "context_tokens_before_p50": percentile([r["contextTokensBefore"] for r in runs], 0.5),
            "context_tokens_after_p50": percentile([r["contextTokensAfter"] for r in runs], 0.5)}


TARGETS = {
    "resume_overhead_ms_p95": ("<=", 10.0),
    "dispatch_overhead_ms_p95": ("<=", 10.0),
    "mcp_ready_ms": ("<=", 1500.0),
    "status_cli_over_startup_ms": ("<=", 120.0),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--debounce-ms", type=int, default=200)
    parser.add_argument("--startup-runs", type=int, default=15)
    parser.add_argument("--app-server-jobs", type=int, default=0,
                        help="also run N jobs on the real shared app-server daemon (needs scripts/install-codex)")
    args = parser.parse_args()
    figures = {**run_jobs(args.jobs, args.debounce_ms), **startup_costs(args.startup_runs)}
    if args.app_server_jobs:
        figures["app_server"] = app_server_figures(args.app_server_jobs, args.debounce_ms)
    figures["targets_met"] = {name: figures[name] <= limit for name, (_, limit) in TARGETS.items()}
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for name, value in figures.items():
            print(f"{name:40} {value}")
    return 0 if all(figures["targets_met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
