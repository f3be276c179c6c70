import json

from hypothesis import given
from hypothesis import strategies as st

from rekall.worker.continuation import continuation_text

RECORD = {
    "version": 1,
    "threadId": "0199a5c2-0000-4000-8000-000000000001",
    "jobId": "0199a5c2-0000-4000-8000-0000000000aa",
    "handoff": {
        "summary": "Refactor the parser; tests pass.",
        "preserve": ["the grammar lives in parse.py"],
        "discard": ["old benchmark logs"],
        "nextStep": "Run the full suite, then stop.",
        "resume": True,
    },
}


def test_the_continuation_names_the_job_and_says_compaction_completed():
    text = continuation_text(RECORD, "/jobs/t.j.handoff.json")
    first = text.splitlines()[0]
    assert first == f"[Automatic continuation requested through rekall; job {RECORD['jobId']}]"
    assert "Context compaction has completed." in text
    assert "/jobs/t.j.handoff.json" in text


def test_the_continuation_puts_the_user_and_permissions_first_and_limits_itself_to_next_step():
    text = continuation_text(RECORD, "/p")
    assert "latest user instructions and all existing permission boundaries" in text
    assert "Continue with nextStep only" in text
    assert "Do not schedule another compaction" in text
    assert "not deleting files" in text
    assert "context-compact" not in text


def test_the_continuation_ends_with_the_exact_handoff_json_after_a_blank_line():
    text = continuation_text(RECORD, "/p")
    head, _, tail = text.partition("\n\n")
    assert json.loads(tail) == RECORD["handoff"]
    assert tail == json.dumps(RECORD["handoff"], indent=2, ensure_ascii=False)
    assert "jobId" not in tail  # the handoff only, not the record wrapper


def test_the_injected_handoff_names_the_job_and_thread_and_says_whether_its_next_step_is_authorised():
    from rekall.worker.continuation import injection_text

    record = {"jobId": "job-1", "threadId": "thread-1", "handoff": {"summary": "s", "preserve": [], "discard": [],
                                                                   "nextStep": "write the changelog", "resume": False}}
    plain = injection_text(record, "/jobs/h.json", resume=False, skipped=None, skip_reason=None)
    assert plain.startswith("[Handoff saved through rekall before a context compaction; job job-1, thread thread-1]")
    assert "resume false" in plain and "nextStep is not authorised" in plain and "/jobs/h.json" in plain
    assert plain.count('"nextStep": "write the changelog"') == 1
    skipped = injection_text(record, "/jobs/h.json", resume=True, skipped="insufficient_headroom",
                             skip_reason="more_than_60_percent_used")
    assert "skipped it for headroom (more_than_60_percent_used)" in skipped
    assert "authorised only as that continuation" in skipped
    overtaken = injection_text(record, "/jobs/h.json", resume=True, skipped="new_user_input", skip_reason=None)
    assert "the user sent new input first" in overtaken


@given(resume=st.booleans(),
       skipped=st.one_of(st.none(), st.just(""), st.sampled_from(["insufficient_headroom", "new_user_input", "new_turn",
                                                                   "goal_active", "user_turn_stopped", "failed",
                                                                   "timed_out", "cancelled", "None"]), st.text()),
       skip_reason=st.one_of(st.none(), st.just(""), st.sampled_from(["more_than_60_percent_used"])))
def test_no_framing_that_reaches_the_model_prints_none_null_or_an_empty_reason(resume, skipped, skip_reason):
    from rekall.worker.continuation import injection_text

    record = {"jobId": "job-1", "threadId": "thread-1", "handoff": {"summary": "s", "preserve": [], "discard": [],
                                                                   "nextStep": "n", "resume": resume}}
    framing = injection_text(record, "/jobs/h.json", resume=resume, skipped=skipped,
                             skip_reason=skip_reason).split("\n\n")[0]
    assert "None" not in framing and "null" not in framing and "()" not in framing


def test_a_reason_the_framing_does_not_know_is_said_in_words_never_as_its_raw_value():
    from rekall.worker.continuation import injection_text

    framing = injection_text(RECORD, "/p", resume=True, skipped="zz_unknown_reason", skip_reason=None)
    assert "zz_unknown_reason" not in framing and "one was asked for, but none ran." in framing
