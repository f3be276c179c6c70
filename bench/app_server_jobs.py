"""Whole rekall jobs on the REAL shared app-server daemon, measured from the job's own record.

One ``codex app-server daemon`` (isolated ``CODEX_HOME``, the loopback mock model) serves every
run. Per run, a ``websockets`` client plays the user's terminal: it starts a thread and fills its
context with one long answer. Then ``rekall.usecases.service.schedule`` (what the MCP tool runs) starts a
real detached worker that attaches with ``thread/resume``, waits for stable idle, compacts and
starts the one continuation turn. The thread is idle before the worker attaches, so:

* ``dispatchOverheadMs`` = the ``connected`` note → the ``requesting`` transition, minus the
  idle debounce (the extension's figure in bench/lifecycle.py is idle → compact request, minus
  the debounce);
* ``resumeOverheadMs`` = ``resumeDelayMs`` (the completed compaction → the started
  continuation) minus the debounce;
* ``attachMs`` = worker started → connected (``thread/resume`` with ``excludeTurns``, then
  ``thread/turns/list`` for the baseline);
* ``scheduleToResumedMs`` = ``createdAt`` → ``resumedAt``; tokens before and after from the
  daemon's telemetry.

Used by ``bench/verify_codex.py --path app-server`` and ``bench/lifecycle.py --app-server-jobs N``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rekall.usecases import service  # noqa: E402
from rekall.surfaces.explain import build_explanation  # noqa: E402
from rekall.states import TERMINAL_STATES  # noqa: E402
from rekall.store import JobStore  # noqa: E402
from tests.codex.daemonkit import peer_client, start_daemon, stop_daemon  # noqa: E402
from tests.support.codex_home import make_isolated_home  # noqa: E402
from tests.support.mock_model import MockModel  # noqa: E402

FILLER = "context filler " * 8000
TIMEOUT_S = 120
POLL_S = 0.02
HANDOFF = {"summary": "Benchmark thread on the shared app-server.", "preserve": ["this is a measurement"],
           "discard": ["the filler answer"], "nextStep": "Reply with one word, then stop.", "resume": True}
KEYS = ("dispatchOverheadMs", "resumeOverheadMs", "attachMs", "scheduleToResumedMs", "contextTokensBefore",
        "contextTokensAfter", "reduction", "compactionDurationMs")


def _ms(start: str, end: str) -> float:
    return round((dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds() * 1000, 1)


async def _filled_thread(socket_path: Path, model: MockModel) -> str:
    async with peer_client(socket_path, name="bench-terminal") as user:
        thread_id = (await user.request("thread/start", {}))["thread"]["id"]
        model.queue_text(FILLER)
        start = len(user.messages)
        await user.request("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "Fill it."}]})
        await user.wait_for(lambda m: m.get("method") == "turn/completed" and m["params"]["threadId"] == thread_id,
                            start=start, timeout=TIMEOUT_S)
    return thread_id


async def run_job(thread_id: str, handoff: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """Schedule a job (a real detached worker); its status once it ended and its worker exited."""
    terminal = {s.value for s in TERMINAL_STATES}
    scheduled = await service.schedule(thread_id, handoff, env=env)
    while (status := service.status_reply(thread_id, env=env))["state"] not in terminal:
        await anyio.sleep(POLL_S)  # the worker is another process; its status file is the interface
    while True:  # its exit, so that runs do not overlap
        try:
            os.kill(scheduled["pid"], 0)
        except ProcessLookupError:
            return status
        await anyio.sleep(POLL_S)


@contextlib.contextmanager
def bench_daemon(binary: Path, model: MockModel, idle_stable_ms: int) -> Iterator[tuple[Path, dict[str, str]]]:
    """One real daemon in a scratch ``CODEX_HOME`` on ``model``: its socket, and rekall's environment for it."""
    with tempfile.TemporaryDirectory(prefix="rekall-bench-daemon-") as scratch:
        root = Path(scratch)
        home = make_isolated_home(root / "codex-home", model.base_url)
        daemon = start_daemon(binary, home)
        try:
            yield daemon.socket_path, {
                **{k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CODEX_"))},
                "CODEX_HOME": str(home), "REKALL_JOBS_DIR": str(root / "jobs"),
                "REKALL_IDLE_STABLE_MS": str(idle_stable_ms)}
        finally:
            stop_daemon(daemon)


async def _one_job(socket_path: Path, model: MockModel, env: dict[str, str], index: int,
                   idle_stable_ms: int) -> dict[str, Any]:
    with anyio.fail_after(TIMEOUT_S):
        thread_id = await _filled_thread(socket_path, model)
        status = await run_job(thread_id, HANDOFF, env)
    explanation = build_explanation(JobStore.open_reader(env), status["jobId"])
    connected = next(n["at"] for n in explanation["notes"] if n["kind"] == "connected")
    requesting = next(t["at"] for t in explanation["timeline"] if t["to"] == "requesting")
    resumed = status["state"] == "resumed"
    marker = f"[Automatic continuation requested through rekall; job {status['jobId']}]"
    return {
        "run": index,
        "state": status["state"],
        "contextTokensBefore": status.get("contextTokensBefore"),
        "contextTokensAfter": status.get("contextTokensAfter"),
        "reduction": round(status["reclaimedFraction"], 4) if status.get("reclaimedFraction") is not None else None,
        "compactionDurationMs": status.get("compactionDurationMs"),
        "attachMs": _ms(status["workerStartedAt"], connected),
        "dispatchOverheadMs": round(_ms(connected, requesting) - idle_stable_ms, 1),
        "resumeOverheadMs": round(status["resumeDelayMs"] - idle_stable_ms, 1) if resumed else None,
        "scheduleToResumedMs": _ms(status["createdAt"], status["resumedAt"]) if resumed else None,
        "continuationRequests": len(model.requests_containing(marker)),
    }


async def app_server_jobs(binary: Path, runs: int, idle_stable_ms: int) -> dict[str, Any]:
    """``runs`` whole jobs on one real daemon; the per-run figures, their medians and whether all resumed."""
    with MockModel() as model, bench_daemon(binary, model, idle_stable_ms) as (socket_path, env):
        jobs = [await _one_job(socket_path, model, env, index, idle_stable_ms) for index in range(1, runs + 1)]

    def median(key: str) -> float | None:
        values = [j[key] for j in jobs if j.get(key) is not None]
        return statistics.median(values) if values else None

    return {"path": "rekall.usecases.service.schedule -> detached rekall worker -> WebSocket over the daemon's Unix socket",
            "idleStableMs": idle_stable_ms, "runs": jobs, "median": {key: median(key) for key in KEYS},
            "allResumed": all(j["state"] == "resumed" and j["continuationRequests"] == 1 for j in jobs)}
