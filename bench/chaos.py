"""The full-size exactly-once run: seeded random faults at random moments, one full job each.

    python bench/chaos.py --runs 1000 --seed 20261130 --json

Each run is a real job (``service.schedule``, a detached worker process, the simulated owner
on a real Unix socket) with faults planned from ``(seed, run index)`` alone; see
``tests/chaos/randomized.py``. Every run is audited: at most one compact and one start-turn
request reaching the router (refused ones count), a terminal state reached through rows of
the transition table, an intact journal and handoff, no lock left by a worker, a status the
owner does not contradict. The tally counts the faults injected and, apart, those that
landed on a live job. ``--only I`` replays run I of the seed.

Exit status 1 when any run broke a rule (duplicates, data lost, or another problem).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chaos.randomized import run_many  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--parallel", type=int, default=4, help="runs at a time (each: a simulator thread and a "
                                                                 "worker process)")
    parser.add_argument("--only", type=int, help="replay just this run index of the seed")
    parser.add_argument("--json", action="store_true", help="print the tally as JSON")
    args = parser.parse_args()
    logging.getLogger("rekall").setLevel(logging.ERROR)  # the reaper's warnings are part of the runs, not news

    done = 0
    lock = threading.Lock()

    def progress(index: int, plan: object, result: object) -> None:
        nonlocal done
        with lock:
            done += 1
            if done % 50 == 0:
                print(f"  {done} runs done", file=sys.stderr, flush=True)

    started = time.monotonic()
    tally = run_many(args.seed, args.runs, parallel=args.parallel, only=args.only, on_run=progress)
    elapsed = time.monotonic() - started
    if args.json:
        print(json.dumps({"seed": args.seed, "runs": args.runs if args.only is None else 1,
                          "parallel": args.parallel, "seconds": round(elapsed, 1), **tally.to_json()}, indent=2))
    else:
        print(f"seed {args.seed}, {tally.jobs} runs in {elapsed:.0f} s")
        print("\n".join(tally.lines()))
    return 1 if tally.problems or tally.duplicate_requests or tally.data_lost else 0


if __name__ == "__main__":
    sys.exit(main())
