"""Seeded randomized fault runs: random faults at random moments, each run one full job.

A run is planned from its seed alone (``plan_run``), so any run can be replayed with
``bench/chaos.py --seed S --only I``. The plan picks the thread's behaviour (busy or idle,
patches or snapshots, telemetry after compaction, how long compaction takes), the handoff,
faults armed on the owner's next compact or start-turn request (router errors, slow, missing
or bad replies, dropped connections), and a timeline of faults at random moments
(disconnects, broken frames, revision gaps, inapplicable patches, the owner moving or going
away, a protocol bump, new user input, a cancel, a SIGKILL of the worker, the worker killed
and started again for the same job); some runs start two workers for the job at once.

A planned fault may miss: a timed fault can come after the job ended, an armed one may
never fire (its request is never sent). The tally counts the faults that *landed* (a timed
fault while a worker of the job ran and the job had not ended; an armed fault that fired)
apart from those planned.

Every run is then audited (``tests.chaos.harness.audit``): at most one compact and one
start-turn request, a terminal state reached through rows of the transition table, an intact
journal and handoff, and a status the owner does not contradict.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from rekall.kernel.errors import RekallError
from tests.chaos.harness import COMPACT, NEWER_STATE, ROUTER_ERRORS, START_TURN, ChaosJob, Audit, audit
from tests.chaos.ledger import Ledger
from tests.mcpkit import HANDOFF

Action = Callable[[ChaosJob], Any]

GARBAGE = ("zero_length", "oversize", "invalid_utf8", "invalid_json")


@attrs.frozen
class Fault:
    kind: str
    action: Action
    #: For a fault armed on the owner's next request: that request's method.
    method: str | None = None


@attrs.frozen
class Plan:
    seed: str
    sim: dict[str, Any]
    env: dict[str, str]
    handoff: dict[str, Any] | None
    armed: tuple[Fault, ...]
    timeline: tuple[tuple[float, Fault], ...]  # (seconds after scheduling, fault)
    two_workers: bool = False  # the job is started with two workers at once

    @property
    def fault_kinds(self) -> list[str]:
        return ([f.kind for f in self.armed] + [f.kind for _, f in self.timeline if not f.kind.startswith("(")]
                + (["two workers for one job"] if self.two_workers else []))


def _armed_fault(rng: random.Random, method: str) -> Fault:
    fault = _armed_action(rng, method)
    return attrs.evolve(fault, method=method)


def _armed_action(rng: random.Random, method: str) -> Fault:
    name = "compact" if method == COMPACT else "start-turn"
    choice = rng.randrange(6)
    if choice == 0:
        error = rng.choice(ROUTER_ERRORS)
        return Fault(f"{error} on {name}", lambda job: job.sim.fail_next(method, error))
    if choice == 1:
        delay = round(rng.uniform(0.05, 1.5), 3)
        return Fault(f"slow {name} reply", lambda job: job.sim.delay_next(method, delay))
    if choice == 2:
        return Fault(f"no {name} reply", lambda job: job.sim.silence_next(method))
    if choice == 3:
        deliver = rng.random() < 0.5
        return Fault(f"connection dropped on {name}", lambda job: job.sim.drop_connection_on(method, deliver=deliver))
    if choice == 4:
        bad = {"ok": False} if method == COMPACT else {"ok": True}
        return Fault(f"bad ack on {name}", lambda job: job.sim.reply_next(method, bad))
    return Fault(f"slow {name} reply", lambda job: job.sim.delay_next(method, 0.2))  # short delays: twice as likely


def _kill(job: ChaosJob) -> None:
    job.kill_worker()


def _restart(job: ChaosJob) -> None:
    job.restart_worker()


def _cancel(job: ChaosJob) -> None:
    try:
        job.cancel()
    except RekallError:
        pass  # e.g. the job ended meanwhile: a real user sees the same answer


#: Faults at a random moment, by kind, with their relative weights (the order is part of the
#: seed's meaning: keep it).
TIMED_WEIGHTS = {
    "disconnect": 6, "owner moves": 4, "garbage frame": 4, "inapplicable patch": 3, "revision gap": 3,
    "foreign state broadcast": 2, "new user input": 2, "steering": 1, "turn stopped": 1, "approval request": 2,
    "cancel": 3, "worker SIGKILL": 3, "protocol version bump": 1, "owner gone for good": 1, "telemetry changes": 2,
}
TIMED_ACTIONS: dict[str, Action] = {
    "disconnect": lambda job: job.sim.disconnect_all(),
    "owner moves": lambda job: job.sim.move_owner(),
    "inapplicable patch": lambda job: job.sim.send_inapplicable_patch(),
    "revision gap": lambda job: (job.sim.drop_updates(1), job.sim.cosmetic_edit()),
    "foreign state broadcast": lambda job: job.sim.broadcast_foreign_state(),
    "new user input": lambda job: job.sim.user_turn("new input"),
    "steering": lambda job: job.sim.steer("steer"),
    "turn stopped": lambda job: job.sim.stop_turn("interrupted"),
    "approval request": lambda job: job.sim.add_request(),
    "cancel": _cancel,
    "worker SIGKILL": _kill,
    "protocol version bump": lambda job: job.sim.set_option("state_version", NEWER_STATE),
    "owner gone for good": lambda job: (job.sim.set_option("no_owner", True), job.sim.disconnect_all()),
}


def _timed_fault(rng: random.Random) -> Fault:
    kind = rng.choices(list(TIMED_WEIGHTS), list(TIMED_WEIGHTS.values()))[0]
    if kind == "garbage frame":
        frame = rng.choice(GARBAGE)
        return Fault(f"garbage frame: {frame}", lambda job: job.sim.send_garbage(frame))
    if kind == "telemetry changes":
        tokens = rng.choice([None, 5_000, 50_000, 95_000])
        return Fault(kind, lambda job: job.sim.set_telemetry(tokens))
    return Fault(kind, TIMED_ACTIONS[kind])


def plan_run(seed: int, index: int) -> Plan:
    tag = f"{seed}:{index}"
    rng = random.Random(tag)
    runtime = rng.choice(["idle", "active"])
    sim = {
        "runtime": runtime,
        "mode": rng.choice(["patches", "patches", "patches", "snapshots"]),
        "telemetry_after": rng.choice(["default"] * 5 + ["low", "missing", "stale", "exact", "degrades"]),
        "telemetry_step_s": round(rng.uniform(0.01, 0.3), 3),
        "compaction_delay_s": round(rng.uniform(0.02, 0.6), 3),
        "compact_ack_delay_s": 0.0 if rng.random() < 0.8 else round(rng.uniform(0.0, 0.3), 3),
        "turn_duration_s": rng.choice([0.05, 0.3, None]),
    }
    env = {"REKALL_IDLE_STABLE_MS": str(rng.choice([30, 60, 120, 250]))}
    resume = rng.random() < 0.75
    handoff = None if rng.random() < 0.1 else {**HANDOFF, "resume": resume, "nextStep": HANDOFF["nextStep"] if resume
                                                  else ""}
    armed = tuple(_armed_fault(rng, method) for method in (COMPACT, START_TURN) if rng.random() < 0.25)
    timeline = []
    busy_for = 0.0
    if runtime == "active":  # the agent's turn ends at some point (not a fault)
        busy_for = round(rng.uniform(0.0, 1.0), 3)
        timeline.append((busy_for, Fault("(turn ends)", lambda job: job.sim.complete_turn("completed"))))
    # Roughly how long a clean run lasts (worker start, two debounces, the compaction), so that
    # most faults land while the job is still running.
    lasts = 0.3 + busy_for + 2 * int(env["REKALL_IDLE_STABLE_MS"]) / 1000 + sim["compaction_delay_s"]
    timeline += [(round(rng.uniform(0.0, 1.2 * lasts), 3), _timed_fault(rng))
                 for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4]))]
    # Drawn after everything above, so that earlier draws keep their meaning for a seed.
    two_workers = rng.random() < 0.05
    if rng.random() < 0.05:
        timeline.append((round(rng.uniform(0.0, lasts), 3), Fault("worker restarted", _restart)))
    return Plan(tag, sim, env, handoff, armed, tuple(sorted(timeline, key=lambda entry: entry[0])), two_workers)


@attrs.frozen
class RunResult:
    audit: Audit
    #: The planned faults that landed (see the module's docstring), by kind.
    landed: tuple[str, ...]


def run_plan(plan: Plan, workdir: Path) -> RunResult:
    landed: list[str] = []
    with ChaosJob(workdir, env=plan.env, **plan.sim) as job:
        for fault in plan.armed:
            fault.action(job)
        job.schedule(plan.handoff, two_workers=plan.two_workers)
        if plan.two_workers:
            landed.append("two workers for one job")
        start = time.monotonic()
        for at, fault in plan.timeline:
            time.sleep(max(0.0, start + at - time.monotonic()))  # the random moment is the point here
            live = job.live()
            fault.action(job)
            if live and not fault.kind.startswith("("):
                landed.append(fault.kind)
        job.finish(timeout=60)
        for fault in plan.armed:
            method = fault.method
            assert method is not None
            if job.sim.call(lambda owner: owner.armed_faults(method)) == 0:  # it fired
                landed.append(fault.kind)
        return RunResult(audit(job), tuple(landed))


def run_many(seed: int, runs: int, *, parallel: int = 4, only: int | None = None,
             on_run: Callable[[int, Plan, RunResult], None] | None = None) -> Ledger:
    """Run ``runs`` planned runs (or just run ``only``), ``parallel`` at a time; tally them."""
    ledger = Ledger()
    indices = [only] if only is not None else list(range(runs))

    def one(index: int) -> None:
        plan = plan_run(seed, index)
        with tempfile.TemporaryDirectory(prefix="rk-chaos-") as tmp:
            try:
                result = run_plan(plan, Path(tmp))
            except Exception as exc:  # a harness failure is a finding too, never silently dropped
                ledger.problem(f"run {plan.seed}: the harness failed: {type(exc).__name__}: {exc}")
                return
        for kind in plan.fault_kinds:
            ledger.fault(kind)
        for kind in result.landed:
            ledger.landed_fault(kind)
        ledger.job(result.audit, f"run {plan.seed}")
        if on_run is not None:
            on_run(index, plan, result)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(one, indices))
    return ledger
