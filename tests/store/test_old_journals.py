"""Journals written by commit ed555ee replay and explain unchanged.

The fixture (``fixtures/store/ed555ee-journals.json``, see its README) is a jobs directory written
by commit ed555ee, before the lifecycle was split into a compaction and a delivery machine: 24
jobs on three threads, one for each way a delivery went (and two that ended before any
compaction), with their journals, handoff records and the hook's delivery claims. ``expected``
holds what ed555ee's own code said of them: each job's state, states and triggers, the output
of ``rekall explain JOB --json``, and of ``rekall status THREAD --json`` once the status file was
rebuilt from the journals.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from rekall.store import JobStore
from rekall.surfaces.cli import main

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "store" / "ed555ee-journals.json"

#: What the fixture must cover: a fixture that lost jobs (or all of them) fails here.
TRIGGERS = {"worker_started", "idle_stable", "compaction_accepted", "compaction_completed", "turn_started",
            "resume_overtaken", "handoff_injected", "handoff_not_delivered", "cancel", "deadline", "fail",
            "system_error_held", "outcome_settled"}
#: Every row a delivery goes through (source, trigger, destination).
DELIVERY_ROWS = {
    ("accepted", "compaction_completed", "waiting_for_resume_idle"),
    ("accepted", "compaction_completed", "completed"),
    ("accepted", "compaction_completed", "skipped"),
    ("accepted", "compaction_completed", "injecting"),
    ("waiting_for_resume_idle", "idle_stable", "resuming"),
    ("waiting_for_resume_idle", "idle_stable", "skipped"),
    ("waiting_for_resume_idle", "idle_stable", "injecting"),
    ("waiting_for_resume_idle", "resume_overtaken", "injecting"),
    ("waiting_for_resume_idle", "cancel", "cancelled"),
    ("waiting_for_resume_idle", "system_error_held", "failed"),
    ("resuming", "turn_started", "resumed"),
    ("resuming", "resume_overtaken", "completed"),
    ("resuming", "fail", "failed"),
    ("injecting", "handoff_injected", "completed"),
    ("injecting", "handoff_injected", "skipped"),
    ("injecting", "handoff_not_delivered", "completed"),
    ("injecting", "handoff_not_delivered", "skipped"),
    ("injecting", "cancel", "cancelled"),
    ("injecting", "deadline", "timed_out"),
}


@pytest.fixture
def old_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, Any]]:
    """The fixture's files in a fresh 0700 jobs directory (each 0600); returns it and what ed555ee said,
    with ``@ROOT@`` replaced by the directory."""
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    for name, text in fixture["files"].items():
        path = jobs / name
        path.write_text(text, encoding="utf-8")
        os.chmod(path, 0o600)
    monkeypatch.setenv("REKALL_JOBS_DIR", str(jobs))
    expected = json.loads(json.dumps(fixture["expected"]).replace("@ROOT@", str(jobs)))
    return jobs, {"threads": fixture["threads"], **expected}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_the_fixture_covers_every_row_a_delivery_goes_through(old_jobs):
    _, expected = old_jobs
    jobs = expected["jobs"].values()
    assert len(jobs) == 24 and len(expected["threads"]) == 3
    assert {t for job in jobs for t in job["triggers"]} == TRIGGERS | {"schedule"}
    rows = {(job["path"][n - 1], trigger, job["path"][n]) for job in jobs
            for n, trigger in enumerate(job["triggers"]) if n > 0}
    assert DELIVERY_ROWS <= rows
    assert {job["state"] for job in jobs} == {"resumed", "completed", "skipped", "cancelled", "failed", "timed_out"}
    hook = [job["name"] for job in jobs if job["explain"]["status"].get("handoffDelivery") == "hook"]
    assert sorted(hook) == ["hook_won_while_injecting", "hook_won_while_resuming"]  # the claims are folded in


def test_every_journal_written_by_ed555ee_replays_to_its_recorded_states(old_jobs):
    _, expected = old_jobs
    store = JobStore.open_reader()
    for job_id, job in expected["jobs"].items():
        replay = store.load(job["thread"], job_id)
        assert replay.state.value == job["state"], job["name"]
        assert [t.dest.value for t in replay.transitions] == job["path"], job["name"]
        assert [t.trigger for t in replay.transitions] == job["triggers"], job["name"]


def test_a_status_rebuilt_from_ed555ee_journals_is_the_one_ed555ee_printed(old_jobs, capsys):
    jobs, expected = old_jobs
    for thread in expected["threads"]:
        assert not (jobs / f"{thread}.json").exists()
        rebuilt = _cli(capsys, "status", thread, "--json")
        assert rebuilt.pop("statusFileProblem") == "missing; rebuilt from the journal"
        assert rebuilt == expected["status"][thread]
        assert _cli(capsys, "status", thread, "--json") == expected["status"][thread]  # the rebuilt file, served


def test_rekall_explain_prints_each_ed555ee_job_as_ed555ee_did(old_jobs, capsys):
    _, expected = old_jobs
    for job_id, job in expected["jobs"].items():
        explained = _cli(capsys, "explain", job_id, "--json")
        recorded = dict(job["explain"])
        # The diagram is drawn from today's two machines, not the journal: checked on its own below.
        explained.pop("diagram"), recorded.pop("diagram")
        # Each timeline row gains the machine that moved: the single machine's delivery rows are the
        # ``job``'s, the others the compaction machine's moves as they are today.
        for row in explained["timeline"]:
            legacy = (row["from"], row["trigger"], row["to"]) in DELIVERY_ROWS
            assert row.pop("machine") == ("job" if legacy else "compaction"), job["name"]
        assert explained == recorded, job["name"]


def test_the_explain_diagram_of_each_ed555ee_job_numbers_the_moves_its_records_stand_for(old_jobs, capsys):
    _, expected = old_jobs
    for job_id, job in expected["jobs"].items():
        diagram = _cli(capsys, "explain", job_id, "--json")["diagram"]
        steps = len(job["triggers"]) - 1  # the first record creates the job
        numbered = {int(n) for found in re.findall(r"\(step ([\d, ]+)\)", diagram) for n in found.split(", ")}
        assert numbered == set(range(1, steps + 1)), job["name"]
        current = diagram.splitlines()[-1]
        ended = job["state"] if job["state"] in ("cancelled", "timed_out", "failed") else "compacted"
        assert current.startswith(f"  class {ended}") and current.endswith(" current"), job["name"]
