"""How long ``probe`` takes to refuse a thread nobody owns, with an extension router listening
and without one (the baseline, in the same run).

    python bench/unknown_thread.py [--runs N] [--json]

With a router, owner discovery answers ``no-client-found``; while the generation is undecided
(no installed extension table), rekall then waits :data:`rekall.adapters.extension.platform.OWNER_ANSWER_S`
for an owner to answer its follow, where it used to wait the whole snapshot timeout (12 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rekall.usecases import service  # noqa: E402
from rekall.kernel.errors import RekallError  # noqa: E402
from rekall.sim import start_sim_in_thread  # noqa: E402

UNKNOWN = "019a0000-0000-7000-8000-0000000000aa"


def _refusal_s(env: dict[str, str]) -> float:
    start = time.monotonic()
    try:
        asyncio.run(service.probe(UNKNOWN, env=env))
    except RekallError:
        return time.monotonic() - start
    raise SystemExit("the unknown thread was not refused")


def measure(runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        base = {**os.environ, "HOME": home, "CODEX_HOME": home, "REKALL_JOBS_DIR": f"{home}/jobs"}
        without = [_refusal_s({**base, "REKALL_PIPE": f"{home}/no-router.sock"}) for _ in range(runs)]
        with start_sim_in_thread() as sim:
            with_router = [_refusal_s({**base, **sim.env}) for _ in range(runs)]
    return {"runs": runs, "withoutRouterMedianS": round(statistics.median(without), 3),
            "withRouterMedianS": round(statistics.median(with_router), 3),
            "withRouterMaxS": round(max(with_router), 3),
            "ratio": round(statistics.median(with_router) / statistics.median(without), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.runs)
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
