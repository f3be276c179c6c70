"""The plugin's SessionStart(compact) hook: the rule, the races, safe input, finding the job, the cut.

Jobs are written by the real store (tests/jobkit.py scripts what a worker fires); the hook runs
in-process through :func:`rekall.surfaces.session_hook.main` and, where the command line matters, as the
``rekall hook session-start`` command Codex runs.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rekall.surfaces.explain import build_explanation
from rekall.surfaces.history import collect_history
from rekall.surfaces.session_hook import CONTEXT_BYTE_BUDGET, answer, main
from rekall.states.status import known
from rekall.store import JobStore
from rekall.store.delivery import DeliveryKey, holder, take
from rekall.testing import FakeClock
from tests.jobkit import FINGERPRINT, handoff, new_thread, open_store, run_lifecycle, script

HOOK_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def hook_input(thread: str, transcript: Path | None = None, **changes: Any) -> bytes:
    value = {"session_id": thread, "transcript_path": None if transcript is None else str(transcript),
             "cwd": "/tmp", "hook_event_name": "SessionStart", "model": "mock-model", "permission_mode": "default",
             "source": "compact", **changes}
    return json.dumps(value).encode()


def run_hook(raw: bytes, env: dict[str, str]) -> tuple[str, int]:
    out = io.StringIO()
    code = main(stdin=io.BytesIO(raw), stdout=out, env=env)
    return out.getvalue(), code


def context_of(out: str) -> str:
    parsed = json.loads(out)
    assert list(parsed) == ["hookSpecificOutput"]
    assert parsed["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    return parsed["hookSpecificOutput"]["additionalContext"]


def job_until(store: JobStore, clock: FakeClock, thread: str, outcome: str, *, resume: bool,
              steps: int | None = None, value: dict[str, Any] | None = None) -> tuple[str, Path]:
    created = store.create_job(thread, handoff=value or handoff(resume), user_fingerprint=FINGERPRINT)
    with store.open_lifecycle(thread, created.job_id) as lifecycle:
        run_lifecycle(lifecycle, clock, script(created.job_id, outcome)[:steps])
    return created.job_id, store.paths.journal(thread, created.job_id)


def requested_at(store: JobStore, thread: str) -> str:
    return store.read_status(thread).requestedAt


def transcript_with(path: Path, *stamps: str) -> Path:
    """A Codex rollout with one ``compacted`` line per stamp (and a quoted one that must not count)."""
    lines = [json.dumps({"timestamp": "2026-11-30T11:00:00.000Z", "type": "session_meta", "payload": {}},
                        separators=(",", ":")),
             json.dumps({"timestamp": "2026-11-30T13:00:00.000Z", "type": "response_item",
                         "payload": {"text": '{"timestamp":"2026-11-30T13:00:00.000Z","type":"compacted"}'}},
                        separators=(",", ":"))]
    # Codex 0.171 writes an ordinal between the time and the type; older releases do not.
    lines += [json.dumps({"timestamp": s, **({"ordinal": n} if n % 2 else {}), "type": "compacted",
                          "payload": {"message": ""}}, separators=(",", ":")) for n, s in enumerate(stamps)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def shown(tmp_path: Path) -> Path:
    """A transcript that shows one compaction after every test job's request: the hook delivers only where
    a readable transcript shows the compaction."""
    return transcript_with(tmp_path / "shown.jsonl", "2026-11-30T12:59:00.000Z")


def env_for(jobs: Path) -> dict[str, str]:
    return {"REKALL_JOBS_DIR": str(jobs)}


def test_a_resume_false_job_whose_compaction_completed_gets_its_framed_handoff_once(tmp_path: Path):
    store, clock, thread = open_store(tmp_path / "jobs"), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "completed", resume=False)
    out, code = run_hook(hook_input(thread, shown(tmp_path)), env_for(tmp_path / "jobs"))
    assert code == 0
    context = context_of(out)
    assert context.startswith(f"[Handoff saved through rekall before a context compaction; job {job}, thread {thread}]")
    assert json.dumps(handoff(False)["summary"]) in context and "resume false" in context
    assert run_hook(hook_input(thread, shown(tmp_path)), env_for(tmp_path / "jobs")) == ("", 0)  # never a second copy
    status = JobStore.open_reader(env_for(tmp_path / "jobs")).read_status(thread)
    assert status.handoffDelivery == "hook" and status.handoffCut is False
    assert "SessionStart(compact) hook" in status.handoffDeliveryNote and status.handoffHookAt


def test_the_hooks_delivery_is_folded_into_status_explain_and_history(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "completed", resume=False)
    reader = JobStore.open_reader(env_for(jobs))
    assert known(reader.read_status(thread).handoffDelivery) != "hook"  # the views are sealed now
    assert [row.get("handoffDelivery") for row in collect_history(reader)] != ["hook"]
    context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])
    reader = JobStore.open_reader(env_for(jobs))
    assert reader.read_status(thread).handoffDelivery == "hook"
    assert "SessionStart(compact) hook" in build_explanation(reader, job)["outcome"]
    assert [row["handoffDelivery"] for row in collect_history(reader)] == ["hook"]
    from rekall.surfaces.cli_entry import answer_from_views

    served = answer_from_views(["status", thread, "--json"], env_for(jobs))
    assert served is None or json.loads(served[0])["handoffDelivery"] == "hook"


def test_a_job_that_resumed_or_is_resuming_gets_nothing_from_the_hook(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job_until(store, clock, thread, "resumed", resume=True)
    assert run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs)) == ("", 0)
    other = new_thread()
    job_until(store, clock, other, "resumed", resume=True, steps=5)  # in resuming: the turn is on its way
    assert store.read_status(other).state == "resuming"
    assert run_hook(hook_input(other, shown(tmp_path)), env_for(jobs)) == ("", 0)


def test_a_job_before_its_compaction_or_cancelled_before_it_gets_nothing(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock = open_store(jobs), FakeClock()
    for outcome, steps in (("completed", 2), ("completed", 1), ("cancelled", None), ("failed", None)):
        thread = new_thread()
        job_until(store, clock, thread, outcome, resume=False, steps=steps)
        assert run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs)) == ("", 0), outcome


def test_waiting_for_resume_idle_the_turn_starting_is_the_users_and_the_hook_delivers_before_the_continuation(
        tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, journal = job_until(store, clock, thread, "resumed", resume=True, steps=4)
    assert store.read_status(thread).state == "waiting_for_resume_idle"
    context = context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])
    assert "the user sent new input first" in context
    # The worker's continuation must win the same claim before it is sent: it loses.
    assert take(store.paths.root, DeliveryKey(thread, job=job), "continuation").won is False
    assert holder(store.paths.root, DeliveryKey(thread, job=job))["route"] == "hook"


def test_in_accepted_the_hook_delivers_only_when_the_transcript_shows_the_compaction(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job_until(store, clock, thread, "completed", resume=False, steps=3)
    assert store.read_status(thread).state == "accepted"
    assert run_hook(hook_input(thread), env_for(jobs)) == ("", 0)  # no transcript: not proven
    early = transcript_with(tmp_path / "early.jsonl", "2026-11-30T11:59:00.000Z")  # before the request
    assert run_hook(hook_input(thread, early), env_for(jobs)) == ("", 0)
    after = transcript_with(tmp_path / "after.jsonl", "2026-11-30T11:59:00.000Z", "2026-11-30T12:00:05.000Z")
    assert requested_at(store, thread) < "2026-11-30T12:00:05.000Z"
    context_of(run_hook(hook_input(thread, after), env_for(jobs))[0])


def test_a_second_compaction_since_the_request_means_this_is_not_the_first_session_start_after_the_jobs(
        tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job_until(store, clock, thread, "completed", resume=False)
    two = transcript_with(tmp_path / "two.jsonl", "2026-11-30T12:00:05.000Z", "2026-11-30T12:30:00.000Z")
    assert run_hook(hook_input(thread, two), env_for(jobs)) == ("", 0)
    one = transcript_with(tmp_path / "one.jsonl", "2026-11-30T12:00:05.000Z")
    context_of(run_hook(hook_input(thread, one), env_for(jobs))[0])


@HOOK_SETTINGS
@given(raw=st.one_of(st.binary(max_size=300),
                     st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                                  lambda inner: st.lists(inner, max_size=4)
                                  | st.dictionaries(st.text(max_size=20), inner, max_size=6),
                                  max_leaves=12).map(lambda v: json.dumps(v).encode())))
def test_any_malformed_or_unexpected_input_gives_the_empty_output_and_exit_0(tmp_path: Path, raw: bytes):
    assert run_hook(raw, env_for(tmp_path / "jobs")) == ("", 0)


def test_inputs_that_are_not_a_compact_session_start_for_a_thread_give_the_empty_output(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job_until(store, clock, thread, "completed", resume=False)
    for changes in ({"source": "startup"}, {"source": "resume"}, {"hook_event_name": "PostCompact"},
                    {"session_id": "not-a-thread"}, {"session_id": thread[:8]}, {"session_id": None}):
        assert run_hook(hook_input(thread, **changes), env_for(jobs)) == ("", 0), changes
    assert run_hook(hook_input(thread, shown(tmp_path))[:-5], env_for(jobs)) == ("", 0)
    assert run_hook(b"x" * (1024 * 1024 + 2), env_for(jobs)) == ("", 0)
    context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])  # the untouched claim is still free


def test_a_handoff_that_changed_after_it_was_saved_is_never_printed(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "completed", resume=False)
    path = store.paths.handoff(thread, job)
    os.chmod(path, 0o600)
    path.write_bytes(path.read_bytes().replace(b"parser", b"lexer "))
    assert run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs)) == ("", 0)
    assert holder(store.paths.root, DeliveryKey(thread, job=job)) is None  # nothing claimed for it


def test_the_job_is_found_under_a_non_default_codex_home_from_the_transcripts_place(tmp_path: Path):
    home = tmp_path / "elsewhere" / "codex-home"
    jobs = home / "tools" / "rekall" / "jobs"
    store, clock, thread = JobStore.open({"CODEX_HOME": str(home)}, clock=FakeClock()), FakeClock(), new_thread()
    job_until(store, clock, thread, "completed", resume=False)
    (tmp_path / "user-home" / ".rekall" / "jobs-dirs.json").unlink()  # only the transcript's place says it
    rollout = transcript_with(home / "sessions" / "2026" / "11" / "30" / f"rollout-{thread}.jsonl",
                              "2026-11-30T12:00:05.000Z")
    assert jobs.is_dir()
    assert run_hook(hook_input(thread), {}) == ("", 0)  # the default ~/.codex holds nothing
    context_of(run_hook(hook_input(thread, rollout), {})[0])


def test_the_job_is_found_in_a_jobs_directory_the_store_recorded_when_the_hooks_environment_is_short(
        tmp_path: Path):
    jobs = tmp_path / "custom-jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job_until(store, clock, thread, "completed", resume=False)
    assert json.loads((tmp_path / "user-home" / ".rekall" / "jobs-dirs.json").read_text())[0] == str(jobs)
    context_of(run_hook(hook_input(thread, shown(tmp_path)), {})[0])


def test_a_handoff_over_codexs_hook_limit_is_cut_with_the_whole_ones_place_and_the_job_says_so(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    big = handoff(False, preserve=[f"fact {n}: " + "the tokenizer keeps offsets " * 12 for n in range(35)])
    job, _ = job_until(store, clock, thread, "completed", resume=False, value=big)
    context = context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])
    assert len(context.encode()) <= CONTEXT_BYTE_BUDGET
    handoff_path = str(store.paths.handoff(thread, job))
    assert f"Read the whole handoff at {handoff_path}" in context
    status = JobStore.open_reader(env_for(jobs)).read_status(thread)
    assert status.handoffCut is True and handoff_path in status.handoffDeliveryNote


def test_a_handoff_under_the_limit_reaches_codex_whole(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job_until(store, clock, thread, "completed", resume=False)
    context = context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])
    assert json.dumps(handoff(False), indent=2, ensure_ascii=False) in context


def test_the_rekall_command_runs_the_hook_and_prints_only_the_framed_handoff(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job_until(store, clock, thread, "completed", resume=False)
    env = {**os.environ, **env_for(jobs)}
    command = [sys.executable, "-m", "rekall", "hook", "session-start"]
    done = subprocess.run(command, input=hook_input(thread, shown(tmp_path)), capture_output=True, env=env, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == b""
    context_of(done.stdout.decode())
    again = subprocess.run(command, input=b"{", capture_output=True, env=env, timeout=60, check=False)
    assert (again.returncode, again.stdout, again.stderr) == (0, b"", b"")


def test_answer_returns_none_when_no_jobs_directory_exists(tmp_path: Path):
    assert answer(hook_input(new_thread()), env_for(tmp_path / "absent")) is None



def test_an_explicit_cancel_in_waiting_for_resume_idle_keeps_the_hook_silent_and_says_why(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, journal = job_until(store, clock, thread, "resumed", resume=True, steps=4)
    assert store.read_status(thread).state == "waiting_for_resume_idle"
    asked = store.request_cancel(thread, job)
    assert asked.cancellationRequested is True and asked.handoffDelivery == "not_delivered"
    assert "no continuation, injection or hook will deliver it" in asked.handoffDeliveryNote
    assert run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs)) == ("", 0)  # the user's next turn gets nothing
    assert holder(store.paths.root, DeliveryKey(thread, job=job))["route"] == "cancel"
    # The worker then journals the cancel; the record says the handoff was withheld, and why.
    with store.open_lifecycle(thread, job) as lifecycle:
        lifecycle.fire("cancel", reason="explicit_cancellation")
    status = JobStore.open_reader(env_for(jobs)).read_status(thread)
    assert (status.state, status.handoffDelivery) == ("cancelled", "not_delivered")
    assert "cancelled explicitly" in status.handoffDeliveryNote
    assert store.request_cancel(thread, job).cancellationRequested is False  # over: asked again, nothing to do


def test_a_job_an_older_rekall_cancelled_explicitly_after_its_compaction_gets_nothing_from_the_hook(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    created = store.create_job(thread, handoff=handoff(True), user_fingerprint=FINGERPRINT)
    with store.open_lifecycle(thread, created.job_id) as lifecycle:  # no cancel claim: journaled before claims
        run_lifecycle(lifecycle, clock, script(created.job_id, "resumed")[:4]
                      + [("cancel", {"reason": "explicit_cancellation"})])
    assert run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs)) == ("", 0)


def test_a_cancel_after_the_hook_delivered_says_the_hook_delivered_it(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "resumed", resume=True, steps=4)
    context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])
    asked = store.request_cancel(thread, job)
    assert asked.handoffDelivery == "hook" and "already delivered by the hook route" in asked.handoffDeliveryNote


def test_cancels_for_the_users_input_keep_the_hooks_delivery_and_no_framing_says_none(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock = open_store(jobs), FakeClock()
    said = {}
    for reason in ("new_user_input", "new_turn", "goal_active", "user_turn_stopped"):
        thread = new_thread()
        created = store.create_job(thread, handoff=handoff(True), user_fingerprint=FINGERPRINT)
        with store.open_lifecycle(thread, created.job_id) as lifecycle:
            run_lifecycle(lifecycle, clock, script(created.job_id, "resumed")[:4] + [("cancel", {"reason": reason})])
        said[reason] = context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])
    for reason, context in said.items():
        framing = context.split("\n\n")[0]  # what rekall wrote, before the handoff's own JSON
        assert "None" not in framing and "null" not in framing and "()" not in framing, (reason, framing)
    assert "the user sent new input first" in said["new_user_input"]
    assert "the thread's goal became active first" in said["goal_active"]


def test_after_a_failed_or_timed_out_job_the_hooks_framing_says_how_it_ended_never_none(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock = open_store(jobs), FakeClock()
    for outcome, words in (("failed", "the job failed before it ran"),
                           ("timed_out", "the job's deadline passed before it ran")):
        thread = new_thread()
        created = store.create_job(thread, handoff=handoff(True), user_fingerprint=FINGERPRINT)
        ending = ("fail", {"errorCode": "worker_lost", "error": "the worker died"}) if outcome == "failed" \
            else ("deadline", {"deadlineS": 900})
        with store.open_lifecycle(thread, created.job_id) as lifecycle:
            run_lifecycle(lifecycle, clock, script(created.job_id, "resumed")[:4] + [ending])
        context = context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])
        assert words in context and "None" not in context.split("\n\n")[0], context


def test_after_a_worker_dies_in_accepted_the_hook_delivers_once_whether_or_not_status_reaped_it_first(
        tmp_path: Path):
    from tests.jobkit import job_with_dead_worker

    for read_status_first in (False, True):
        jobs = tmp_path / f"jobs-{read_status_first}"
        store, clock, thread = open_store(jobs), FakeClock(), new_thread()
        job = job_with_dead_worker(store, clock, thread, "accepted")
        if read_status_first:
            assert store.reap_if_dead(thread) is not None
            assert (store.read_status(thread).state, store.read_status(thread).errorCode) == ("failed", "worker_lost")
        context = context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])
        assert f"job {job}" in context and "None" not in context.split("\n\n")[0]
        assert run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs)) == ("", 0)  # once
        assert run_hook(hook_input(new_thread(), shown(tmp_path)), env_for(jobs)) == ("", 0)


def test_without_a_readable_transcript_the_hook_claims_nothing_even_for_a_completed_job(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "completed", resume=False)
    assert run_hook(hook_input(thread), env_for(jobs)) == ("", 0)
    assert run_hook(hook_input(thread, tmp_path / "missing.jsonl"), env_for(jobs)) == ("", 0)
    assert holder(store.paths.root, DeliveryKey(thread, job=job)) is None
    context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])


def test_a_full_disk_while_the_hook_writes_its_claim_delivers_nothing_and_leaves_the_claim_free(
        tmp_path: Path, monkeypatch):
    import rekall.store.delivery as delivery

    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "completed", resume=False)

    def full_disk(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(delivery.os, "write", full_disk)
    assert run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs)) == ("", 0)
    monkeypatch.undo()
    assert holder(store.paths.root, DeliveryKey(thread, job=job)) is None  # never said to be a claim taken
    status = JobStore.open_reader(env_for(jobs)).read_status(thread)
    assert status.handoffDelivery != "hook"
    context_of(run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs))[0])  # the next turn's hook can


def test_a_fifo_planted_at_the_jobs_claim_is_foreign_the_hook_prints_nothing_and_status_answers_at_once(
        tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "completed", resume=False)
    os.mkfifo(store.paths.delivery(thread, job), 0o600)
    assert run_hook(hook_input(thread, shown(tmp_path)), env_for(jobs)) == ("", 0)
    done = subprocess.run([sys.executable, "-m", "rekall", "status", thread, "--json"], capture_output=True,
                          text=True, env={**os.environ, **env_for(jobs)}, timeout=20)  # a FIFO read would block
    status = json.loads(done.stdout)
    assert status["handoffDelivery"] == "not_delivered" and "not a regular file" in status["handoffDeliveryNote"]


def test_the_hook_reads_each_jobs_state_from_both_machines_records_as_the_store_does(tmp_path: Path):
    from rekall.surfaces.session_hook import _read_journal

    store, clock = open_store(tmp_path / "jobs"), FakeClock()
    for outcome in ("resumed", "completed", "skipped", "skipped_at_resume", "cancelled", "failed"):
        for steps in range(1, len(script("x", outcome)) + 1):
            thread = new_thread()
            job, journal = job_until(store, clock, thread, outcome, resume=True, steps=steps)
            read = _read_journal(journal)
            assert read is not None and read[2] == store.load(thread, job).state.value, (outcome, steps)
