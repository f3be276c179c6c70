from __future__ import annotations

import io

import pytest
from rich.console import Console

from rekall.surfaces.explain import build_explanation, describe_outcome, print_explanation
from rekall.store import JobStore, UnknownJob
from rekall.testing import FakeClock

from tests.jobkit import new_thread, run, schedule, scheduled_run



def test_a_skipped_resume_is_explained_in_plain_words(store: JobStore, clock: FakeClock):
    thread = new_thread()
    job = scheduled_run(store, clock, thread, "skipped")
    explanation = build_explanation(store, job)
    assert explanation["outcome"].startswith(
        "Resume skipped: 61% of the context window was in use after compaction, above the 60% limit.")
    assert explanation["state"] == "skipped" and explanation["terminal"] is True
    assert explanation["path"] == ["scheduled", "waiting_for_idle", "requesting", "accepted", "skipped"]


def test_a_compaction_the_user_moved_on_after_is_explained_as_completed_with_no_continuation(store: JobStore,
                                                                                            clock: FakeClock):
    thread = new_thread()
    job = scheduled_run(store, clock, thread, "completed_user_moved_on")
    explanation = build_explanation(store, job)
    assert explanation["state"] == "completed" and explanation["path"][-2:] == ["accepted", "completed"]
    assert explanation["outcome"] == (
        "Completed: compacted 90,000 → 30,000 tokens (67% reclaimed) in 1.0 s. No continuation: the compaction "
        "completed, then the user sent new input: a continuation would talk over it, so none was started.")
    status = store.read_status(thread)
    assert (status.resumeSkipped, status.outcomeMayBeUnknown) == ("new_user_input", False)
    last = explanation["timeline"][-1]
    assert (last["machine"], last["trigger"], last["to"], last["route"]) == ("delivery", "route_chosen", "settled",
                                                                               None)
    assert [(g["guard"], g["passed"]) for g in last["guards"]] == [("a_route_carries_it", False),
                                                                   ("no_route_carries_it", True)]


def test_the_timeline_shows_times_evidence_and_every_guard_verdict(store: JobStore, clock: FakeClock):
    thread = new_thread()
    job = scheduled_run(store, clock, thread, "skipped")
    timeline = build_explanation(store, job)["timeline"]
    assert [row["seq"] for row in timeline] == [0, 1, 2, 3, 4, 5]
    assert [row["sincePreviousMs"] for row in timeline] == [None, 500, 500, 500, 500, 0]  # one event, two moves
    completed, chosen = timeline[-2:]
    assert [(r["machine"], r["from"], r["to"], r["trigger"]) for r in (completed, chosen)] == [
        ("compaction", "accepted", "compacted", "compaction_completed"),
        ("delivery", "pending", "settled", "route_chosen")]
    assert completed["evidence"]["tokens"] == chosen["evidence"]["tokens"] == 61_000
    assert [(g["guard"], g["passed"]) for g in chosen["guards"]] == [("a_route_carries_it", False),
                                                                     ("no_route_carries_it", True)]
    assert chosen["fields"]["resumeSkipped"] == "insufficient_headroom"


def test_the_diagram_numbers_the_steps_taken_and_marks_the_states_visited(store: JobStore, clock: FakeClock):
    thread = new_thread()
    diagram = build_explanation(store, scheduled_run(store, clock, thread, "resumed"))["diagram"]
    assert "    scheduled --> waiting_for_idle: worker_started [owns_job] (step 1)" in diagram
    assert "    waiting --> sending: idle_stable [route_may_send] (step 6)" in diagram
    assert "    sending --> delivered: handoff_delivered [answers_the_route] (step 7)" in diagram
    assert "    pending --> settled: route_chosen [no_route_carries_it]\n" in diagram  # not taken
    assert "  class compacted,delivered current" in diagram  # where each machine ended
    assert "class scheduled,waiting_for_idle,requesting,accepted,pending,waiting,sending taken" in diagram


def test_a_thread_id_explains_the_threads_latest_job(store: JobStore, clock: FakeClock):
    thread = new_thread()
    scheduled_run(store, clock, thread, "completed")
    latest = scheduled_run(store, clock, thread, "failed")
    explanation = build_explanation(store, thread)
    assert explanation["jobId"] == latest
    assert explanation["outcome"] == "Failed (owner_gone): the owner window closed. " \
        "The outcome may be unknown: a request may have reached the extension, and its effect was not observed; " \
        "check the thread before scheduling again."


def test_notes_are_part_of_the_explanation(store: JobStore, clock: FakeClock):
    thread = new_thread()
    created = schedule(store, thread)
    with store.open_lifecycle(thread, created.job_id) as lifecycle:
        lifecycle.note("reconnected", ownerId="o2")
    notes = build_explanation(store, created.job_id)["notes"]
    assert notes == [{"seq": 1, "at": notes[0]["at"], "kind": "reconnected", "detail": {"ownerId": "o2"}}]


@pytest.mark.parametrize(("outcome", "words"), [
    ("completed", "Completed: compacted 90,000 → 30,000 tokens (67% reclaimed) in 1.0 s; no continuation"),
    ("resumed", "continuation turn turn-9 started 1.0 s after the compaction completed"),
    ("skipped_at_resume", "70% of the context window was in use at the check before resuming"),
    ("cancelled", "Cancelled: new user input arrived."),
    ("timed_out", "Timed out: deadline of 900 s exceeded in waiting_for_idle"),
])
def test_every_ending_has_its_own_words(store: JobStore, clock: FakeClock, outcome: str, words: str):
    thread = new_thread()
    job = scheduled_run(store, clock, thread, outcome)
    assert words in build_explanation(store, job)["outcome"]


def test_a_job_in_progress_says_where_it_is(store: JobStore):
    thread = new_thread()
    job = schedule(store, thread).job_id
    assert build_explanation(store, job)["outcome"].startswith("In progress (scheduled)")


def test_sixty_point_four_percent_is_not_shown_as_sixty():
    words = describe_outcome("skipped", {"resumeSkipReason": "more_than_60_percent_used",
                                         "contextWindowUsedFraction": 0.604})
    assert "60.4% of the context window" in words


def test_a_torn_journal_tail_is_reported(store: JobStore, clock: FakeClock):
    thread = new_thread()
    job = schedule(store, thread).job_id
    with store.journal_path(thread, job).open("ab") as handle:
        handle.write(b'{"crc32":"00')
    assert build_explanation(store, job)["tornTailBytes"] == 12


def test_an_unknown_id_is_reported(store: JobStore):
    with pytest.raises(UnknownJob, match="no job or thread"):
        build_explanation(store, new_thread())


def test_the_explanation_prints_for_people(store: JobStore, clock: FakeClock):
    thread = new_thread()
    job = schedule(store, thread).job_id
    run(store, clock, thread, job, "skipped")
    with store.open_lifecycle(thread, job) as lifecycle:
        lifecycle.note("owner_moved", ownerId="[bold]o3")
    out = io.StringIO()
    print_explanation(build_explanation(store, job), Console(file=out, width=160, color_system=None))
    text = out.getvalue()
    assert "Resume skipped: 61%" in text and "✓ no_route_carries_it" in text
    assert "delivery: pending → settled  on route_chosen" in text
    assert "note: owner_moved" in text and "[bold]o3" in text  # data is printed, not interpreted as markup
    assert "Path: scheduled → waiting_for_idle → requesting → accepted → skipped" in text


def test_a_compaction_that_grew_the_context_says_nothing_was_reclaimed_not_a_negative_share():
    grew = {"contextTokensBefore": 100_000, "contextTokensAfter": 105_000, "reclaimedFraction": -0.05,
            "compactionDurationMs": 900}
    words = describe_outcome("completed", grew)
    assert "-5%" not in words and "nothing reclaimed: the count grew 5%" in words
    out = io.StringIO()
    from rekall.surfaces.render import print_job

    print_job({"threadId": new_thread(), "state": "completed", **grew}, Console(file=out, width=100))
    shown = out.getvalue()  # the thread id is random: it may hold "-5" itself
    assert "-5%" not in shown and "-5.0%" not in shown and "the count grew 5.0%" in shown


def test_an_app_server_jobs_unknown_outcome_speaks_of_the_shared_app_server_not_the_extension():
    words = describe_outcome("failed", {"platform": "app-server", "errorCode": "request_timeout",
                                        "error": "no answer", "outcomeMayBeUnknown": True})
    assert "a request may have reached the shared app-server" in words and "extension" not in words
