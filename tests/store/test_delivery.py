"""The delivery claim: of the continuation, the injection and the hook, exactly one ever delivers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rekall.store.delivery import ROUTES, claim, claim_path, folded, read_claim

ROUTE_LISTS = st.lists(st.sampled_from(ROUTES), min_size=1, max_size=9)


@settings(max_examples=80, deadline=None)
@given(attempts=ROUTE_LISTS)
def test_whatever_the_order_of_attempts_the_first_route_delivers_and_no_other_ever_does(attempts, tmp_path_factory):
    path = tmp_path_factory.mktemp("claim") / "t.j.delivery"
    won = [claim(path, route) for route in attempts]
    assert won == [True] + [False] * (len(attempts) - 1)
    assert read_claim(path)["route"] == attempts[0]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@settings(max_examples=25, deadline=None)
@given(attempts=ROUTE_LISTS)
def test_routes_racing_on_threads_deliver_exactly_once(attempts, tmp_path_factory):
    path = tmp_path_factory.mktemp("race") / "t.j.delivery"
    barrier, won = threading.Barrier(len(attempts)), []

    def attempt(route: str) -> None:
        barrier.wait(timeout=30)
        if claim(path, route):
            won.append(route)

    workers = [threading.Thread(target=attempt, args=(route,)) for route in attempts]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert len(won) == 1 and read_claim(path)["route"] == won[0]


CHILD = r"""
import sys
from pathlib import Path
from rekall.store.delivery import claim
path, route = Path(sys.argv[1]), sys.argv[2]
print("ready", flush=True)
sys.stdin.readline()
print("won" if claim(path, route) else "lost", flush=True)
"""


@pytest.mark.slow
def test_the_continuation_the_injection_and_the_hook_racing_as_processes_deliver_exactly_once(tmp_path: Path):
    path = tmp_path / "t.j.delivery"
    root = Path(__file__).resolve().parents[2]
    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(path), route], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=root) for route in ROUTES * 2]
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
    winner = (ROUTES * 2)[results.index("won")]
    assert read_claim(path)["route"] == winner


def test_a_claim_left_empty_by_a_claimer_that_died_is_still_held_and_reads_as_unknown(tmp_path: Path):
    path = tmp_path / "t.j.delivery"
    path.touch(mode=0o600)
    assert claim(path, "hook") is False
    assert read_claim(path) == {"route": "unknown"}


def test_a_claim_is_never_followed_through_a_symlink(tmp_path: Path):
    target, path = tmp_path / "elsewhere", tmp_path / "t.j.delivery"
    path.symlink_to(target)
    assert claim(path, "hook") is False and not target.exists()


def test_an_unknown_route_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="route must be one of continuation, injection, hook, cancel"):
        claim(tmp_path / "t.j.delivery", "email")


def test_an_explicit_cancels_claim_is_folded_in_as_never_delivered(tmp_path: Path):
    journal = tmp_path / "t.j.journal.jsonl"
    assert claim(claim_path(journal), "cancel", jobId="j")
    assert not claim(claim_path(journal), "hook")  # no route delivers after it
    fields = folded(journal)
    assert fields["handoffDelivery"] == "not_delivered" and "cancelled explicitly" in fields["handoffDeliveryNote"]


def test_only_the_hooks_claim_is_folded_into_the_jobs_record(tmp_path: Path):
    journal = tmp_path / "t.j.journal.jsonl"
    assert claim_path(journal) == tmp_path / "t.j.delivery"
    assert folded(journal) == {}
    claim(claim_path(journal), "continuation")
    assert folded(journal) == {}  # the worker journals its own delivery
    claim_path(journal).unlink()
    claim(claim_path(journal), "hook", cut=True, contextBytes=9000, framedBytes=20000, handoffPath="/h.json")
    fields = folded(journal)
    assert fields["handoffDelivery"] == "hook" and fields["handoffCut"] is True
    assert "cut to 9000 of 20000 bytes" in fields["handoffDeliveryNote"] and "/h.json" in fields["handoffDeliveryNote"]
    assert json.loads(claim_path(journal).read_text())["route"] == "hook"
