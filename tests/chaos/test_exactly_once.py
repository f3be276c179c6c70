"""Exactly once, under random faults at random moments: seeded runs of full jobs.

CI runs ``REKALL_CHAOS_RUNS`` runs (default 40) of seed ``REKALL_CHAOS_SEED``; ``bench/chaos.py
--runs 1000`` runs the full size. Across all runs the owner never receives a second compact
or start-turn request for a job, every job ends in a terminal state reached through rows of
the transition table, and nothing is lost.
"""

from __future__ import annotations

import os

import pytest

from tests.chaos.ledger import LEDGER
from tests.chaos.randomized import run_many

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

RUNS = int(os.environ.get("REKALL_CHAOS_RUNS") or 40)
SEED = int(os.environ.get("REKALL_CHAOS_SEED") or 20261130)


def test_random_fault_runs_never_repeat_a_request_and_always_end_explained():
    tally = run_many(SEED, RUNS, parallel=4)
    LEDGER.merge(tally)
    assert tally.jobs == RUNS, tally.problems
    assert tally.duplicate_requests == 0
    assert tally.data_lost == 0
    assert not tally.problems, "\n".join(tally.problems)
