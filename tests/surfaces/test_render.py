"""What a person reads: status, probe and the watch's exit status, at the widths terminals have."""

from __future__ import annotations

import asyncio
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from rekall.usecases import service
from rekall.surfaces import render
from rekall.surfaces.render import print_job, print_probe, watch_job
from rekall.sim import start_sim_in_thread
from rekall.states.status import wire
from rekall.store import JobStore
from rekall.testing import FakeClock

from tests.jobkit import new_thread, scheduled_run


def shown(printer: Any, value: Any, width: int) -> str:
    out = io.StringIO()
    printer(value, Console(file=out, width=width, color_system=None))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def flat(text: str) -> str:
    """The words in reading order, whatever the line breaks."""
    return " ".join(text.split())


@pytest.mark.parametrize("width", [80, 61, 50, 40])
def test_status_keeps_every_id_whole_at_any_width(store: JobStore, clock: FakeClock, width: int):
    thread = new_thread()
    job = scheduled_run(store, clock, thread, "failed")
    text = shown(print_job, wire(store.read_status(thread)), width)
    assert thread in text and job in text
    assert max(len(line) for line in text.splitlines()) <= width


def test_status_says_when_the_outcome_may_be_unknown_and_when_the_job_ended(store: JobStore, clock: FakeClock):
    thread = new_thread()
    scheduled_run(store, clock, thread, "failed")
    status = store.read_status(thread)
    assert status.outcomeMayBeUnknown is True
    text = shown(print_job, wire(status), 80)
    assert "outcome may be unknown" in flat(text) and "check the thread before scheduling again" in flat(text)
    assert f"ended  {status.failedAt}" in text


def test_a_status_file_without_a_journal_is_shown_as_such(store: JobStore):
    thread = new_thread()
    old = {"jobId": new_thread(), "threadId": thread, "status": "completed", "completedAt": "2026-01-02T03:04:05Z"}
    store.paths.status_file(thread).write_text(json.dumps(old), encoding="utf-8")
    text = shown(print_job, wire(store.read_status(thread)), 80)
    assert "no journal backs this status file" in text
    assert "ended  2026-01-02T03:04:05Z" in text  # an old file's completedAt is still read


@pytest.mark.parametrize(("state", "status"), [("failed", 1), ("timed_out", 1), ("resumed", 0), ("skipped", 0),
                                                ("cancelled", 0), ("not_scheduled", 0), ("requesting", 1)])
def test_the_watch_exit_status_says_whether_the_job_did_its_work(state: str, status: int):
    assert render.watch_exit_status({"state": state}) == status


def test_the_watch_reads_until_the_job_ends(mocker):
    read = mocker.Mock(side_effect=[({"state": "requesting"}, ["scheduled", "requesting"]),
                                    ({"state": "failed", "errorCode": "owner_gone"}, ["scheduled", "failed"])])
    out = io.StringIO()
    final = watch_job(read, Console(file=out, width=80, color_system=None), interval_s=0)
    assert final["state"] == "failed" and read.call_count == 2
    assert "scheduled → failed" in out.getvalue()
    assert out.getvalue().endswith("\n")


def _probe(**options: Any) -> dict[str, Any]:
    with start_sim_in_thread(**options) as sim:
        return asyncio.run(service.probe(sim.thread_id, env=sim.env))


def test_probe_shows_why_the_thread_is_busy():
    result = _probe(runtime="active", turn_duration_s=None)
    assert result["idle"] is False and result["busyReason"]
    text = shown(print_probe, result, 80)
    assert f"busy because  {result['busyReason']}" in text
    assert "rekall waits for it to be idle" in text


def test_probe_shows_that_a_stopped_turn_makes_schedule_refuse():
    with start_sim_in_thread() as sim:
        sim.user_turn("do a thing")
        sim.stop_turn()
        result = asyncio.run(service.probe(sim.thread_id, env=sim.env))
    assert result["latestUserTurnStopped"] is True
    text = shown(print_probe, result, 80)
    assert "schedule refuses: the latest user turn was stopped" in text


def test_probe_shows_why_the_public_schema_check_failed():
    result = {"threadId": new_thread(), "idle": True, "compatibility": {
        "runtime": {"status": "compatible"},
        "publicSchema": {"status": "incompatible", "checks": [
            {"name": "thread_compact_start.params", "passed": False, "detail": "field threadId is gone"},
            {"name": "turn_start.text_input", "passed": True, "detail": "ok"}]}}}
    text = flat(shown(print_probe, result, 80))
    assert "schema problem thread_compact_start.params: field threadId is gone" in text
    assert "turn_start.text_input" not in text
    assert "schedule refuses: the public app-server schema check did not pass" in text
    errored = {"threadId": new_thread(), "compatibility": {"publicSchema": {
        "status": "error", "code": "codex_not_found", "message": "no codex binary on PATH",
        "hint": "set REKALL_CODEX_BINARY"}}}
    text = flat(shown(print_probe, errored, 80))
    assert "could not be checked: no codex binary on PATH" in text and "set REKALL_CODEX_BINARY" in text


def test_a_new_handoff_for_a_thread_with_an_unfinished_job_is_refused_out_loud(tmp_path: Path, mocker):
    this_process = mocker.Mock(return_value=os.getpid())  # a live "worker": the first job stays unfinished
    handoff = {"summary": "s", "preserve": [], "discard": [], "nextStep": "n", "resume": True}
    with start_sim_in_thread() as sim:
        env = {**sim.env, "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
        first = asyncio.run(service.schedule(sim.thread_id, handoff, env=env, spawn=this_process))
        second = asyncio.run(service.schedule(sim.thread_id, {**handoff, "summary": "other"}, env=env,
                                              spawn=this_process))
        thread = sim.thread_id
    this_process.assert_called_once()  # only the first call started a worker
    assert second["alreadyScheduled"] is True and second["jobId"] == first["jobId"]
    assert second["handoffIgnored"] is True and "NOT saved" in second["message"]
    assert "NOT saved" in shown(print_job, second, 80)
    saved = JobStore.open(env).verify_handoff(thread, first["jobId"], first["handoffSha256"])
    assert "summary" in json.dumps(saved) and "other" not in json.dumps(saved)
