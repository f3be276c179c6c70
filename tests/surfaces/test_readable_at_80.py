"""Every human view at 80 columns: no word or id is cut, nothing but deliberately unwrapped lines is wider.

Each view is printed twice, at 80 columns and at 1000 (where nothing wraps). Wrapping may move
words to the next line but must never split, fold or shorten one, so both printings must hold
the same words. A line wider than 80 is allowed only where rekall leaves wrapping to the
terminal on purpose, so that a copy stays whole: the Mermaid diagram and file paths.
"""

from __future__ import annotations

import io
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from rekall.surfaces.cli import main
from rekall.surfaces.demo import run_demo
from rekall.states import JobState
from rekall.states.table import MACHINES
from rekall.testing import FakeClock

from tests.jobkit import new_thread, open_store, run_lifecycle, schedule, scheduled_run, script

_FRAME = re.compile(r"[│┃║╭╮╰╯┏┓┗┛┡┩┢┪╇╈╋━─═┳┻┼┬┴├┤]")


def words(text: str) -> Counter[str]:
    return Counter(_FRAME.sub(" ", text).split())


def unwrapped_on_purpose(line: str) -> bool:
    """Mermaid lines (indented statements of the diagram) and lines naming a path."""
    return line.startswith("  ") and ("-->" in line or line.lstrip().startswith("class")) or "/" in line


def at_width(argv: list[str], width: int, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("NO_COLOR", "1")
    status = main(argv)
    return status, capsys.readouterr().out


def check_readable(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    status80, narrow = at_width(argv, 80, capsys, monkeypatch)
    status_wide, wide = at_width(argv, 1000, capsys, monkeypatch)
    assert status80 == status_wide
    assert narrow.strip(), f"{argv} printed nothing"
    assert words(narrow) == words(wide), f"{argv}: a word was cut at 80 columns"
    too_wide = [line for line in narrow.splitlines() if len(line) > 80 and not unwrapped_on_purpose(line)]
    assert not too_wide, f"{argv}: lines wider than 80 columns: {too_wide}"
    return narrow


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Short paths: a path longer than a line is the one word that must fold."""
    root = Path(tempfile.mkdtemp(prefix="r80-"))
    (root / "codex").mkdir(mode=0o700)
    monkeypatch.setenv("CODEX_HOME", str(root / "codex"))
    monkeypatch.setenv("REKALL_JOBS_DIR", str(root / "jobs"))
    yield root / "jobs"
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("outcome", ["resumed", "skipped_at_resume", "cancelled", "explicitly_cancelled",
                                     "failed", "timed_out"])
def test_status_explain_and_history_keep_every_word_whole_at_80_columns(
        jobs: Path, outcome: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    clock = FakeClock()
    store = open_store(jobs, clock)
    thread = new_thread()
    job = scheduled_run(store, clock, thread, outcome)
    for argv in (["status", thread], ["explain", job], ["history"], ["history", "--thread", thread[:8]]):
        text = check_readable(argv, capsys, monkeypatch)
        assert job[:8] in text
    explained = check_readable(["explain", job], capsys, monkeypatch)
    assert job in explained and thread in explained
    assert not re.search(r"\w_\w*…", explained), "a name was shortened"
    assert explained.count(job) >= 2  # the evidence names the job in full too
    path_line = next(line for line in explained.splitlines() if line.startswith("Path: "))
    assert path_line.startswith("Path: scheduled → ")


def test_the_explained_diagram_is_printed_whole_ready_to_paste(jobs: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch):
    clock = FakeClock()
    store = open_store(jobs, clock)
    job = scheduled_run(store, clock, new_thread(), "resumed")
    text = check_readable(["explain", job], capsys, monkeypatch)
    lines = text.splitlines()
    start = lines.index("---")
    diagram = lines[start:]
    assert diagram[:4] == ["---", "title: Job lifecycle", "---", "stateDiagram-v2"]
    assert not any(line.startswith(("│", "╭", "╰")) for line in diagram)  # no box around it
    # The completion is one record per machine: the compaction machine's handover, then the route's choice.
    assert "    accepted --> compacted: compaction_completed (step 4)" in diagram
    assert "    pending --> waiting: route_chosen [a_route_carries_it] (step 5)" in diagram
    journal = next(line for line in lines if line.startswith("journal: "))
    assert Path(journal.removeprefix("journal: ")).is_file()  # the whole path, on one line


def test_status_of_a_live_job_cancel_and_states_are_readable_at_80_columns(
        jobs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    store = open_store(jobs)
    thread = new_thread()
    job = schedule(store, thread).job_id
    check_readable(["status", thread], capsys, monkeypatch)
    check_readable(["cancel", job[:8]], capsys, monkeypatch)
    check_readable(["doctor"], capsys, monkeypatch)
    check_readable(["history", "--limit", "1"], capsys, monkeypatch)
    check_readable(["--help"], capsys, monkeypatch)
    for verb in ("probe", "schedule", "status", "cancel", "explain", "history", "demo", "doctor", "states"):
        check_readable([verb, "--help"], capsys, monkeypatch)


def test_the_demo_reads_whole_at_80_columns():
    out = io.StringIO()
    status = run_demo(console=Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    assert status == 0, text
    rows = [row for table in MACHINES for row in table.rows]
    known = {s.value for table in MACHINES for s in table.states} | {s.value for s in JobState} \
        | {t.trigger for t in rows} | {t.guard_name for t in rows}
    names = {part.strip('[]().;:"') for word in words(text) for part in word.split(",")
             if "_" in part and "/" not in part}
    assert names and names <= known, f"not whole names (cut at 80 columns?): {names - known}"
    uuids = re.findall(r"[0-9a-f]{8}-[0-9a-f-]*[0-9a-f…]", text)
    assert uuids and all(len(u) == 36 or u.endswith("…") for u in uuids), uuids
    assert not any(len(line) > 80 and not unwrapped_on_purpose(line) for line in text.splitlines())
    assert "journal:" not in text  # its directory is removed at the end: no path to a file that is gone
    assert "private directory was removed" in text


def test_states_and_protocol_are_readable_at_80_columns(jobs: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch):
    check_readable(["states"], capsys, monkeypatch)
    check_readable(["protocol"], capsys, monkeypatch)


def test_a_long_path_in_an_outcome_is_printed_whole_on_its_own_line(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch):
    root = Path(tempfile.mkdtemp(prefix="r80-"))
    try:
        deep = root / ("a-folder-name-long-enough-to-fill-a-line-" * 3) / "handoff.json"
        monkeypatch.setenv("REKALL_JOBS_DIR", str(root / "jobs"))
        clock = FakeClock()
        store = open_store(root / "jobs", clock)
        thread = new_thread()
        job = schedule(store, thread).job_id
        with store.open_lifecycle(thread, job) as lifecycle:
            failure = {"errorCode": "handoff_changed", "error": f"cannot read {deep}"}
            run_lifecycle(lifecycle, clock, [*script(job, "failed")[:1], ("fail", failure)])
        store.release_lock(thread, job)
        for argv in (["status", thread], ["explain", job], ["history"]):
            text = check_readable(argv, capsys, monkeypatch)
            assert str(deep) in text, f"{argv}: the path was split or cut"
            assert "…" not in text.replace("processStartTime", "").split("Timeline")[0]
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("argv", [["probe", "019a0000-0000-7000-8000-000000000000"], ["status", "../../etc/passwd"],
                                  ["schedule", "019a0000-0000-7000-8000-000000000000", "--handoff", "/nonexistent/h"]])
def test_an_error_on_stderr_wraps_at_80_columns_between_words_and_commands(
        jobs: Path, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    said = {}
    for width in (80, 100_000):
        monkeypatch.setenv("COLUMNS", str(width))
        assert main(argv) in (1, 2)
        said[width] = capsys.readouterr().err
    assert words(said[80]) == words(said[100_000])
    lines = said[80].splitlines()
    assert all(len(line) <= 80 or len(line.split()) <= 2 for line in lines), lines  # a prefix and one long word
    assert all(line.count("`") % 2 == 0 for line in lines), "a command in backticks was split"
    assert lines[0].startswith("rekall: ") and any(line.startswith("  next: ") for line in lines)
    assert len(said[100_000].splitlines()) == 2  # the message and the next step, each one line


def test_probe_is_readable_at_80_columns(jobs: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch):
    from rekall.sim import start_sim_in_thread

    with start_sim_in_thread() as sim:
        for name, value in sim.env.items():
            monkeypatch.setenv(name, value)
        thread = sim.thread_id
        text = check_readable(["probe", thread], capsys, monkeypatch)
    assert thread in text
