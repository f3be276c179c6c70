"""Measure compaction and continuation on the real Codex engine, through rekall.

Each run starts the codex-backed simulated owner (``tests.support.codex_backend``: a real
``codex app-server`` with a fresh isolated ``CODEX_HOME`` and the loopback mock model) and
fills the thread's context with one user turn (the mock answers with a long message). Then
one of two paths:

``job`` (``jobRuns``): a whole rekall job. ``rekall.usecases.service.schedule`` (what the
``schedule_compaction`` tool runs) saves a ``resume: true`` handoff and starts the detached
worker; the worker follows the thread over the Unix socket, waits for stable idle, asks the
owner to compact, waits for the engine's ``contextCompaction`` item to complete, checks the
headroom on the engine's telemetry and starts the one continuation turn. The figures are the
job's own status fields: ``contextTokensBefore``/``After``, ``reclaimedFraction``,
``compactionDurationMs`` (entering ``requesting`` → the completed item) and ``resumeDelayMs``
(the completed item → the started continuation; it includes the idle-stable debounce, whose
setting is reported), plus ``scheduleToResumedMs`` (``createdAt`` → ``resumedAt``).

``follower`` (``runs``): rekall's client alone, without the worker's debounce:

1. the follower asks the owner to compact (``thread-follower-compact-thread``, relayed as
   ``thread/compact/start``) and waits for ``CompactionCompleted`` from its mirror;
2. once the mirror reports the thread idle, the follower starts one continuation turn with a
   marker (``thread-follower-start-turn`` → ``turn/start``); the mock must receive the marker.
   Compaction duration is request sent → ``CompactionCompleted``; continuation delay is
   ``CompactionCompleted`` → the owner's answer with the started turn (waiting for idle included).

In both paths the mock model must receive the continuation. The model is a local mock: token
counts are derived from request sizes (bytes / 4), and its latency is near zero, so durations
measure the engine and rekall, not a real model.

``app-server`` (``appServerRuns``): whole rekall jobs on the other platform, the real shared
app-server daemon (bench/app_server_jobs.py), with the same debounce; ``all`` runs the three and
prints both platforms' jobs side by side (dispatch and resume overhead beyond the debounce,
schedule → resumed, tokens before and after).

Usage: ``python bench/verify_codex.py [--runs N] [--path job|follower|both|app-server|all]
[--idle-stable-ms MS] [--json] [--binary PATH]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rekall.kernel import events as ev  # noqa: E402
from rekall.usecases import service
from rekall.adapters.extension import connect_thread  # noqa: E402
from rekall.thread.facts import derive_facts  # noqa: E402
from rekall.codex.schema import binary_identity  # noqa: E402
from rekall.kernel.settings import DEFAULT_IDLE_STABLE_MS  # noqa: E402
from rekall.sim import SimulatedOwner  # noqa: E402
from rekall.states import TERMINAL_STATES  # noqa: E402
from tests.support.codex_backend import CodexBackend  # noqa: E402
from tests.support.pinned import find_real_codex  # noqa: E402

FILLER = "context filler " * 8000
TIMEOUT_S = 120
POLL_S = 0.02
HANDOFF = {
    "summary": "Benchmark thread: the context was filled by one long answer.",
    "preserve": ["this is a measurement"],
    "discard": ["the filler answer"],
    "nextStep": "Reply with one word, then stop.",
    "resume": True,
}


async def _next(session: Any, kind: type) -> Any:
    while not isinstance(event := await session.next_event(), kind):
        pass
    return event


async def filled_thread(owner: SimulatedOwner, backend: CodexBackend) -> None:
    """One user turn whose long answer fills the context; returns once it ended and the thread is idle."""
    backend.mock.queue_text(FILLER)
    turn = await backend.user_turn("Please fill the context for the measurement.")
    await owner.wait_until(lambda _: derive_facts(backend.snapshot()).idle and any(
        t["turnId"] == turn["id"] and t["status"] == "completed" for t in backend.snapshot()["turns"]),
        timeout=TIMEOUT_S)


async def one_run(binary: Path, index: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rekall-verify-") as scratch, anyio.fail_after(TIMEOUT_S):
        backend = CodexBackend(binary, Path(scratch))
        async with SimulatedOwner(backend) as owner:
            await filled_thread(owner, backend)
            async with await connect_thread(owner.thread_id, env=owner.env) as session:
                tokens_before = session.mirror.tokens

                requested = time.perf_counter()
                await session.compact()
                completed = await _next(session, ev.CompactionCompleted)
                compacted = time.perf_counter()
                await _next(session, ev.ThreadIdle)
                tokens_after, window = session.mirror.tokens, session.mirror.window

                job = str(uuid.uuid4())
                started = await session.start_turn(f"Continue from the handoff. rekall-job {job}", job)
                continued = time.perf_counter()
                request = await anyio.to_thread.run_sync(
                    lambda: backend.mock.wait_for(lambda r: r.contains(job), timeout=TIMEOUT_S))
                await owner.wait_until(lambda _: any(t["turnId"] == started.turn_id and t["status"] == "completed"
                                                     for t in backend.snapshot()["turns"]), timeout=TIMEOUT_S)
    reclaimed = tokens_before - tokens_after if tokens_before is not None and tokens_after is not None else None
    return {
        "run": index,
        "compactionItemId": completed.compaction_id,
        "resumeTurnId": started.turn_id,
        "contextTokensBefore": tokens_before,
        "contextTokensAfter": tokens_after,
        "tokensReclaimed": reclaimed,
        "reduction": round(reclaimed / tokens_before, 4) if reclaimed is not None and tokens_before else None,
        "modelContextWindow": window,
        "contextWindowUsedFraction": round(tokens_after / window, 4) if tokens_after and window else None,
        "compactionDurationMs": round((compacted - requested) * 1000, 1),
        "continuationDelayMs": round((continued - compacted) * 1000, 1),
        "continuationReachedModel": request.kind == "turn",
    }


def job_env(owner: SimulatedOwner, jobs_dir: Path, idle_stable_ms: int) -> dict[str, str]:
    """This process's environment without rekall or Codex settings, pointed at ``owner``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CONTEXT_COMPACT_", "CODEX_"))}
    return {**env, **owner.env, "REKALL_JOBS_DIR": str(jobs_dir), "REKALL_IDLE_STABLE_MS": str(idle_stable_ms)}


def _ms_between(start: str, end: str) -> float:
    return round((dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds() * 1000, 1)


async def _process_gone(pid: int) -> None:
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        await anyio.sleep(POLL_S)


async def one_job_run(binary: Path, index: int, idle_stable_ms: int) -> dict[str, Any]:
    """A whole rekall job (schedule → worker → resumed) on a real app-server thread."""
    terminal = {s.value for s in TERMINAL_STATES}
    with tempfile.TemporaryDirectory(prefix="rekall-verify-") as scratch, anyio.fail_after(TIMEOUT_S):
        backend = CodexBackend(binary, Path(scratch) / "engine")
        async with SimulatedOwner(backend) as owner:
            await filled_thread(owner, backend)
            env = job_env(owner, Path(scratch) / "jobs", idle_stable_ms)
            scheduled = await service.schedule(owner.thread_id, HANDOFF, env=env)
            while (status := service.status_reply(owner.thread_id, env=env))["state"] not in terminal:
                await anyio.sleep(POLL_S)  # the worker is another process; its status file is the interface
            await _process_gone(scheduled["pid"])
            resumed, reached = status["state"] == "resumed", False
            if resumed:  # the continuation turn started; its request reaches the model a moment later
                marker = f"[Automatic continuation requested through rekall; job {status['jobId']}]"
                request = await anyio.to_thread.run_sync(
                    lambda: backend.mock.wait_for(lambda r: r.contains(marker), timeout=TIMEOUT_S))
                reached = request.kind == "turn"
                await owner.wait_until(lambda _: any(t["turnId"] == status["resumeTurnId"] and t["status"] == "completed"
                                                     for t in backend.snapshot()["turns"]), timeout=TIMEOUT_S)
            counts = (len(owner.compact_requests), len(owner.start_turn_requests))
    return {
        "run": index,
        "state": status["state"],
        "jobId": status["jobId"],
        "compactionItemId": status.get("compactionId"),
        "resumeTurnId": status.get("resumeTurnId"),
        "contextTokensBefore": status.get("contextTokensBefore"),
        "contextTokensAfter": status.get("contextTokensAfter"),
        "tokensReclaimed": status.get("tokensReclaimed"),
        "reduction": round(status["reclaimedFraction"], 4) if status.get("reclaimedFraction") is not None else None,
        "modelContextWindow": status.get("modelContextWindowAfter"),
        "contextWindowUsedFraction": round(status["contextWindowUsedFraction"], 4)
        if status.get("contextWindowUsedFraction") is not None else None,
        "compactionDurationMs": status.get("compactionDurationMs"),
        "continuationDelayMs": status.get("resumeDelayMs"),
        "scheduleToResumedMs": _ms_between(status["createdAt"], status["resumedAt"]) if resumed else None,
        "idleStableMs": idle_stable_ms,
        "ownerRequests": {"compact": counts[0], "startTurn": counts[1]},
        "continuationReachedModel": reached,
    }


def summarise(runs: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    return {key: median(key) for key in keys}


FOLLOWER_KEYS = ("contextTokensBefore", "contextTokensAfter", "reduction", "compactionDurationMs",
                 "continuationDelayMs")
JOB_KEYS = (*FOLLOWER_KEYS, "scheduleToResumedMs")


async def verify(binary: Path, runs: int, path: str = "both", idle_stable_ms: int = DEFAULT_IDLE_STABLE_MS
                 ) -> dict[str, Any]:
    result: dict[str, Any] = {
        "engine": {"codexVersion": binary_identity(binary).version, "binary": str(binary)},
        "model": "local loopback mock of the Responses API (tests.support.mock_model); tokens = request bytes / 4",
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
    }
    ok = True
    if path in ("job", "both", "all"):
        jobs = [await one_job_run(binary, index, idle_stable_ms) for index in range(1, runs + 1)]
        result.update(
            jobPath="rekall.usecases.service.schedule -> detached rekall worker -> Unix socket -> rekall.sim owner -> "
                    "codex app-server relay",
            jobRuns=jobs, jobMedian=summarise(jobs, JOB_KEYS),
            allJobsResumed=all(j["state"] == "resumed" and j["continuationReachedModel"]
                               and j["ownerRequests"] == {"compact": 1, "startTurn": 1} for j in jobs))
        ok = ok and result["allJobsResumed"]
    if path in ("app-server", "all"):
        from bench.app_server_jobs import app_server_jobs

        shared = await app_server_jobs(binary, runs, idle_stable_ms)
        result.update(appServerPath=shared["path"], appServerRuns=shared["runs"], appServerMedian=shared["median"],
                      allAppServerJobsResumed=shared["allResumed"])
        ok = ok and shared["allResumed"]
    if path in ("follower", "both", "all"):
        follower = [await one_run(binary, index) for index in range(1, runs + 1)]
        result.update(
            path="rekall.adapters follower -> Unix socket -> rekall.sim owner -> codex app-server relay",
            runs=follower, median=summarise(follower, FOLLOWER_KEYS),
            allContinuationsReachedModel=all(r["continuationReachedModel"] for r in follower))
        ok = ok and result["allContinuationsReachedModel"]
    result["ok"] = ok
    return result


def _print_table(title: str, runs: list[dict[str, Any]]) -> None:
    print(title)
    print("run  before  after  reduction  compaction ms  continuation ms")
    for r in runs:
        print(f"{r['run']:>3}  {r['contextTokensBefore']:>6}  {r['contextTokensAfter']:>5}  "
              f"{r['reduction']:>9.1%}  {r['compactionDurationMs']:>13}  {r['continuationDelayMs']:>15}")


def _print_platforms(result: dict[str, Any], idle_stable_ms: int) -> None:
    """Medians of whole jobs on both platforms, side by side."""
    def ms(value: Any) -> str:
        return "-" if value is None else f"{value:.0f}"

    extension, shared = result["jobMedian"], result["appServerMedian"]
    print(f"whole jobs, medians (idle debounce {idle_stable_ms} ms):")
    print("platform    tokens before → after  compaction ms  resume overhead ms  schedule→resumed ms")
    for name, m, overhead in (("extension", extension, None if extension["continuationDelayMs"] is None
                               else extension["continuationDelayMs"] - idle_stable_ms),
                              ("app-server", shared, shared["resumeOverheadMs"])):
        print(f"{name:10}  {m['contextTokensBefore']:>13.0f} → {m['contextTokensAfter']:<6.0f}  "
              f"{ms(m['compactionDurationMs']):>13}  {ms(overhead):>18}  {ms(m['scheduleToResumedMs']):>19}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--path", choices=("job", "follower", "both", "app-server", "all"), default="both",
                        help="whole rekall jobs, rekall's follower alone, both (default), whole jobs on the "
                             "shared app-server daemon, or all three")
    parser.add_argument("--idle-stable-ms", type=int, default=DEFAULT_IDLE_STABLE_MS,
                        help=f"the worker's idle debounce for job runs (default {DEFAULT_IDLE_STABLE_MS})")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--binary", type=Path, help="codex launcher (default: REKALL_TEST_CODEX or the install cache)")
    args = parser.parse_args(argv)
    binary, reason = (args.binary, str(args.binary)) if args.binary else find_real_codex()
    if binary is None:
        print(f"verify_codex: {reason}", file=sys.stderr)
        return 2
    result = anyio.run(verify, binary, args.runs, args.path, args.idle_stable_ms)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"Codex {result['engine']['codexVersion']} (real engine), local mock model")
        if "jobRuns" in result:
            _print_table(f"whole rekall jobs (idle debounce {args.idle_stable_ms} ms):", result["jobRuns"])
        if "runs" in result:
            _print_table("rekall follower alone:", result["runs"])
        if "jobRuns" in result and "appServerRuns" in result:
            _print_platforms(result, args.idle_stable_ms)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
