"""Saving a checkpoint through the MCP tool and the CLI, and every view that shows it afterwards:
status, compaction_status, explain, history, prune."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rekall.store import JobStore
from rekall.store.checkpoint import current, history
from rekall.store.prune import prune
from rekall.surfaces.cli_entry import answer_from_views
from rekall.surfaces.explain import build_explanation
from rekall.testing import FakeClock
from rekall.usecases.service import status_reply
from tests.jobkit import new_thread, open_store
from tests.support.codex_opening import codex_meta
from tests.surfaces.test_checkpoint_hook import NOTE, with_checkpoint
from tests.surfaces.test_mcp_schema import _call, rekall_mcp
from tests.surfaces.test_session_hook import env_for, hook_input, job_until, run_hook, transcript_with

pytestmark = pytest.mark.anyio


def delivered_once(tmp_path: Path, jobs: Path, thread: str, *earlier: str) -> None:
    """The checkpoint delivered after a compaction in 2099 (``earlier``: the compactions before it)."""
    transcript = transcript_with(tmp_path / "t" / f"{thread}.jsonl", *earlier, "2099-01-01T00:00:00.000Z")
    assert run_hook(hook_input(thread, transcript), env_for(jobs))[0]


async def test_the_agent_saves_its_own_threads_checkpoint_and_compaction_status_shows_it(tmp_path: Path):
    thread = new_thread()
    async with rekall_mcp(tmp_path) as client:
        saved = await _call(client, "save_checkpoint", {"threadId": thread, "handoff": NOTE})
        again = await _call(client, "save_checkpoint", {"threadId": thread, "handoff": {**NOTE, "resume": False}})
        other = await client.call_tool("save_checkpoint", {"threadId": new_thread(), "handoff": NOTE},
                                       meta=codex_meta(thread))
        resumed = await client.call_tool("save_checkpoint", {"threadId": thread, "handoff": {**NOTE, "resume": True}},
                                         meta=codex_meta(thread))
        delivered_once(tmp_path, tmp_path / "jobs", thread)
        status = await _call(client, "compaction_status", {"threadId": thread})
    assert saved["changed"] is True and again["changed"] is False
    assert saved["hookCanDeliver"] is False and "not installed" in saved["hookWarning"]  # no plugin in this home
    assert other.is_error and "[not_callers_thread]" in other.content[0].text
    assert resumed.is_error and "never starts a turn" in resumed.content[0].text
    assert status["state"] == "not_scheduled"
    shown = status["checkpoint"]
    assert (shown["state"], shown["savedAt"], shown["bytes"]) == ("saved", saved["savedAt"], saved["bytes"])
    assert [(d["route"], d["checkpointSha256"]) for d in shown["deliveries"]] == [("hook", saved["checkpointSha256"])]
    assert "transcript" in shown["note"]


def test_status_explain_and_history_show_the_checkpoint_and_its_deliveries(tmp_path: Path):
    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "completed", resume=False)
    with_checkpoint(jobs, thread)
    delivered_once(tmp_path, jobs, thread, store.read_status(thread).requestedAt)  # after the job's own compaction
    env = env_for(jobs)
    assert answer_from_views(["status", thread, "--json"], env) is None  # the full path adds the checkpoint
    shown = status_reply(thread, env=env)["checkpoint"]
    assert shown["state"] == "saved" and len(shown["deliveries"]) == 1
    assert build_explanation(JobStore.open_reader(env), job)["checkpoint"] == shown
    run = {**os.environ, **env}
    people = subprocess.run([sys.executable, "-m", "rekall", "history", "--thread", thread], env=run,
                            capture_output=True, text=True, timeout=60)
    assert people.returncode == 0 and "Checkpoint: saved" in people.stdout and "delivered" in people.stdout
    words = subprocess.run([sys.executable, "-m", "rekall", "status", thread], env=run, capture_output=True,
                           text=True, timeout=60)
    assert "Checkpoint: saved" in words.stdout, words.stdout


def test_the_cli_saves_from_standard_input_clears_and_says_so_in_json(tmp_path: Path):
    thread = new_thread()
    env = {**os.environ, "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "CODEX_HOME": str(tmp_path / "home")}
    cli = [sys.executable, "-m", "rekall", "checkpoint", thread]
    saved = subprocess.run([*cli, "--handoff", "-", "--json"], input=json.dumps(NOTE), env=env, capture_output=True,
                           text=True, timeout=60)
    assert saved.returncode == 0, saved.stderr
    reply = json.loads(saved.stdout)
    assert reply["changed"] is True and reply["hookCanDeliver"] is False and reply["hookWarning"]
    refused = subprocess.run([*cli, "--handoff", "-"], input=json.dumps({**NOTE, "resume": True}), env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "never starts a turn" in refused.stderr
    both = subprocess.run([*cli, "--clear", "--handoff", "-"], env=env, capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "exactly one of --handoff FILE and --clear" in both.stderr
    cleared = subprocess.run([*cli, "--clear", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(cleared.stdout)["cleared"] is True
    assert current(tmp_path / "jobs", thread) is None and len(history(tmp_path / "jobs", thread)) == 2


def test_prune_removes_a_checkpoint_whose_last_event_is_older_than_the_rule(tmp_path: Path):
    from datetime import timedelta

    jobs, thread = tmp_path / "jobs", new_thread()
    with_checkpoint(jobs, thread)
    delivered_once(tmp_path, jobs, thread)
    store = JobStore.open_reader(env_for(jobs))
    assert prune(store, older_than=timedelta(days=1), keep=None, dry_run=False)["prunedCheckpoints"] == []
    listed = prune(store, older_than=timedelta(0), keep=None, dry_run=True)["prunedCheckpoints"]
    assert [row["threadId"] for row in listed] == [thread] and len(listed[0]["files"]) == 3
    assert prune(store, older_than=timedelta(0), keep=None, dry_run=False)["prunedCheckpoints"][0]["files"] == \
        listed[0]["files"]
    assert history(jobs, thread) == [] and not list(jobs.glob(f"{thread}*"))


async def test_a_checkpoint_is_saved_while_a_job_holds_the_thread_and_the_job_keeps_its_own_handoff(tmp_path: Path):
    from rekall.usecases.checkpoint import save_checkpoint

    jobs = tmp_path / "jobs"
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    job, _ = job_until(store, clock, thread, "completed", resume=False, steps=3)
    held = store.read_status(thread)
    assert held.state not in ("completed", "failed", "cancelled") and store.lock_holder(thread) is not None
    saved = await save_checkpoint(thread, NOTE, env={**env_for(jobs), "CODEX_HOME": str(tmp_path / "home")})
    assert saved["changed"] is True and current(jobs, thread)["sha256"] == saved["checkpointSha256"]
    after = store.read_status(thread)
    assert (after.jobId, after.state, after.handoffSha256) == (job, held.state, held.handoffSha256)
