"""``rekall demo``: one complete job against the built-in simulated owner.

Everything is real except the extension: the simulated owner speaks the real protocol on a
real Unix socket in a private temporary directory, the job goes through the same service
call the MCP tool ``schedule_compaction`` makes, a detached worker process carries it, and
the journal and explanation are the ones a real job produces. Nothing touches the network or
your own Codex installation, and nothing is left running afterwards.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from rekall.usecases import service
from rekall.kernel.errors import RekallError
from rekall.store.jobs_dirs import UNRECORDED

DEMO_HANDOFF = {
    "summary": (
        "Task: make the parser accept trailing commas. Done: grammar change in parse.py, 14 new "
        "tests, all green. Decision: keep the old error messages. Remaining: update the changelog."
    ),
    "preserve": ["parse.py holds the grammar", "run tests with `pytest -q tests/parser`"],
    "discard": ["the exploratory benchmark logs", "the superseded regex approach"],
    "nextStep": "Add the changelog entry for trailing commas, run the parser tests once, then stop.",
    "resume": True,
}

#: The simulated agent is still finishing its answer when it schedules, as a real one is.
_TURN_ENDS_AFTER_S = 0.8
_DEMO_TIMEOUT_S = 14.0


def _wait_for_worker_exit(pid: int, timeout_s: float) -> None:
    """The worker exits by itself after the terminal state; make sure, so nothing lingers."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        time.sleep(0.02)


def run_demo(*, as_json: bool = False, keep: bool = False, console: Console | None = None) -> int:
    from rekall.surfaces.explain import build_explanation, print_explanation
    from rekall.surfaces.render import watch_job
    from rekall.sim import start_sim_in_thread
    from rekall.store import JobStore

    console = console or Console()
    workdir = tempfile.mkdtemp(prefix="rekall-demo-")  # mkdtemp makes it 0700
    jobs_dir = os.path.join(workdir, "jobs")
    try:
        # A thread 90% full whose agent is finishing its turn; compaction takes a moment
        # and brings it down to 10%.
        with start_sim_in_thread(runtime="active", tokens=90_000, window=100_000, compaction_delay_s=1.5,
                                 turn_duration_s=None) as sim:
            # Its folder is temporary: not recorded for the SessionStart hook (rekall.store.jobs_dirs).
            env = {**os.environ, **sim.env, "REKALL_JOBS_DIR": jobs_dir, UNRECORDED: "1"}
            for name in ("REKALL_IDLE_STABLE_MS", "REKALL_DEADLINE_S"):
                env.pop(name, None)  # the demo shows the real defaults
            env["REKALL_DEADLINE_S"] = str(_DEMO_TIMEOUT_S)
            if not as_json:
                console.print(Panel.fit(
                    f"Simulated extension owner on {sim.socket_path}\n"
                    f"thread {sim.thread_id}: 90,000 of 100,000 tokens in use, agent turn in progress",
                    title="rekall demo"))
            scheduled = asyncio.run(service.schedule(sim.thread_id, DEMO_HANDOFF, env=env))
            # The agent finishes its turn after scheduling, as the tool description tells it to.
            turn_ends = threading.Timer(_TURN_ENDS_AFTER_S, sim.complete_turn, args=("completed",))
            turn_ends.start()
            final: Any = watch_job(lambda: service.status_reply_with_trail(sim.thread_id, env=env), console,
                                   quiet=as_json, max_s=_DEMO_TIMEOUT_S)
            _wait_for_worker_exit(scheduled["pid"], 5.0)
        explanation = build_explanation(JobStore.open(env), scheduled["jobId"])
        if as_json:
            import json

            print(json.dumps(final, indent=2, ensure_ascii=False))
        else:
            console.print()
            print_explanation(explanation, console, show_journal=keep)  # its path is gone without --keep
            if keep:
                console.print("The demo's jobs are kept; to look at them:")
                console.print(Text(f"  REKALL_JOBS_DIR={jobs_dir} rekall history"), soft_wrap=True)
            else:
                console.print(Text("The demo's private directory was removed; `rekall demo --keep` keeps it.",
                                   style="dim"))
        return 0 if final.get("state") == "resumed" else 1
    except RekallError as exc:
        console.print(f"[red]demo failed: {exc}[/red]")
        return 1
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
