"""Two schedules for one thread from two environments, at the same moment: one continuation at most.

    python bench/lock_race.py --pairs 100 --json

Per pair: one simulated owner (``rekall.sim``, a real Unix socket) with one idle thread, and two
``service.schedule`` calls (what the MCP tool and ``rekall schedule`` run), released together from
two threads, each with its own ``HOME``, ``CODEX_HOME`` and ``REKALL_JOBS_DIR``. Whatever each
scheduled runs to its end in a real detached worker. The owner then says how many continuations
(start-turn requests) and compact requests the thread received. The figure that must be 0 is
``threadsWithMoreThanOneContinuation``; ``bothScheduled`` counts the pairs where the lock let two
jobs in (each environment resolving its own lock folder did, before the lock moved to the
account's home).

Exit status 1 when any thread got more than one continuation or a pair could not be run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rekall.usecases import service  # noqa: E402
from rekall.sim import start_sim_in_thread  # noqa: E402
from tests.chaos.harness import COMPACT, FAST, START_TURN, wait_for_exit  # noqa: E402
from tests.mcpkit import HANDOFF, job_env  # noqa: E402

WORKER_TIMEOUT_S = 60


def _environment(sim_env: dict[str, str], root: Path) -> dict[str, str]:
    """One side of the pair: its own home, Codex folder and jobs directory."""
    home = root / "home"
    home.mkdir(parents=True, mode=0o700)
    return job_env(sim_env, root / "jobs", **FAST, HOME=str(home), CODEX_HOME=str(root / "codex"))


def race_one(workdir: Path) -> dict[str, Any]:
    sim = start_sim_in_thread()
    try:
        envs = [_environment(sim.env, workdir / side) for side in ("a", "b")]
        start = threading.Barrier(2)
        answers: list[Any] = [None, None]

        def schedule(side: int) -> None:
            start.wait(timeout=10)
            try:
                answers[side] = asyncio.run(service.schedule(sim.thread_id, HANDOFF, env=envs[side]))
            except Exception as exc:  # a refusal is an answer too: say what it was
                answers[side] = exc

        threads = [threading.Thread(target=schedule, args=(side,)) for side in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        scheduled = [a for a in answers if isinstance(a, dict) and not a.get("alreadyScheduled")]
        for answer in scheduled:
            if not wait_for_exit(answer["pid"], WORKER_TIMEOUT_S):
                raise RuntimeError(f"worker {answer['pid']} still ran after {WORKER_TIMEOUT_S} s")
        states = [service.status_reply(sim.thread_id, env=envs[n])["state"] for n, a in enumerate(answers)
                  if isinstance(a, dict) and not a.get("alreadyScheduled")]
        return {"scheduled": len(scheduled),
                "refused": [f"{type(a).__name__}: {a}" for a in answers if isinstance(a, Exception)],
                "continuations": sim.call(lambda owner: len(owner.requests_for(START_TURN))),
                "compacts": sim.call(lambda owner: len(owner.requests_for(COMPACT))),
                "states": states}
    finally:
        sim.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=2, help="pairs at a time")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    def one(index: int) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="rk-race-") as tmp:
            try:
                return race_one(Path(tmp))
            except Exception as exc:  # a harness failure is a finding, never dropped
                return {"problem": f"pair {index}: {type(exc).__name__}: {exc}"}

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        results = list(pool.map(one, range(args.pairs)))
    runs = [r for r in results if "problem" not in r]
    states: dict[str, int] = {}
    for run in runs:
        for state in run["states"]:
            states[state] = states.get(state, 0) + 1
    report = {
        "pairs": args.pairs,
        "seconds": round(time.monotonic() - started, 1),
        "threadsWithMoreThanOneContinuation": sum(r["continuations"] > 1 for r in runs),
        "threadsWithMoreThanOneCompactRequest": sum(r["compacts"] > 1 for r in runs),
        "bothScheduled": sum(r["scheduled"] == 2 for r in runs),
        "oneScheduledOneAlreadyScheduled": sum(r["scheduled"] == 1 and not r["refused"] for r in runs),
        "refusedSchedules": sum(len(r["refused"]) for r in runs),
        "jobStates": dict(sorted(states.items())),
        "problems": [r["problem"] for r in results if "problem" in r],
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key}: {value}")
    return 1 if report["threadsWithMoreThanOneContinuation"] or report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
