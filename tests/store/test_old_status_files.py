"""Status files and journals written before the JobStatus record read unchanged.

The fixture (``fixtures/store/before-jobstatus.json``, see its README) is a jobs directory
written by commit f28a632: five jobs on one thread, their journals and the status file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs
import pytest

from rekall.surfaces.cli import main
from rekall.states.status import ABSENT, wire
from rekall.store import JobStore
from rekall.store.views import SEAL, unsealed

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "store" / "before-jobstatus.json"


@pytest.fixture
def old_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """The fixture's files in a fresh 0700 jobs directory; returns it and the thread."""
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    for name, text in fixture["files"].items():
        path = jobs / name
        path.write_text(text.replace("@ROOT@", str(jobs)), encoding="utf-8")
        os.chmod(path, 0o600)
    monkeypatch.setenv("REKALL_JOBS_DIR", str(jobs))
    return jobs, fixture["thread"]


def test_a_status_file_written_before_the_record_reads_unchanged_and_only_gains_a_seal(old_store):
    jobs, thread = old_store
    path = jobs / f"{thread}.json"
    before = path.read_bytes()
    status = JobStore.open_reader().read_status(thread)
    assert wire(status) == json.loads(before)  # every field, the history of four earlier jobs included
    assert status.state == "resumed" and len(status.history) == 4
    assert status.statusFileProblem is ABSENT
    after = json.loads(path.read_bytes())  # sealed, so that the next read may serve it as is
    assert SEAL in after and unsealed(after) == json.loads(before)


def test_rekall_status_prints_an_old_status_file_as_it_is(old_store, capsys):
    jobs, thread = old_store
    assert main(["status", thread, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == unsealed(json.loads((jobs / f"{thread}.json").read_bytes()))


def test_an_old_status_file_rebuilt_from_its_journal_is_the_same_status(old_store):
    jobs, thread = old_store
    path = jobs / f"{thread}.json"
    expected = json.loads(path.read_bytes())
    path.unlink()  # rebuilt from the journals by this version
    status = JobStore.open_reader().read_status(thread)
    assert status.statusFileProblem == "missing; rebuilt from the journal"
    assert wire(attrs.evolve(status, statusFileProblem=ABSENT)) == expected
    assert unsealed(json.loads(path.read_bytes())) == expected
