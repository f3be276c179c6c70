"""The hook's checkpoint branch: once per compaction, keyed by the transcript's last ``compacted``
record, never beside a job's own compaction, never without a transcript, framed, cut plan first."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rekall.store.checkpoint import checkpoint_handoff, deliveries, save
from rekall.store.delivery import DeliveryKey, holder
from rekall.store.fsio import FileOps
from rekall.surfaces.session_hook import CONTEXT_BYTE_BUDGET
from rekall.testing import FakeClock
from tests.jobkit import new_thread, open_store
from tests.surfaces.test_session_hook import context_of, env_for, hook_input, job_until, run_hook, transcript_with

NOTE = {"summary": "Port the parser to Rust.", "preserve": ["Never edit vendor/."], "discard": [],
        "nextStep": "Port lexer.rs."}
MARKER = "[Checkpoint saved through rekall before a context compaction; thread "


def with_checkpoint(jobs: Path, thread: str, note: dict | None = None) -> dict:
    jobs.mkdir(mode=0o700, parents=True, exist_ok=True)
    return save(jobs, thread, checkpoint_handoff(note or NOTE), FileOps())


def last_compacted_key(transcript: Path) -> str:
    line = [line for line in transcript.read_bytes().split(b"\n") if b'"type":"compacted"' in line
            and line.startswith(b'{"timestamp"')][-1]
    return hashlib.sha256(line).hexdigest()


def plan_line(stamp: str, steps: list[tuple[str, str]]) -> str:
    arguments = json.dumps({"plan": [{"step": step, "status": status} for step, status in steps]})
    return json.dumps({"timestamp": stamp, "type": "response_item", "payload": {
        "type": "function_call", "name": "update_plan", "arguments": arguments, "call_id": "c1"}},
        separators=(",", ":"))


def test_each_compaction_delivers_the_checkpoint_once_keyed_by_its_last_compacted_record(tmp_path: Path):
    jobs, thread = tmp_path / "jobs", new_thread()
    saved = with_checkpoint(jobs, thread)
    transcript = transcript_with(tmp_path / "t" / "rollout.jsonl", "2099-01-01T00:00:00.000Z")
    context = context_of(run_hook(hook_input(thread, transcript), env_for(jobs))[0])
    assert context.startswith(MARKER + thread + "]") and '"nextStep": "Port lexer.rs."' in context
    assert "your own checkpoint" in context and "check it against the current state" in context
    assert "does not by itself authorise its nextStep" in context and "0 turns ago" in context
    assert run_hook(hook_input(thread, transcript), env_for(jobs)) == ("", 0)  # the same compaction: never twice
    first = last_compacted_key(transcript)
    assert holder(jobs, DeliveryKey(thread, compaction=first))["checkpointSha256"] == saved["sha256"]
    transcript_with(transcript, "2099-01-01T00:00:00.000Z", "2099-01-02T00:00:00.000Z")
    assert context_of(run_hook(hook_input(thread, transcript), env_for(jobs))[0]).startswith(MARKER)
    assert [d["compaction"] for d in deliveries(jobs, thread)] == [first, last_compacted_key(transcript)]


def test_without_a_readable_transcript_or_a_compacted_record_no_checkpoint_is_delivered(tmp_path: Path):
    jobs, thread = tmp_path / "jobs", new_thread()
    with_checkpoint(jobs, thread)
    assert run_hook(hook_input(thread), env_for(jobs)) == ("", 0)
    assert run_hook(hook_input(thread, tmp_path / "missing.jsonl"), env_for(jobs)) == ("", 0)
    assert run_hook(hook_input(thread, transcript_with(tmp_path / "t" / "r.jsonl")), env_for(jobs)) == ("", 0)
    assert deliveries(jobs, thread) == []


def test_after_the_jobs_own_compaction_only_the_jobs_handoff_goes_and_after_a_later_one_the_checkpoint(
        tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "completed", resume=False)
    with_checkpoint(jobs, thread)
    requested = store.read_status(thread).requestedAt
    transcript = transcript_with(tmp_path / "t" / "rollout.jsonl", requested)
    own = context_of(run_hook(hook_input(thread, transcript), env_for(jobs))[0])
    assert own.startswith(f"[Handoff saved through rekall before a context compaction; job {job}") and MARKER not in own
    assert run_hook(hook_input(thread, transcript), env_for(jobs)) == ("", 0)  # nor the checkpoint after it
    transcript_with(transcript, requested, "2099-01-01T00:00:00.000Z")
    later = context_of(run_hook(hook_input(thread, transcript), env_for(jobs))[0])
    assert later.startswith(MARKER) and job not in later


def test_a_checkpoint_changed_after_it_was_saved_or_cleared_is_not_delivered(tmp_path: Path):
    jobs, thread = tmp_path / "jobs", new_thread()
    saved = with_checkpoint(jobs, thread)
    Path(saved["path"]).write_text(Path(saved["path"]).read_text().replace("lexer", "parser"))
    transcript = transcript_with(tmp_path / "t" / "rollout.jsonl", "2099-01-01T00:00:00.000Z")
    assert run_hook(hook_input(thread, transcript), env_for(jobs)) == ("", 0)
    assert deliveries(jobs, thread) == []


def test_the_latest_plan_comes_along_unless_the_setting_turns_it_off(tmp_path: Path):
    jobs, thread = tmp_path / "jobs", new_thread()
    with_checkpoint(jobs, thread)
    transcript = transcript_with(tmp_path / "t" / "rollout.jsonl", "2099-01-01T00:00:00.000Z")
    lines = transcript.read_text().splitlines()
    lines[1:1] = [plan_line("2099-01-01T00:00:00.000Z", [("lex", "completed")]),
                  plan_line("2099-01-01T00:00:00.100Z", [("lex", "completed"), ("parse", "in_progress")])]
    transcript.write_text("\n".join(lines) + "\n")
    context = context_of(run_hook(hook_input(thread, transcript), env_for(jobs))[0])
    assert "Your latest plan (update_plan)" in context and context.endswith("- [in_progress] parse")
    other = new_thread()
    with_checkpoint(jobs, other)
    plain = context_of(run_hook(hook_input(other, transcript), {**env_for(jobs), "REKALL_CHECKPOINT_PLAN": "off"})[0])
    assert "update_plan" not in plain
    from rekall.kernel.settings import CHECKPOINT_PLAN
    from rekall.surfaces.checkpoint_hook import PLAN_VARIABLE

    assert PLAN_VARIABLE == CHECKPOINT_PLAN.name and CHECKPOINT_PLAN.default is True


def test_over_the_hooks_budget_the_plan_is_cut_first_then_the_checkpoint_with_the_path_of_the_whole(
        tmp_path: Path):
    jobs, thread = tmp_path / "jobs", new_thread()
    with_checkpoint(jobs, thread)
    transcript = transcript_with(tmp_path / "t" / "rollout.jsonl", "2099-01-01T00:00:00.000Z")
    lines = transcript.read_text().splitlines()
    lines.insert(1, plan_line("2099-01-01T00:00:00.000Z", [(f"step {n} " + "x" * 80, "pending") for n in range(200)]))
    transcript.write_text("\n".join(lines) + "\n")
    context = context_of(run_hook(hook_input(thread, transcript), env_for(jobs))[0])
    assert len(context.encode()) <= CONTEXT_BYTE_BUDGET and '"nextStep": "Port lexer.rs."' in context
    assert context.endswith("[rekall: the plan is cut here, to fit what Codex lets a hook add.]")
    big = new_thread()
    saved = with_checkpoint(jobs, big, {**NOTE, "preserve": [f"fact {n} " + "y" * 300 for n in range(40)]})
    cut = context_of(run_hook(hook_input(big, transcript), env_for(jobs))[0])
    assert len(cut.encode()) <= CONTEXT_BYTE_BUDGET and "and the plan left out" in cut
    assert saved["path"] in cut and saved["sha256"] in cut
    claim = deliveries(jobs, big)[0]
    assert claim["cut"] is True and claim["checkpointPath"] == saved["path"]


STEPS = st.lists(st.sampled_from(["compact", "other", "hook"]), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_whatever_the_transcript_grows_by_each_compaction_a_hook_runs_after_delivers_exactly_once(
        steps: list[str], tmp_path_factory):
    root = tmp_path_factory.mktemp("grow")
    jobs, thread = root / "jobs", new_thread()
    with_checkpoint(jobs, thread)
    transcript = transcript_with(root / "t" / "rollout.jsonl")
    compactions, hooked, delivered = 0, set(), 0
    for n, step in enumerate(steps):
        stamp = f"2099-01-01T00:00:{n:02d}.000Z"
        if step == "compact":
            compactions += 1
            line = {"timestamp": stamp, "ordinal": n, "type": "compacted", "payload": {"message": ""}}
        elif step == "other":
            line = {"timestamp": stamp, "type": "event_msg", "payload": {"type": "task_complete"}}
        if step != "hook":
            with transcript.open("a") as out:
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
            continue
        out, _ = run_hook(hook_input(thread, transcript), env_for(jobs))
        delivered += bool(out)
        if compactions:
            hooked.add(compactions)
    assert delivered == len(hooked)  # once per compaction a hook ran after, never for none, never twice
    assert len(deliveries(jobs, thread)) == len(hooked)


def test_while_a_job_waits_on_its_requested_compaction_no_checkpoint_goes_even_for_an_earlier_compaction(
        tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    steps = next(n for n in range(1, 8) if _state_after(tmp_path / str(n), n) == "accepted")
    job_until(store, clock, thread, "completed", resume=False, steps=steps)
    assert store.read_status(thread).state == "accepted"
    with_checkpoint(jobs, thread)
    earlier = transcript_with(tmp_path / "t" / "rollout.jsonl", "2000-01-01T00:00:00.000Z")  # before the request
    assert run_hook(hook_input(thread, earlier), env_for(jobs)) == ("", 0)  # the transcript may lag: in doubt, none
    assert deliveries(jobs, thread) == []


def _state_after(jobs: Path, steps: int) -> str:
    store, thread = open_store(jobs), new_thread()
    job_until(store, FakeClock(), thread, "completed", resume=False, steps=steps)
    return str(store.read_status(thread).state)
