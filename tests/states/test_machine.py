from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from transitions import MachineError

from rekall.states import machine as machine_module
from rekall.states.status import known

from rekall.states import DeliveryState, IllegalTransition, Instant, JobMachine, JobState, JobView, Step, \
    TransitionRefused
from rekall.testing import FakeClock

from tests.jobkit import new_thread, open_store, run, schedule, view_in
from tests.states.reference import ILLEGAL, REFUSED, TRIGGERS, Reference, evidence_for

JOB = "11111111-1111-4111-8111-111111111111"


def _machine(state: JobState = JobState.SCHEDULED, **fields) -> JobMachine:
    base = {"resume": True, "userFingerprint": "fp-1", "contextTokensBefore": 90_000}
    return JobMachine(view_in(JOB, state, {**base, **fields}, {JobState.REQUESTING: 0}))


def _now() -> Instant:
    return FakeClock().now()


def test_the_commit_runs_before_the_state_changes():
    machine, seen = _machine(JobState.REQUESTING), []
    machine.fire("compaction_accepted", {"ownerId": "o1"}, _now(), lambda step: seen.append(machine.state))
    assert seen == [JobState.REQUESTING]
    assert machine.state is JobState.ACCEPTED is machine.view.state


def test_a_failing_commit_leaves_the_state_and_view_unchanged():
    machine = _machine(JobState.REQUESTING)

    def commit(step: Step) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError):
        machine.fire("compaction_accepted", {"ownerId": "o1"}, _now(), commit)
    assert machine.state is JobState.REQUESTING is machine.view.state
    (step,) = machine.fire("compaction_accepted", {"ownerId": "o1"}, _now(), lambda s: None)
    assert step.dest is JobState.ACCEPTED is machine.state


def test_an_illegal_event_names_the_state_and_the_trigger():
    machine = _machine(JobState.COMPLETED)
    with pytest.raises(IllegalTransition) as caught:
        machine.fire("cancel", {"reason": "explicit_cancellation"}, _now(), lambda s: None)
    assert caught.value.code == "illegal_transition"
    assert "cancel" in caught.value.message and "completed" in caught.value.message
    assert machine.state is JobState.COMPLETED


def test_a_refused_event_reports_every_guard_verdict():
    machine = _machine(JobState.WAITING_FOR_RESUME_IDLE)
    evidence = {"idleMs": 800, "tokens": 10, "window": 100, "revision": 1, "boundaryFingerprint": "fp-1",
                "handoffVerified": False}
    with pytest.raises(TransitionRefused) as caught:
        machine.fire("idle_stable", evidence, _now(), lambda s: None)
    assert [(v.guard, v.passed) for v in caught.value.verdicts] == [("route_may_send", False),
                                                                    ("headroom_lost_inject", False),
                                                                    ("headroom_lost", False)]
    assert machine.state is JobState.WAITING_FOR_RESUME_IDLE


def test_each_machine_has_a_model_of_the_library_and_the_view_holds_the_only_states():
    machine = _machine(JobState.REQUESTING)
    compaction, delivery = machine._models["compaction"], machine._models["delivery"]
    assert callable(compaction.may_compaction_accepted) and callable(delivery.may_handoff_delivered)  # bound triggers
    assert not hasattr(delivery, "compaction_accepted") and not hasattr(compaction, "handoff_delivered")
    machine.fire("compaction_accepted", {"ownerId": "o1"}, _now(), lambda s: None)
    assert compaction.is_state_value_accepted() and delivery.is_state_value_pending()  # read through the view
    for holder in (machine, compaction, delivery):  # no second copy
        assert [v for v in vars(holder).values() if isinstance(v, (JobState, DeliveryState, str))] == []
    assert machine.view.state is JobState.ACCEPTED


def test_legality_is_the_librarys_answer():
    machine = _machine(JobState.REQUESTING)

    def no_row(trigger, **kwargs):
        raise MachineError(f"Can't trigger event {trigger} from state requesting!")  # as if the library found no row

    machine._models["compaction"].trigger = no_row
    with pytest.raises(IllegalTransition):
        machine.fire("compaction_accepted", {"ownerId": "o1"}, _now(), lambda s: None)
    assert machine.state is JobState.REQUESTING


def test_each_guard_is_asked_once_per_event(monkeypatch):
    asked = []
    condition_for = machine_module._condition

    def counted(row):
        condition = condition_for(row)
        return lambda event: asked.append(row.guard.__name__) or condition(event)

    monkeypatch.setattr(machine_module, "_condition", counted)
    machine = _machine(JobState.WAITING_FOR_RESUME_IDLE)
    evidence = {"idleMs": 800, "tokens": 10, "window": 100, "revision": 1, "boundaryFingerprint": "fp-1"}
    with pytest.raises(TransitionRefused):
        machine.fire("idle_stable", {**evidence, "handoffVerified": False}, _now(), lambda s: None)
    assert asked == ["route_may_send", "headroom_lost_inject", "headroom_lost"]
    asked.clear()
    machine.fire("idle_stable", {**evidence, "handoffVerified": True}, _now(), lambda s: None)
    assert machine.state is JobState.RESUMING
    assert asked == ["route_may_send"]


@pytest.mark.parametrize(("resume", "tokens", "dest"), [
    (False, 95_000, JobState.COMPLETED),
    (True, 60_000, JobState.WAITING_FOR_RESUME_IDLE),
    (True, 61_000, JobState.SKIPPED),
    (True, None, JobState.SKIPPED),
])
def test_completion_is_routed_by_resume_and_headroom(resume, tokens, dest):
    steps: list[Step] = []
    machine = _machine(JobState.ACCEPTED, resume=resume)
    evidence = {"compactionId": "c", "tokens": tokens, "window": 100_000, "revision": None}
    machine.fire("compaction_completed", evidence, _now(), steps.append)
    assert machine.state is dest
    # The compaction machine hands over; the delivery machine chooses the route in the same event.
    assert [(s.machine, s.trigger) for s in steps] == [("compaction", "compaction_completed"),
                                                      ("delivery", "route_chosen")]
    assert [v.passed for v in steps[1].verdicts][-1] is True


def test_a_skip_at_completion_records_why():
    steps: list[Step] = []
    machine = _machine(JobState.ACCEPTED)
    machine.fire("compaction_completed", {"compactionId": "c", "tokens": 61_000, "window": 100_000,
                                          "revision": None}, _now(), steps.append)
    assert steps[1].fields["resumeSkipped"] == "insufficient_headroom"
    assert steps[1].fields["resumeSkipReason"] == "more_than_60_percent_used"
    assert steps[0].fields["contextWindowUsedFraction"] == 0.61


class LifecycleAgainstReference(RuleBasedStateMachine):
    """Random trigger sequences: both machines must agree with the reference model at every step, and the
    handoff is delivered at most once, never after an explicit cancel."""

    @initialize(resume=st.booleans())
    def start(self, resume: bool) -> None:
        self.model = Reference(JOB, resume)
        self.machine = JobMachine(JobView(JOB, "t", JobState.SCHEDULED, {"resume": resume, "userFingerprint": "fp-1"},
                                          {JobState.SCHEDULED: 0}))
        self.clock = FakeClock()
        self.deliveries: list[Step] = []

    @rule(trigger=st.sampled_from(TRIGGERS), data=st.data())
    def fire(self, trigger: str, data: st.DataObject) -> None:
        self._check(trigger, data)

    @rule(data=st.data())
    def fire_progress(self, data: st.DataObject) -> None:
        """Random triggers mostly end a job early; this one pushes it forward (guards may refuse)."""
        self._check(self.model.progress, data)

    def _check(self, trigger: str, data: st.DataObject) -> None:
        evidence = data.draw(evidence_for(trigger, JOB))
        before, withheld = self.machine.view, self.model.withheld
        state = before.state
        want = self.model.after(trigger, evidence)
        commits: list[Step] = []
        self.clock.advance(10)
        if want == ILLEGAL:
            with pytest.raises(IllegalTransition):
                self.machine.fire(trigger, evidence, self.clock.now(), commits.append)
        elif want == REFUSED:
            with pytest.raises(TransitionRefused):
                self.machine.fire(trigger, evidence, self.clock.now(), commits.append)
        else:
            assert isinstance(want, Reference)
            steps = self.machine.fire(trigger, evidence, self.clock.now(), commits.append)
            assert steps[0].source is before.state_in(steps[0].machine) and steps == tuple(commits)
            # The completion is one event and two moves: the compaction machine's handover, the route's choice.
            assert [step.machine for step in steps] == (["compaction", "delivery"] if trigger == "compaction_completed"
                                                        else [steps[0].machine])
            delivered = [step for step in steps if step.trigger == "handoff_delivered"]
            assert not (withheld and delivered)  # nothing is delivered after an explicit cancel
            self.deliveries += delivered
            self.model = want
        assert (commits == []) is (want in (ILLEGAL, REFUSED))
        view = self.machine.view
        assert (view.compaction, view.delivery, view.route) == (self.model.compaction, self.model.delivery,
                                                                self.model.route)
        assert self.machine.state is self.model.state
        if self.machine.state.terminal and state is JobState.INJECTING:  # how the injection ended is recorded
            assert view.fields["handoffDelivery"] in ("injected", "not_delivered", "unknown", "hook")

    @invariant()
    def the_library_reads_the_states_the_view_holds(self) -> None:
        if hasattr(self, "machine"):
            for name, model in self.machine._models.items():
                assert model.state_value == self.machine.view.state_in(name).value

    @invariant()
    def the_handoff_is_delivered_at_most_once(self) -> None:
        if hasattr(self, "machine"):
            assert len(self.deliveries) == self.model.delivered <= 1


TestLifecycleAgainstReference = LifecycleAgainstReference.TestCase
TestLifecycleAgainstReference.settings = settings(max_examples=150, stateful_step_count=25, deadline=None)


@pytest.mark.parametrize(("state", "what"), [
    (JobState.WAITING_FOR_IDLE, "nothing was compacted"),
    (JobState.WAITING_FOR_RESUME_IDLE, "no continuation turn was started"),
])
def test_a_runtime_stuck_in_system_error_fails_the_job_naming_it_and_the_way_out(state, what):
    steps: list[Step] = []
    evidence = {"runtimeStatus": "systemError", "heldMs": 60_012, "windowS": 60, "revision": 7}
    machine = _machine(state)
    machine.fire("system_error_held", evidence, _now(), steps.append)
    assert machine.state is JobState.FAILED
    fields = steps[0].fields
    assert fields["errorCode"] == "thread_system_error" and fields["outcomeMayBeUnknown"] is False
    assert "systemError for 60 s" in fields["error"] and what in fields["error"]
    assert "send a message" in fields["error"].lower() and "reload the VS Code window" in fields["error"]


@pytest.mark.parametrize(("state", "sent"), [(JobState.REQUESTING, False), (JobState.ACCEPTED, False),
                                             (JobState.RESUMING, False), (JobState.INJECTING, True)])
def test_a_stuck_system_error_cannot_end_a_job_with_a_request_in_flight(state, sent):
    evidence = {"runtimeStatus": "systemError", "heldMs": 60_000, "windowS": 60, "revision": None}
    machine = JobMachine(view_in(JOB, state, {"resume": True}, sent=sent))
    with pytest.raises((IllegalTransition, TransitionRefused)):
        machine.fire("system_error_held", evidence, _now(), lambda s: None)
    assert machine.state is state


def test_reading_jobs_with_status_and_history_never_imports_the_lifecycle_library(tmp_path):
    # Only a job's owner builds a machine (and `rekall explain`, whose diagram is drawn by one);
    # readers replay the journal against the table.
    clock = FakeClock()
    store = open_store(tmp_path / "jobs", clock)
    thread = new_thread()
    job = schedule(store, thread)
    assert run(store, clock, thread, job.job_id, "resumed") is JobState.RESUMED
    code = ("import json, sys\nfrom rekall.surfaces.cli import main\n"
            f"codes = [main(['status', {thread!r}, '--json']), main(['history', '--json'])]\n"
            "print(json.dumps({'codes': codes, 'loaded': sorted(m for m in sys.modules "
            "if m.split('.')[0] == 'transitions')}), file=sys.stderr)")
    env = {**os.environ, "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "HOME": str(tmp_path),
           "CODEX_HOME": str(tmp_path / "codex-home")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    report = json.loads(out.stderr.strip().splitlines()[-1])
    assert report == {"codes": [0, 0], "loaded": []}, out.stderr
    assert job.job_id in out.stdout and "resumed" in out.stdout


@pytest.mark.parametrize(("said_before", "after", "state", "reason"), [
    (35_921, 4_100, JobState.WAITING_FOR_RESUME_IDLE, None),
    (4_100, 4_100, JobState.SKIPPED, "stale_or_unreclaimed_token_telemetry"),
])
def test_the_owners_count_from_before_the_compaction_is_the_before_of_the_strictly_fewer_rule(
        said_before, after, state, reason):
    # The app-server's resume replays no count: the request's is unknown, the compaction turn's first decides.
    machine = _machine(JobState.ACCEPTED, contextTokensBefore=None)
    machine.fire("compaction_completed", {"compactionId": "c", "tokens": after, "window": 258_400, "revision": 3,
                                          "tokensBefore": said_before}, _now(), lambda s: None)
    assert machine.state is state
    status = machine.view.status
    assert (status.contextTokensBefore, status.tokensReclaimed) == (said_before, said_before - after)
    assert known(status.resumeSkipReason) == reason
