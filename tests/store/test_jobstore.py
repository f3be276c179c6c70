"""The store's door (rekall.store.jobstore): ids are checked before any path is built."""

from __future__ import annotations

import pytest

from rekall.kernel.errors import InvalidInput
from rekall.store import JobStore, UnknownJob

from tests.jobkit import new_thread, schedule, snapshot


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["../../etc/passwd", "not-a-uuid", "", "0199a5c2-0000-4000-8000-00000000000/"])
def test_a_bad_id_is_rejected_before_any_path_is_built(store: JobStore, thread: str, bad: str):
    job = schedule(store, thread).job_id
    before = snapshot(store.root)
    calls = [
        lambda: store.create_job(bad, handoff=None, user_fingerprint=None),
        lambda: store.read_status(bad),
        lambda: store.open_lifecycle(thread, bad),
        lambda: store.request_cancel(bad, job),
        lambda: store.verify_handoff(thread, bad, "0" * 64),
        lambda: store.release_lock(bad, job),
        lambda: store.set_lock_holder(thread, bad, 1, None),
        lambda: store.reap_if_dead(bad),
        lambda: store.cancel_path(thread, bad),
        lambda: store.find(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidInput) as caught:
            call()
        assert caught.value.code == "invalid_id"
    assert snapshot(store.root) == before


@pytest.mark.parametrize(("value", "said"), [("x", "a string of 1 character that"), ("xy", "a string of 2 characters")])
def test_a_bad_id_is_described_by_its_length_in_plain_grammar(store, value, said):
    with pytest.raises(InvalidInput) as caught:
        store.read_status(value)
    assert said in caught.value.message and value not in caught.value.message.split("got ")[1]


def test_an_unknown_job_is_reported_not_guessed(store: JobStore, thread: str):
    with pytest.raises(UnknownJob):
        store.open_lifecycle(thread, new_thread())
    with pytest.raises(UnknownJob):
        store.find(new_thread())


def test_ids_are_lower_cased_so_a_thread_has_one_spelling(store: JobStore, thread: str):
    created = schedule(store, thread.upper())
    assert store.read_status(thread).jobId == created.job_id


def test_the_worker_log_path_is_private_to_the_job(store: JobStore, thread: str):
    job = schedule(store, thread).job_id
    assert store.log_path(thread, job).parent == store.root
    assert store.read_status(thread).logPath == str(store.log_path(thread, job))
