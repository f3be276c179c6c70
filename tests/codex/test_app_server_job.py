"""A whole rekall job on the REAL shared app-server daemon, the agent scheduling it itself.

The daemon (one per session, tests/codex/conftest.py) has this checkout's ``rekall mcp`` in its
``config.toml``. A ``websockets`` client with no rekall code plays the user's terminal: it starts
the thread, fills the context and sends the message on which the agent (the mock model) calls
``schedule_compaction``. Everything after that is rekall: the MCP server finds the thread on the
shared app-server, the detached worker attaches with ``thread/resume``, waits for idle, compacts,
reads the post-compaction size from the real telemetry and starts the one continuation turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall.surfaces.explain import build_explanation
from rekall.states.status import wire
from rekall.store import JobStore
from tests.codex.daemonkit import Daemon, PeerClient, peer_client
from tests.mcpkit import HANDOFF, TERMINAL, wait_for_worker_exit
from tests.support.mock_model import MockModel

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

FILLER = "context filler " * 8000
JOB_S = 90.0


def on_thread(method: str, thread_id: str):
    def match(message: dict[str, Any]) -> bool:
        return message.get("method") == method and message.get("params", {}).get("threadId") == thread_id

    return match


async def run_turn(user: PeerClient, thread_id: str, text: str, *, allow_mcp_call: bool = False) -> dict[str, Any]:
    """A user turn, run to its end; ``allow_mcp_call``: the user allows the MCP tool call Codex asks about."""
    start = len(user.messages)
    turn = (await user.request("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]}))["turn"]
    if allow_mcp_call:
        await user.allow_mcp_call(thread_id, start=start, timeout=JOB_S)
    done = await user.wait_for(lambda m: on_thread("turn/completed", thread_id)(m)
                               and m["params"]["turn"]["id"] == turn["id"], start=start, timeout=JOB_S)
    return done["params"]["turn"]


async def wait_terminal(daemon: Daemon, thread_id: str) -> dict[str, Any]:
    store = JobStore.open_reader({"REKALL_JOBS_DIR": str(daemon.jobs_dir)})
    with anyio.fail_after(JOB_S):
        while (status := store.read_status(thread_id)).state not in TERMINAL:
            await anyio.sleep(0.05)
    return wire(status)  # as the status file and `rekall status --json` hold it


async def test_the_agent_schedules_its_own_compaction_on_the_shared_app_server_and_rekall_resumes_it_once(
        app_server_daemon: Daemon, daemon_model: MockModel) -> None:
    daemon = app_server_daemon
    async with peer_client(daemon.socket_path) as user:
        # The daemon's on-request approvals: Codex asks the user before the call (a destructive tool).
        thread = (await user.request("thread/start"))["thread"]
        thread_id = thread["id"]
        await user.wait_for(lambda m: m.get("method") == "mcpServer/startupStatus/updated"
                            and m["params"].get("name") == "rekall" and m["params"].get("status") == "ready",
                            timeout=JOB_S)
        daemon_model.queue_text(FILLER)
        await run_turn(user, thread_id, "Read the parser and tell me everything about it.")

        daemon_model.queue_mcp_call("rekall", "schedule_compaction", {"threadId": thread_id, "handoff": HANDOFF})
        seen_from = len(user.messages)
        await run_turn(user, thread_id, "Compact this conversation now, then write the changelog.", allow_mcp_call=True)
        done = await wait_terminal(daemon, thread_id)
        await wait_for_worker_exit(done["pid"])
        # The continuation turn the worker started, as the user's terminal saw it.
        continuation = await user.wait_for(lambda m: on_thread("turn/completed", thread_id)(m)
                                           and m["params"]["turn"]["id"] == done.get("resumeTurnId"),
                                           start=seen_from, timeout=JOB_S)
        seen = user.messages[seen_from:]
        turns = (await user.request("thread/turns/list", {"threadId": thread_id, "sortDirection": "asc"}))["data"]

    assert done["state"] == "resumed", done
    assert done["platform"] == "app-server" and done["outcomeMayBeUnknown"] is False
    assert continuation["params"]["turn"]["status"] == "completed"

    # The user's terminal saw exactly one compaction (its item started and completed) and one
    # continuation turn, both after the agent's turn with the tool call.
    compactions = [m["params"]["item"]["id"] for m in seen if on_thread("item/completed", thread_id)(m)
                   and m["params"]["item"]["type"] == "contextCompaction"]
    assert compactions == [done["compactionId"]]
    started = [m["params"]["turn"]["id"] for m in seen if on_thread("turn/started", thread_id)(m)]
    assert len(started) == 3 and started[-1] == done["resumeTurnId"]  # the agent's turn, compaction, continuation
    assert len(turns) == 4

    # The headroom rule read real telemetry: the post-compaction figure is smaller.
    assert done["contextTokensBefore"] and done["contextTokensAfter"] is not None
    assert done["contextTokensAfter"] < done["contextTokensBefore"]
    assert done["tokensReclaimed"] == done["contextTokensBefore"] - done["contextTokensAfter"]

    # The continuation reached the model once, with the marker and the exact handoff, on the compacted history.
    marker = f"[Automatic continuation requested through rekall; job {done['jobId']}]"
    (request,) = daemon_model.requests_containing(marker)
    assert request.kind == "turn"
    assert json.dumps(HANDOFF, indent=2, ensure_ascii=False) in request.text
    assert daemon_model.summary_text in request.text
    user_message = next(m["params"]["item"] for m in seen if on_thread("item/started", thread_id)(m)
                        and m["params"]["turnId"] == done["resumeTurnId"] and m["params"]["item"]["type"] == "userMessage")
    assert user_message["clientId"] == done["jobId"]  # the job marker, as on the extension

    # No deprecated call: on a paginated thread the worker followed without full-history hydration,
    # which the daemon answers with a deprecationNotice (its client logs every one it receives).
    store = JobStore.open_reader({"REKALL_JOBS_DIR": str(daemon.jobs_dir)})
    assert thread["historyMode"] == "paginated"
    worker_log = store.log_path(thread_id, done["jobId"]).read_text(encoding="utf-8")
    assert "compaction_completed" in worker_log and "deprecationNotice" not in worker_log, worker_log

    # The journal names the platform, and explain tells the whole job.
    explanation = build_explanation(store, done["jobId"])
    connected = next(n for n in explanation["notes"] if n["kind"] == "connected")
    assert connected["detail"]["platform"] == "app-server"
    assert connected["detail"]["serverVersion"] == daemon.version
    shown = rekall_cli(daemon, "explain", done["jobId"])
    assert "resumed" in shown and "platform=app-server" in shown

    # Every verb works on this platform: status, history, and probe naming it.
    assert json.loads(rekall_cli(daemon, "status", thread_id, "--json"))["platform"] == "app-server"
    (row,) = [r for r in json.loads(rekall_cli(daemon, "history", "--json")) if r["jobId"] == done["jobId"]]
    assert (row["platform"], row["state"]) == ("app-server", "resumed")
    probed = rekall_cli(daemon, "probe", thread_id)
    assert "platform" in probed and "app-server" in probed and "unknown until a worker follows" in probed
    probed_json = json.loads(rekall_cli(daemon, "probe", thread_id, "--json"))
    assert (probed_json["completedCompactions"], probed_json["compactionsInProgress"]) == (1, 0)


def rekall_cli(daemon: Daemon, *args: str, jobs: Path | None = None) -> str:
    """The CLI's output for the daemon's jobs (or for ``jobs``)."""
    jobs = daemon.jobs_dir if jobs is None else jobs
    env = {"CODEX_HOME": str(daemon.codex_home), "REKALL_JOBS_DIR": str(jobs), "PATH": "/usr/bin:/bin",
           "TMPDIR": str(jobs.parent), "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-m", "rekall", *args], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_pending_approval_holds_the_job_and_rekall_never_answers_it(
        app_server_daemon: Daemon, daemon_model: MockModel, private_dir: Path) -> None:
    from rekall.usecases import service
    from tests.mcpkit import wait_for_note
    from tests.support.mock_model import escalated_command

    daemon, jobs = app_server_daemon, private_dir / "jobs"
    untouched = private_dir / "never-created"
    env = {"CODEX_HOME": str(daemon.codex_home), "REKALL_JOBS_DIR": str(jobs), "REKALL_IDLE_STABLE_MS": "50",
           "TMPDIR": str(private_dir), "PATH": "/usr/bin:/bin"}  # HOME (the lock folder's) stays the test's
    async with peer_client(daemon.socket_path) as user:
        thread_id = (await user.request("thread/start"))["thread"]["id"]  # the daemon's on-request approvals
        await run_turn(user, thread_id, "Read the parser.")
        daemon_model.queue_tool_call("exec_command", escalated_command(f"touch {untouched}"))
        start = len(user.messages)
        await user.request("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": "Create it."}]})
        approval = await user.wait_for(lambda m: "id" in m and m.get("method", "").endswith("requestApproval")
                                       and m["params"].get("threadId") == thread_id, start=start, timeout=JOB_S)

        with anyio.fail_after(JOB_S):
            scheduled = await service.schedule(thread_id, {**HANDOFF, "resume": False}, env={**os.environ, **env})
            await wait_for_note(jobs, scheduled["jobId"], "connected", timeout=JOB_S)
        # Nothing happens to await while the approval waits: watch many idle-stable intervals.
        await anyio.sleep(1.0)
        held = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)}).read_status(thread_id)
        assert held.state == "waiting_for_idle", held
        assert not [m for m in user.messages[start:] if on_thread("item/started", thread_id)(m)
                    and m["params"]["item"]["type"] == "contextCompaction"]

        await user.connection.send(json.dumps({"id": approval["id"], "result": {"decision": "decline"}}))
        store = JobStore.open_reader({"REKALL_JOBS_DIR": str(jobs)})
        with anyio.fail_after(JOB_S):
            while (done := store.read_status(thread_id)).state not in TERMINAL:
                await anyio.sleep(0.05)
        await wait_for_worker_exit(done.pid)
        seen = user.messages[start:]

    assert done.state == "completed" and done.platform == "app-server", done
    resolved = [m["params"]["requestId"] for m in seen if on_thread("serverRequest/resolved", thread_id)(m)]
    assert resolved == [approval["id"]]  # resolved once: by the user's decline
    compactions = [m["params"]["item"]["id"] for m in seen if on_thread("item/completed", thread_id)(m)
                   and m["params"]["item"]["type"] == "contextCompaction"]
    assert compactions == [done.compactionId]
    assert not untouched.exists()


def rekall_cli_refused(daemon: Daemon, *args: str) -> dict[str, Any]:
    """The JSON error of a rekall command that must refuse (exit status 1)."""
    env = {"CODEX_HOME": str(daemon.codex_home), "REKALL_JOBS_DIR": str(daemon.jobs_dir), "PATH": "/usr/bin:/bin",
           "TMPDIR": str(daemon.jobs_dir.parent)}
    done = subprocess.run([sys.executable, "-m", "rekall", *args, "--json"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    return json.loads(done.stdout or done.stderr)


async def test_a_thread_whose_goal_is_active_is_refused_at_probe_and_schedule_and_no_job_is_created(
        app_server_daemon: Daemon, daemon_model: MockModel) -> None:
    daemon = app_server_daemon
    async with peer_client(daemon.socket_path) as user:
        thread_id = (await user.request("thread/start", {"approvalPolicy": "never"}))["thread"]["id"]
        await run_turn(user, thread_id, "Read the parser and tell me everything about it.")
        store = JobStore.open_reader({"REKALL_JOBS_DIR": str(daemon.jobs_dir)})
        # The goal runs the thread's turns by itself (the mock answers each): refused however busy it is.
        await user.request("thread/goal/set", {"threadId": thread_id, "objective": "write the changelog",
                                               "status": "active", "origin": "user"})
        try:
            probed = rekall_cli_refused(daemon, "probe", thread_id)
            scheduled = rekall_cli_refused(daemon, "schedule", thread_id)
        finally:
            await user.request("thread/goal/set", {"threadId": thread_id, "status": "paused", "origin": "user"})
        with anyio.fail_after(JOB_S):  # the goal's last turn ends
            while (await user.request("thread/read", {"threadId": thread_id}))["thread"]["status"]["type"] != "idle":
                await anyio.sleep(0.1)
        turns = (await user.request("thread/turns/list", {"threadId": thread_id, "sortDirection": "asc",
                                                          "itemsView": "full"}))["data"]
    for refused in (probed, scheduled):
        assert refused["error"]["code"] == "goal_active", refused
        assert "/goal pause" in refused["error"]["hint"] and "then schedule" in refused["error"]["hint"]
    assert store.read_status(thread_id).state == "not_scheduled"
    assert not [item for turn in turns for item in turn["items"] if item["type"] == "contextCompaction"]
