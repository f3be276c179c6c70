"""Measure compaction and continuation on the real Codex engine, through rekall's IPC path.

Each run starts the codex-backed simulated owner (``rekall.sim.codex_backend``: a real
``codex app-server`` with a fresh isolated ``CODEX_HOME`` and the loopback mock model), and
rekall's own client follows the thread over the real Unix socket (``rekall.adapters``):

1. a user turn fills the context (the mock answers with a long message);
2. the follower asks the owner to compact (``thread-follower-compact-thread``, relayed as
   ``thread/compact/start``) and waits for ``CompactionCompleted`` from its mirror;
3. once the mirror reports the thread idle, the follower starts one continuation turn with a
   marker (``thread-follower-start-turn`` → ``turn/start``); the mock must receive the marker.

Reported per run: context tokens before and after (the mirror's ``last.totalTokens``, which is
the engine's own ``thread/tokenUsage/updated``), the reduction, the compaction duration
(request sent → ``CompactionCompleted``) and the continuation delay (``CompactionCompleted`` →
the owner's answer with the started turn; it includes waiting for idle, but not the worker's
idle-stable debounce).

The model is a local mock: token counts are derived from request sizes (bytes / 4), and its
latency is near zero, so durations measure the engine and rekall, not a real model.

Usage: ``python bench/verify_codex.py [--runs N] [--json] [--binary PATH]``
"""

from __future__ import annotations

import argparse
import json
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

from rekall import events as ev  # noqa: E402
from rekall.adapters import connect_thread  # noqa: E402
from rekall.adapters.facts import derive_facts  # noqa: E402
from rekall.codex.pinned import find_real_codex  # noqa: E402
from rekall.codex.schema import binary_identity  # noqa: E402
from rekall.sim import SimulatedOwner  # noqa: E402
from rekall.sim.codex_backend import CodexBackend  # noqa: E402

FILLER = "context filler " * 8000
TIMEOUT_S = 120


async def _next(session: Any, kind: type) -> Any:
    while not isinstance(event := await session.next_event(), kind):
        pass
    return event


async def one_run(binary: Path, index: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rekall-verify-") as scratch, anyio.fail_after(TIMEOUT_S):
        backend = CodexBackend(binary, Path(scratch))
        async with SimulatedOwner(backend) as owner:
            backend.mock.queue_text(FILLER)
            turn = await backend.user_turn("Please fill the context for the measurement.")
            await owner.wait_until(lambda _: derive_facts(backend.snapshot()).idle and any(
                t["turnId"] == turn["id"] and t["status"] == "completed" for t in backend.snapshot()["turns"]),
                timeout=TIMEOUT_S)
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


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return statistics.median(values) if values else None

    return {key: median(key) for key in
            ("contextTokensBefore", "contextTokensAfter", "reduction", "compactionDurationMs", "continuationDelayMs")}


async def verify(binary: Path, runs: int) -> dict[str, Any]:
    results = [await one_run(binary, index) for index in range(1, runs + 1)]
    return {
        "engine": {"codexVersion": binary_identity(binary).version, "binary": str(binary)},
        "model": "local loopback mock of the Responses API (rekall.sim.mock_model); tokens = request bytes / 4",
        "path": "rekall.adapters follower -> Unix socket -> rekall.sim owner -> codex app-server relay",
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "runs": results,
        "median": summarise(results),
        "allContinuationsReachedModel": all(r["continuationReachedModel"] for r in results),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--binary", type=Path, help="codex launcher (default: REKALL_TEST_CODEX or the install cache)")
    args = parser.parse_args(argv)
    binary, reason = (args.binary, str(args.binary)) if args.binary else find_real_codex()
    if binary is None:
        print(f"verify_codex: {reason}", file=sys.stderr)
        return 2
    result = anyio.run(verify, binary, args.runs)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"Codex {result['engine']['codexVersion']} (real engine), local mock model")
        print("run  before  after  reduction  compaction ms  continuation ms")
        for r in result["runs"]:
            print(f"{r['run']:>3}  {r['contextTokensBefore']:>6}  {r['contextTokensAfter']:>5}  "
                  f"{r['reduction']:>9.1%}  {r['compactionDurationMs']:>13}  {r['continuationDelayMs']:>15}")
    return 0 if result["allContinuationsReachedModel"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
