"""The delivery claim: for each key (a job, or a thread and one compaction) exactly one route ever delivers,
and a claim file rekall did not write is never believed and never blocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rekall.store.delivery import FOREIGN, ROUTES, DeliveryKey, folded, holder, take

ROUTE_LISTS = st.lists(st.sampled_from(ROUTES), min_size=1, max_size=9)
THREAD = "0199a5c2-0000-4000-8000-000000000001"
JOB = "0199a5c2-0000-4000-8000-0000000000aa"
JOB_KEY = DeliveryKey(THREAD, job=JOB)
COMPACTIONS = st.lists(st.sampled_from(["a" * 64, "b" * 64, "c" * 64]), min_size=1, max_size=6)


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, exist_ok=True)
    return path


@settings(max_examples=80, deadline=None)
@given(attempts=ROUTE_LISTS)
def test_whatever_the_order_of_attempts_the_first_route_delivers_and_no_other_ever_does(attempts, tmp_path_factory):
    jobs = tmp_path_factory.mktemp("claim")
    taken = [take(jobs, JOB_KEY, route) for route in attempts]
    assert [t.won for t in taken] == [True] + [False] * (len(attempts) - 1)
    assert all(t.holder == attempts[0] for t in taken)
    assert holder(jobs, JOB_KEY)["route"] == attempts[0]
    assert oct(JOB_KEY.path(jobs).stat().st_mode & 0o777) == "0o600"


@settings(max_examples=60, deadline=None)
@given(compactions=COMPACTIONS, routes=ROUTE_LISTS)
def test_each_compaction_of_a_thread_is_delivered_once_and_the_next_compaction_again(compactions, routes,
                                                                                      tmp_path_factory):
    jobs = tmp_path_factory.mktemp("compactions")
    won: dict[str, int] = {}
    for compaction, route in zip(compactions, routes * len(compactions)):
        if take(jobs, DeliveryKey(THREAD, compaction=compaction), route).won:
            won[compaction] = won.get(compaction, 0) + 1
    assert won == {c: 1 for c in set(compactions)}  # one per compaction, never twice, whatever the order
    assert take(jobs, JOB_KEY, "hook").won  # a job's key is another key: still free


@settings(max_examples=25, deadline=None)
@given(attempts=ROUTE_LISTS, compaction=st.booleans())
def test_routes_racing_on_threads_deliver_exactly_once(attempts, compaction, tmp_path_factory):
    jobs = tmp_path_factory.mktemp("race")
    key = DeliveryKey(THREAD, compaction="d" * 64) if compaction else JOB_KEY
    barrier, won = threading.Barrier(len(attempts)), []

    def attempt(route: str) -> None:
        barrier.wait(timeout=30)
        if take(jobs, key, route).won:
            won.append(route)

    workers = [threading.Thread(target=attempt, args=(route,)) for route in attempts]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert len(won) == 1 and holder(jobs, key)["route"] == won[0]


CHILD = r"""
import sys
from pathlib import Path
from rekall.store.delivery import DeliveryKey, take
jobs, route, thread, kind, name = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
key = DeliveryKey(thread, **{kind: name})
print("ready", flush=True)
sys.stdin.readline()
print("won" if take(jobs, key, route).won else "lost", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind, name", [("job", JOB), ("compaction", "e" * 64)])
def test_the_routes_racing_as_processes_deliver_exactly_once_per_key(kind: str, name: str, tmp_path: Path):
    jobs = private(tmp_path / "jobs")
    root = Path(__file__).resolve().parents[2]
    routes = ROUTES * 2
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(jobs), route, THREAD, kind, name],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root) for route in routes]
    watchdog = threading.Timer(60, lambda: [c.kill() for c in children])
    watchdog.start()
    try:
        assert [c.stdout.readline().strip() for c in children] == ["ready"] * len(children)
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [c.stdout.readline().strip() for c in children]
        assert [c.wait(timeout=30) for c in children] == [0] * len(children)
    finally:
        watchdog.cancel()
        for child in children:
            child.kill()
    assert sorted(results) == ["lost"] * (len(children) - 1) + ["won"]
    assert holder(jobs, DeliveryKey(THREAD, **{kind: name}))["route"] == routes[results.index("won")]


def test_a_claim_left_empty_by_a_claimer_that_died_is_still_held_and_reads_as_unknown(tmp_path: Path):
    JOB_KEY.path(tmp_path).touch(mode=0o600)
    taken = take(tmp_path, JOB_KEY, "hook")
    assert (taken.won, taken.holder) == (False, "unknown")


def test_a_claim_is_never_followed_through_a_symlink_and_a_symlink_is_foreign(tmp_path: Path):
    target = tmp_path / "elsewhere"
    JOB_KEY.path(tmp_path).symlink_to(target)
    taken = take(tmp_path, JOB_KEY, "hook")
    assert (taken.won, taken.holder) == (False, FOREIGN) and not target.exists()


def test_a_fifo_planted_at_the_claim_is_foreign_and_read_without_waiting(tmp_path: Path):
    os.mkfifo(JOB_KEY.path(tmp_path), 0o600)
    found = holder(tmp_path, JOB_KEY)  # returns at once: the FIFO is opened without blocking
    assert found["route"] == FOREIGN and "not a regular file" in found["why"]
    assert not take(tmp_path, JOB_KEY, "injection").won
    fields = folded(tmp_path / f"{THREAD}.{JOB}.journal.jsonl")
    assert fields["handoffDelivery"] == "not_delivered" and "foreign delivery claim" in fields["handoffDeliveryNote"]


def test_a_claim_planted_with_open_modes_or_naming_another_job_is_foreign_and_never_says_delivered(tmp_path: Path):
    path = JOB_KEY.path(tmp_path)
    path.write_text(json.dumps({"route": "hook", "at": "2026-12-01T00:00:00.000Z", "pid": 1}))
    path.chmod(0o644)
    assert holder(tmp_path, JOB_KEY)["route"] == FOREIGN
    path.chmod(0o600)
    path.write_text(json.dumps({"route": "hook", "threadId": THREAD, "jobId": str(uuid.uuid4())}))
    assert holder(tmp_path, JOB_KEY)["route"] == FOREIGN
    fields = folded(tmp_path / f"{THREAD}.{JOB}.journal.jsonl")
    assert fields["handoffDelivery"] == "not_delivered"


def test_a_claim_whose_write_fails_is_removed_and_the_delivery_stays_free(tmp_path: Path, monkeypatch):
    import rekall.store.delivery as delivery

    def full_disk(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(delivery.os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        take(tmp_path, JOB_KEY, "hook")
    monkeypatch.undo()
    assert holder(tmp_path, JOB_KEY) is None  # never read as a claim taken
    assert take(tmp_path, JOB_KEY, "injection").won


def test_an_unknown_route_and_a_malformed_key_are_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="route must be one of continuation, injection, hook, cancel"):
        take(tmp_path, JOB_KEY, "email")
    for bad in ({"job": "../x"}, {"compaction": "../" + "a" * 61}, {}, {"job": JOB, "compaction": "a" * 64}):
        with pytest.raises(ValueError, match="delivery key"):
            DeliveryKey(THREAD, **bad)


def test_an_explicit_cancels_claim_is_folded_in_as_never_delivered(tmp_path: Path):
    journal = tmp_path / f"{THREAD}.{JOB}.journal.jsonl"
    assert take(tmp_path, JOB_KEY, "cancel").won
    assert not take(tmp_path, JOB_KEY, "hook").won  # no route delivers after it
    fields = folded(journal)
    assert fields["handoffDelivery"] == "not_delivered" and "cancelled explicitly" in fields["handoffDeliveryNote"]


def test_only_the_hooks_claim_is_folded_into_the_jobs_record(tmp_path: Path):
    journal = tmp_path / f"{THREAD}.{JOB}.journal.jsonl"
    assert JOB_KEY.path(tmp_path) == tmp_path / f"{THREAD}.{JOB}.delivery"
    assert folded(journal) == {}
    take(tmp_path, JOB_KEY, "continuation")
    assert folded(journal) == {}  # the worker journals its own delivery
    JOB_KEY.path(tmp_path).unlink()
    take(tmp_path, JOB_KEY, "hook", cut=True, contextBytes=9000, framedBytes=20000, handoffPath="/h.json")
    fields = folded(journal)
    assert fields["handoffDelivery"] == "hook" and fields["handoffCut"] is True
    assert "cut to 9000 of 20000 bytes" in fields["handoffDeliveryNote"] and "/h.json" in fields["handoffDeliveryNote"]
    recorded = json.loads(JOB_KEY.path(tmp_path).read_text())
    assert (recorded["route"], recorded["threadId"], recorded["jobId"]) == ("hook", THREAD, JOB)


def test_a_claim_that_names_another_handoff_than_the_jobs_seal_is_foreign(tmp_path: Path):
    journal = tmp_path / f"{THREAD}.{JOB}.journal.jsonl"
    take(tmp_path, JOB_KEY, "hook", handoffSha256="a" * 64)
    assert folded(journal, "a" * 64)["handoffDelivery"] == "hook"
    fields = folded(journal, "b" * 64)
    assert fields["handoffDelivery"] == "not_delivered" and "names another handoff" in fields["handoffDeliveryNote"]
