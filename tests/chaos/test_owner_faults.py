"""Owner faults, injected by the simulated owner while a real job is in each state.

The expected table comes first and comes from the design, not from running the code:

* A router error that proves non-delivery (no-client-found, request-version-mismatch,
  no-handler-for-request) fails the job with that code; the outcome is known.
* A router error after which the owner may have acted (client-disconnected,
  request-timeout), a bad acknowledgement, a missing reply, or a connection lost while a
  request waits for its answer fails the job with ``outcomeMayBeUnknown``.
* A completed compaction seen after the acknowledgement was lost proves acceptance, so the
  job goes on; nothing is ever sent twice.
* While nothing is in flight, disconnects, broken frames, revision gaps, inapplicable
  patches, foreign broadcasts and the owner moving are survived: reconnect or resync, then
  continue. An unknown protocol version fails the job (``protocol_version_unsupported``).
* An owner that is gone for good fails the job after the bounded reconnect attempts.

Each case runs a full job (``service.schedule``, the detached worker process, the simulated
owner). Cases of one stage run a few at a time, in threads, to keep the suite short.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.chaos.harness import COMPACT, NEWER_STATE, NOT_DELIVERED, ROUTER_ERRORS, START_TURN, ChaosJob, audit
from tests.chaos.ledger import LEDGER

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

Script = Callable[[ChaosJob], Any]


def nothing(job: ChaosJob) -> None:
    return None


@attrs.frozen
class Stage:
    """How a job is held in ``state`` for the fault (``reach`` waits until it is there), and
    let go afterwards. Without ``reach`` the fault is armed before scheduling instead."""

    state: str
    reach: Callable[[ChaosJob, int], object] | None = None
    sim: dict[str, Any] = attrs.field(factory=dict)
    env: dict[str, str] = attrs.field(factory=dict)
    arm: Script = nothing
    release: Script = nothing


STAGES = {
    # no hold: the fault is armed on the owner and fires on the request itself
    "-": Stage("-", sim={"compaction_delay_s": 0.5}),
    # the agent's turn is still running; it ends after the fault
    "W": Stage("waiting_for_idle", lambda job, follows: job.wait_followed(follows), sim={"runtime": "active"},
               release=lambda job: job.sim.complete_turn("completed")),
    # the owner compacts at once but answers 0.8 s later; the compaction takes 2 s
    "R": Stage("requesting", lambda job, follows: job.wait_sent(COMPACT), sim={"compaction_delay_s": 2.0},
               arm=lambda job: job.sim.delay_next(COMPACT, 0.8)),
    "A": Stage("accepted", lambda job, follows: job.wait_state({"accepted"}),
               sim={"compaction_delay_s": 1.0}),
    "WR": Stage("waiting_for_resume_idle", lambda job, follows: job.wait_state({"waiting_for_resume_idle"}),
                env={"REKALL_IDLE_STABLE_MS": "1500"}),
    # the owner starts the turn at once but answers 0.8 s later
    "RS": Stage("resuming", lambda job, follows: job.wait_sent(START_TURN),
                arm=lambda job: job.sim.delay_next(START_TURN, 0.8)),
}


@attrs.frozen
class Case:
    name: str
    stage: str
    inject: Script
    expect: tuple[str, str | None, bool]  # state, errorCode, outcomeMayBeUnknown
    requests: tuple[int, int]  # compact, start-turn requests the owner receives
    sim: dict[str, Any] = attrs.field(factory=dict)
    env: dict[str, str] = attrs.field(factory=dict)


RESUMED = ("resumed", None, False)
#: The production request timeout (10 s) with the suite's 8 s deadline: a resume that waits
#: for a stale reply would time out.
SLOW_TIMEOUTS = {"REKALL_REQUEST_TIMEOUT_S": "10"}
#: Room for the request timeout to fire before the deadline, even at the 10 s default.
LONG_DEADLINE = {"REKALL_DEADLINE_S": "30"}


def lost(unknown: bool) -> tuple[str, str, bool]:
    return ("failed", "connection_lost", unknown)


def bump(then: Script = nothing) -> Script:
    def inject(job: ChaosJob) -> None:
        job.sim.set_option("state_version", NEWER_STATE)
        then(job)
    return inject


def gap_then(change: Script) -> Script:
    """Drop one update, then make another: the follower must see the revision gap and resync."""
    def inject(job: ChaosJob) -> None:
        job.sim.drop_updates(1)
        change(job)
    return inject


def owner_gone(job: ChaosJob) -> None:
    job.sim.set_option("no_owner", True)
    job.sim.disconnect_all()


def after_compaction_completes(then: Script) -> Script:
    def inject(job: ChaosJob) -> None:
        job.sim.wait_until(lambda owner: any(
            item.get("completed") is True and item.get("id") != "old"
            for turn in owner.backend.state["turns"] for item in turn["items"]
            if item.get("type") == "contextCompaction"), timeout=10)
        then(job)
    return inject


def _router_error_cases() -> list[Case]:
    cases = []
    for error in ROUTER_ERRORS:
        known = error in NOT_DELIVERED
        for method, requests in ((COMPACT, (1, 0)), (START_TURN, (1, 1))):
            short = "compact" if method == COMPACT else "start-turn"
            cases.append(Case(f"{error} on {short}", "-", lambda job, m=method, e=error: job.sim.fail_next(m, e),
                              ("failed", error, not known), requests))
    return cases


CASES: list[Case] = [
    *_router_error_cases(),
    Case("bad ack on compact", "-", lambda job: job.sim.reply_next(COMPACT, {"ok": False}),
         ("failed", "bad_ack", True), (1, 0)),
    Case("bad ack on start-turn", "-", lambda job: job.sim.reply_next(START_TURN, {"ok": True}),
         ("failed", "bad_ack", True), (1, 1)),
    Case("slow compact reply", "-", lambda job: job.sim.delay_next(COMPACT, 0.3), RESUMED, (1, 1)),
    Case("slow start-turn reply", "-", lambda job: job.sim.delay_next(START_TURN, 0.3), RESUMED, (1, 1)),
    # The completion proves acceptance: the late or missing reply must not hold up the resume.
    Case("compact reply slower than the compaction", "-", lambda job: job.sim.delay_next(COMPACT, 30), RESUMED,
         (1, 1), sim={"compaction_delay_s": 0.05}, env=SLOW_TIMEOUTS),
    Case("no compact reply, compaction seen", "-", lambda job: job.sim.silence_next(COMPACT), RESUMED, (1, 1),
         sim={"compaction_delay_s": 0.05}, env=SLOW_TIMEOUTS),
    Case("compact reply past the router timeout", "-", lambda job: job.sim.delay_next(COMPACT, 30),
         ("failed", "request-timeout", True), (1, 0), sim={"compaction_delay_s": 60}, env=LONG_DEADLINE),
    Case("no compact reply, no compaction seen", "-", lambda job: job.sim.silence_next(COMPACT),
         ("failed", "request_timeout", True), (1, 0), sim={"compaction_delay_s": 60}, env=LONG_DEADLINE),
    Case("no start-turn reply", "-", lambda job: job.sim.silence_next(START_TURN),
         ("failed", "request_timeout", True), (1, 1), env=LONG_DEADLINE),
    Case("connection dropped on compact, not delivered", "-", lambda job: job.sim.drop_connection_on(COMPACT),
         ("failed", "outcome_unknown", True), (1, 0)),
    Case("connection dropped on compact, delivered", "-",
         lambda job: job.sim.drop_connection_on(COMPACT, deliver=True), RESUMED, (1, 1)),
    Case("connection dropped on start-turn", "-", lambda job: job.sim.drop_connection_on(START_TURN), lost(True),
         (1, 1)),
    # waiting for idle: nothing in flight, everything is survived
    Case("disconnect", "W", lambda job: job.sim.disconnect_all(), RESUMED, (1, 1)),
    Case("owner moves", "W", lambda job: job.sim.move_owner(), RESUMED, (1, 1)),
    *[Case(f"garbage frame: {kind}", "W", lambda job, k=kind: job.sim.send_garbage(k), RESUMED, (1, 1))
      for kind in ("zero_length", "oversize", "invalid_utf8", "invalid_json")],
    Case("inapplicable patch", "W", lambda job: job.sim.send_inapplicable_patch(), RESUMED, (1, 1)),
    Case("revision gap", "W", gap_then(lambda job: job.sim.complete_turn("completed")), RESUMED, (1, 1)),
    Case("foreign state broadcast", "W", lambda job: job.sim.broadcast_foreign_state(), RESUMED, (1, 1)),
    Case("protocol version bump", "W", bump(), ("failed", "protocol_version_unsupported", False), (0, 0)),
    Case("owner gone for good", "W", owner_gone, lost(False), (0, 0)),
    # requesting: the acknowledgement is lost, the completion proves acceptance
    Case("disconnect", "R", lambda job: job.sim.disconnect_all(), RESUMED, (1, 1)),
    Case("garbage frame: invalid_json", "R", lambda job: job.sim.send_garbage("invalid_json"), RESUMED, (1, 1)),
    Case("owner moves", "R", lambda job: job.sim.move_owner(), RESUMED, (1, 1)),
    # accepted: the compaction is running
    Case("disconnect", "A", lambda job: job.sim.disconnect_all(), RESUMED, (1, 1)),
    Case("owner moves", "A", lambda job: job.sim.move_owner(), RESUMED, (1, 1)),
    Case("garbage frame: oversize", "A", lambda job: job.sim.send_garbage("oversize"), RESUMED, (1, 1)),
    Case("inapplicable patch", "A", lambda job: job.sim.send_inapplicable_patch(), RESUMED, (1, 1)),
    Case("revision gap", "A", gap_then(after_compaction_completes(lambda job: job.sim.cosmetic_edit())), RESUMED,
         (1, 1)),
    Case("protocol version bump", "A", bump(), ("failed", "protocol_version_unsupported", True), (1, 0)),
    # waiting to resume: the compaction is done, nothing in flight
    Case("disconnect", "WR", lambda job: job.sim.disconnect_all(), RESUMED, (1, 1)),
    Case("owner moves", "WR", lambda job: job.sim.move_owner(), RESUMED, (1, 1)),
    Case("garbage frame: invalid_utf8", "WR", lambda job: job.sim.send_garbage("invalid_utf8"), RESUMED, (1, 1)),
    Case("protocol version bump", "WR", bump(lambda job: job.sim.cosmetic_edit()),
         ("failed", "protocol_version_unsupported", False), (1, 0)),
    # resuming: the start-turn request waits for its answer
    Case("disconnect", "RS", lambda job: job.sim.disconnect_all(), lost(True), (1, 1)),
    Case("garbage frame: zero_length", "RS", lambda job: job.sim.send_garbage("zero_length"), lost(True), (1, 1)),
    Case("owner moves", "RS", lambda job: job.sim.move_owner(), RESUMED, (1, 1)),
]


@attrs.frozen
class Observed:
    outcome: tuple[str, str | None, bool]
    requests: tuple[int, int]
    problems: tuple[str, ...]


def run_case(case: Case, workdir: Path) -> Observed:
    try:
        return _run_case(case, workdir)
    except Exception as exc:  # reported with the other mismatches, not as the first one only
        return Observed(("error", None, False), (-1, -1), (f"{type(exc).__name__}: {exc}",))


def _run_case(case: Case, workdir: Path) -> Observed:
    stage = STAGES[case.stage]
    with ChaosJob(workdir, env={**stage.env, **case.env}, **{**stage.sim, **case.sim}) as job:
        stage.arm(job)
        if stage.reach is None:
            case.inject(job)
        follows = job.sim.follow_count
        job.schedule()
        if stage.reach is not None:
            stage.reach(job, follows)
            assert job.status()["state"] == stage.state, f"{case.name}: not held in {stage.state}"
            case.inject(job)
        stage.release(job)
        job.finish(timeout=40)
        result = audit(job)
        LEDGER.fault(case.name, on_live_job=True)
        LEDGER.job(result, f"{case.name} ({case.stage})")
        return Observed((result.state, result.error_code, bool(result.outcome_may_be_unknown)),
                        job.job_counts(), (*result.data_lost, *result.problems))


@pytest.mark.parametrize("stage", list(STAGES))
def test_each_owner_fault_ends_in_the_designed_state(tmp_path: Path, stage: str):
    cases = [case for case in CASES if case.stage == stage]
    with ThreadPoolExecutor(max_workers=4) as pool:
        observed = list(pool.map(lambda pair: run_case(pair[1], tmp_path / f"case{pair[0]}"), enumerate(cases)))
    wrong = [f"{case.name}: expected {case.expect} with {case.requests} requests, got {seen.outcome} with "
             f"{seen.requests}; problems {list(seen.problems)}"
             for case, seen in zip(cases, observed)
             if (seen.outcome, seen.requests, seen.problems) != (case.expect, case.requests, ())]
    assert not wrong, "\n".join(wrong)


# --- the table in docs/reliability.md ----------------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
WHEN = {"-": "on the request", "W": "waiting_for_idle", "R": "requesting", "A": "accepted",
        "WR": "waiting_for_resume_idle", "RS": "resuming"}


def fault_table_markdown() -> str:
    """The expected outcomes as a Markdown table (docs/reliability.md holds exactly this)."""
    rows = ["| fault | when | ends | errorCode | outcomeMayBeUnknown | compact, start-turn sent |",
            "|---|---|---|---|---|---|"]
    for case in CASES:
        state, code, unknown = case.expect
        rows.append(f"| {case.name} | {WHEN[case.stage]} | {state} | {code or '–'} | {str(unknown).lower()} | "
                    f"{case.requests[0]}, {case.requests[1]} |")
    return "\n".join(rows) + "\n"


def test_the_documented_fault_table_is_the_one_tested():
    assert fault_table_markdown() in DOC.read_text(encoding="utf-8"), (
        "docs/reliability.md is out of date; paste fault_table_markdown() from tests/chaos/test_owner_faults.py")
