"""``rekall sim``: run the simulated owner in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from rekall.kernel.errors import UsageError
from rekall.sim.owner import SimulatedOwner
from rekall.sim.protocol import DEFAULT_GENERATION, TABLES


def _backend(name: str) -> Any:
    if name == "scripted":
        return None  # SimulatedOwner's default
    # The codex backend drives the pinned real Codex against a loopback mock model: development
    # tooling that lives in tests/support/ (a checkout and the sdist have it, the wheel does not).
    try:
        from tests.support.codex_backend import create_backend  # type: ignore[import-not-found]
    except ImportError:
        raise UsageError("the codex backend is a development tool; it runs from a rekall checkout, "
                         "not from the installed package",
                         hint="use --backend scripted, or in a checkout run scripts/install-codex, then "
                              "python -m rekall sim --backend codex") from None
    return create_backend()


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with SimulatedOwner(_backend(getattr(args, "backend", "scripted")),
                              socket_path=getattr(args, "socket", None),
                              generation=getattr(args, "generation", None) or DEFAULT_GENERATION) as sim:
        info = {"socket": str(sim.socket_path), "threadId": sim.thread_id, "ownerId": sim.owner_id,
                "generation": sim.generation, "env": sim.env}
        if getattr(args, "json", False):
            sys.stdout.write(json.dumps(info) + "\n")
        else:
            sys.stdout.write(f"rekall sim listening on {info['socket']}\n"
                             f"thread id: {info['threadId']}\n"
                             f"extension generation: {info['generation']}\n"
                             f"use it with: REKALL_PIPE={info['socket']} CODEX_THREAD_ID={info['threadId']}\n"
                             "press Ctrl-C to stop\n")
        sys.stdout.flush()
        await stop.wait()


def run_sim(args: argparse.Namespace) -> int:
    generation = getattr(args, "generation", None) or DEFAULT_GENERATION
    if generation not in TABLES:  # before anything starts: a usage error, not a failed run
        raise UsageError(f"sim: unknown generation {generation[:40]!r}",
                         hint=f"choose one of {', '.join(TABLES)} (`rekall protocol` lists them)")
    asyncio.run(_serve(args))
    return 0
