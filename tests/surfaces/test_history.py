from __future__ import annotations

import io
import os
from datetime import timedelta

import pytest
from rich.console import Console

from rekall.kernel.errors import InvalidInput
from rekall.surfaces.history import collect_history, print_history
from rekall.store import JobStore
from rekall.testing import FakeClock

from tests.jobkit import new_thread, scheduled_run



def test_jobs_are_listed_newest_first_across_threads_with_their_metrics(store: JobStore, clock: FakeClock):
    a, b = new_thread(), new_thread()
    first = scheduled_run(store, clock, a, "completed")
    second = scheduled_run(store, clock, b, "resumed")
    third = scheduled_run(store, clock, a, "cancelled")
    rows = collect_history(store)
    assert [r["jobId"] for r in rows] == [third, second, first]
    resumed = rows[1]
    assert (resumed["threadId"], resumed["state"]) == (b, "resumed")
    assert (resumed["contextTokensBefore"], resumed["contextTokensAfter"]) == (90_000, 30_000)
    assert resumed["compactionDurationMs"] == 1_000 and resumed["resumeDelayMs"] == 1_000
    assert resumed["durationMs"] == 3_000 and resumed["outcome"].startswith("Resumed:")
    assert [r["jobNumber"] for r in rows if r["threadId"] == a] == [2, 1]


def test_history_can_be_narrowed_to_a_thread_and_a_start_date(store: JobStore, clock: FakeClock):
    a, b = new_thread(), new_thread()
    scheduled_run(store, clock, a, "completed")
    clock.advance(int(timedelta(days=2).total_seconds() * 1000))
    later = scheduled_run(store, clock, a, "failed")
    scheduled_run(store, clock, b, "completed")
    assert [r["threadId"] for r in collect_history(store, thread=b)] == [b]
    assert [r["jobId"] for r in collect_history(store, thread=a, since="2026-12-01")] == [later]
    assert len(collect_history(store, since="2026-11-30T11:00")) == 3
    assert collect_history(store, since="2026-12-02T00:00+05:00") != []


def test_a_bad_date_is_named(store: JobStore):
    with pytest.raises(InvalidInput, match="--since") as caught:
        collect_history(store, since="last tuesday")
    assert caught.value.field == "--since" and "tuesday" not in str(caught.value)  # the rule, never the value


def test_an_unreadable_journal_is_listed_not_dropped(store: JobStore, clock: FakeClock):
    thread = new_thread()
    job = scheduled_run(store, clock, thread, "completed")
    path = store.journal_path(thread, job)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"garbage\n" + b"".join(lines[1:]))
    rows = collect_history(store)
    assert rows[-1]["jobId"] == job and rows[-1]["state"] == "unreadable"
    assert rows[-1]["error"]["code"] == "journal_corrupt"


def test_history_prints_for_people(store: JobStore, clock: FakeClock):
    scheduled_run(store, clock, new_thread(), "skipped")
    out = io.StringIO()
    print_history(collect_history(store), Console(file=out, width=120, color_system=None))
    assert "Resume skipped: 61% of the context window" in out.getvalue()
    empty = io.StringIO()
    print_history([], Console(file=empty))
    assert "No jobs yet" in empty.getvalue()


@pytest.mark.parametrize("planted", ["directory", "symlink", "fifo"])
@pytest.mark.parametrize("same_thread", [False, True])
def test_something_planted_at_a_journals_path_is_listed_with_its_path_and_the_other_jobs_still_are(
        store: JobStore, clock: FakeClock, planted: str, same_thread: bool):
    # A directory used to fail `history` with "Is a directory" and no path; a symlink made it refuse entirely.
    thread = new_thread()
    job = scheduled_run(store, clock, thread, "completed")
    path = store.journal_path(thread if same_thread else new_thread(), "11111111-1111-4111-8111-111111111111")
    if planted == "directory":
        path.mkdir()
    elif planted == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path.symlink_to(store.journal_path(thread, job))
    rows = collect_history(store)
    assert [(r["jobId"], r["state"]) for r in rows] == [(job, "completed"), (path.name.split(".")[1], "unreadable")]
    assert f"cannot read the journal {path}: " in rows[1]["error"]["message"]
    assert "not a regular file" in rows[1]["outcome"]
