"""The REAL Codex terminal UI, attached to the session's daemon, compacts and resumes through rekall.

``codex --remote unix://<socket>`` runs in a private tmux server (tests/codex/tmuxkit.py), in a
folder the daemon's config trusts. The test pastes the user's prompts and presses Enter; the mock
model answers the first with a long text (the context fills) and the second with a call of
``schedule_compaction`` through the daemon's ``rekall mcp``. Everything after that is rekall and
the daemon. Asserted: the job's record, the daemon's own record of the thread, the mock model's
requests, and the continuation's answer (a marker) in the pane; never the UI's wording.

The UI names each new conversation in a side thread (``threadSource: "thread_title"``); its
model request must never be taken for the user's thread.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import anyio
import pytest

from rekall.store import JobStore
from tests.codex.daemonkit import Daemon, PeerClient, peer_client
from tests.codex.test_app_server_job import JOB_S, rekall_cli, wait_terminal
from tests.codex.tmuxkit import Tmux
from tests.mcpkit import HANDOFF, wait_for_worker_exit
from tests.support.mock_model import MockModel, RecordedRequest

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

FILLER = "context filler " * 8000
#: Long enough that typing it key by key would be slow: it is pasted.
FIRST_PROMPT = "Read the parser module and tell me everything about its grammar and its error paths. " * 12
SECOND_PROMPT = "Compact this conversation now, then write the changelog."
UI_START_S = 60.0
#: What Codex 0.171.0's terminal UI asks before it calls a destructive MCP tool.
ALLOW_QUESTION = 'Allow the rekall MCP server to run tool "schedule_compaction"?'


def thread_of(request: RecordedRequest) -> str | None:
    metadata = ((request.body or {}).get("client_metadata") or {}).get("x-codex-turn-metadata")
    return json.loads(metadata).get("thread_id") if isinstance(metadata, str) else None


async def wait_rekall_connected(observer: PeerClient, thread_id: str) -> None:
    """The thread's ``rekall mcp`` answers (bounded): the agent may call it from the next turn on."""
    with anyio.fail_after(JOB_S):
        while True:
            listed = await observer.request("mcpServerStatus/list", {"threadId": thread_id, "serverName": "rekall",
                                                                     "detail": "toolsAndAuthOnly"})
            if [s["runtimeStatus"] for s in listed["data"]] == ["connected"]:
                return
            await anyio.sleep(0.1)


async def wait_idle(observer: Any, thread_id: str) -> None:
    """Until the daemon lists the thread idle (its turn is over), bounded."""
    with anyio.fail_after(JOB_S):
        while (await observer.request("thread/read", {"threadId": thread_id}))["thread"]["status"]["type"] != "idle":
            await anyio.sleep(0.1)


async def ui_after_a_first_turn(daemon: Daemon, model: MockModel, tmux: Tmux, observer: PeerClient,
                                approval_policy: str) -> str:
    """The terminal UI started on the daemon under ``-a approval_policy``, its first turn (which
    fills the context) over and rekall connected; returns the thread's id."""
    ui_env = {"CODEX_HOME": str(daemon.codex_home), "HOME": str(tmux.tmp_dir), "PATH": os.environ.get("PATH", ""),
              "TERM": "xterm-256color", "LANG": "C.UTF-8"}
    watch_from = len(observer.messages)
    tmux.start([str(daemon.binary), "--remote", f"unix://{daemon.socket_path}", "-a", approval_policy],
               cwd=daemon.workspace, env=ui_env)
    started = await observer.wait_for(lambda m: m.get("method") == "thread/started"
                                      and m["params"]["thread"].get("threadSource") == "user",
                                      start=watch_from, timeout=UI_START_S)
    thread_id = started["params"]["thread"]["id"]
    await a_first_turn(model, tmux, observer, thread_id)
    return thread_id


async def a_first_turn(model: MockModel, tmux: Tmux, observer: PeerClient, thread_id: str) -> None:
    """The user's first prompt in the UI's pane, which fills the context; returns once the turn is
    over and rekall's MCP server answers on the thread."""
    await anyio.to_thread.run_sync(lambda: tmux.wait_for_text("›", timeout=UI_START_S))
    model.queue_text(FILLER)
    await anyio.to_thread.run_sync(lambda: tmux.paste(FIRST_PROMPT, timeout=JOB_S))
    tmux.press("Enter")
    await anyio.to_thread.run_sync(lambda: model.wait_for(
        lambda r: r.kind == "turn" and thread_of(r) == thread_id and "error paths" in r.text, timeout=JOB_S))
    await wait_rekall_connected(observer, thread_id)
    # The first turn is over once the daemon lists the thread idle again.
    await wait_idle(observer, thread_id)


async def the_job_to_its_end(daemon: Daemon, tmux: Tmux, observer: PeerClient, thread_id: str,
                             answer: str) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """Once the agent's call is allowed: the job's end, the pane once it shows the continuation's
    ``answer``, and the daemon's turns of the thread."""
    done = await wait_terminal(daemon, thread_id)
    await wait_for_worker_exit(done["pid"])
    pane = await anyio.to_thread.run_sync(lambda: tmux.wait_for_text(answer, timeout=JOB_S))
    # The answer can be on screen a moment before the daemon ends its turn: read the turns once
    # the daemon lists the thread idle again.
    await wait_idle(observer, thread_id)
    turns = (await observer.request("thread/turns/list", {"threadId": thread_id, "sortDirection": "asc",
                                                          "itemsView": "full"}))["data"]
    return done, pane, turns


async def test_the_real_terminal_ui_attached_to_the_daemon_compacts_through_rekall_and_shows_the_continuation(
        app_server_daemon: Daemon, daemon_model: MockModel, tmux: Tmux) -> None:
    daemon = app_server_daemon
    answer = f"CONTINUED-{uuid.uuid4().hex[:8]}"
    async with peer_client(daemon.socket_path, name="observer") as observer:
        # "-a on-request": the UI asks its user before the MCP call (schedule_compaction is destructive).
        thread_id = await ui_after_a_first_turn(daemon, daemon_model, tmux, observer, "on-request")

        # The agent's turn: the tool call, then its reply; then the continuation's answer.
        daemon_model.queue_mcp_call("rekall", "schedule_compaction", {"threadId": thread_id, "handoff": HANDOFF})
        daemon_model.queue_text("Compaction scheduled.")
        daemon_model.queue_text(answer)
        await anyio.to_thread.run_sync(lambda: tmux.paste(SECOND_PROMPT, timeout=JOB_S))
        tmux.press("Enter")
        # What the user sees: Codex's question, naming the tool; nothing is scheduled until it is answered.
        asking = await anyio.to_thread.run_sync(lambda: tmux.wait_for_text(ALLOW_QUESTION, timeout=JOB_S))
        assert "1. Allow" in asking and "Cancel" in asking
        assert JobStore.open_reader({"REKALL_JOBS_DIR": str(daemon.jobs_dir)}).read_status(thread_id).state \
            == "not_scheduled"
        tmux.press("Enter")  # the first choice: allow this once
        done, pane, turns = await the_job_to_its_end(daemon, tmux, observer, thread_id, answer)
    print("\n--- the terminal UI's pane at the end ---\n" + "\n".join(line.rstrip() for line in pane.splitlines()))

    # The job: resumed on the shared app-server, with real telemetry on both sides of the compaction.
    assert done["state"] == "resumed", done
    assert done["platform"] == "app-server" and done["outcomeMayBeUnknown"] is False
    assert done["contextTokensAfter"] < done["contextTokensBefore"]

    # The daemon's own record of the user's thread: one compaction, then the continuation turn
    # carrying the job's id, which the model answered with the marker the pane shows.
    items: list[dict[str, Any]] = [item for turn in turns for item in turn["items"]]
    assert [i["id"] for i in items if i["type"] == "contextCompaction"] == [done["compactionId"]]
    assert turns[-1]["id"] == done["resumeTurnId"] and turns[-1]["status"] == "completed"
    (continuation,) = [i for i in turns[-1]["items"] if i["type"] == "userMessage"]
    assert continuation["clientId"] == done["jobId"]

    # The model: the UI's title request ran in its own thread and rekall never touched it; the
    # compaction and the one continuation (marker and exact handoff) went to the user's thread.
    titles = [r for r in daemon_model.requests if r.kind == "title" and FIRST_PROMPT[:40] in r.text]
    assert titles and all(thread_of(r) not in (None, thread_id) for r in titles)
    marker = f"[Automatic continuation requested through rekall; job {done['jobId']}]"
    carrying = daemon_model.requests_containing(marker)
    # Counted: the continuation turn's request. On 0.156 to 0.169 the UI's title request (its own
    # side thread) can carry the continuation's text too; it is the UI's, not a second delivery.
    (request,) = [r for r in carrying if r.kind != "title"]
    assert thread_of(request) == thread_id and request.kind == "turn"
    assert all(thread_of(r) != thread_id for r in carrying if r.kind == "title")
    assert json.dumps(HANDOFF, indent=2, ensure_ascii=False) in request.text
    compactions = [r for r in daemon_model.requests if r.kind == "compaction" and thread_of(r) == thread_id]
    assert len(compactions) == 1
    title_thread = thread_of(titles[0])
    assert not [r for r in daemon_model.requests if thread_of(r) == title_thread and r.kind != "title"]
    assert "title request" in rekall_cli_refusal(daemon, title_thread)


async def test_under_approval_policy_never_the_real_terminal_ui_shows_codex_refusing_schedule_compaction(
        app_server_daemon: Daemon, daemon_model: MockModel, tmux: Tmux) -> None:
    daemon = app_server_daemon
    async with peer_client(daemon.socket_path, name="observer") as observer:
        thread_id = await ui_after_a_first_turn(daemon, daemon_model, tmux, observer, "never")

        daemon_model.queue_mcp_call("rekall", "schedule_compaction", {"threadId": thread_id, "handoff": HANDOFF})
        daemon_model.queue_text("Codex refused the compaction.")
        await anyio.to_thread.run_sync(lambda: tmux.paste(SECOND_PROMPT, timeout=JOB_S))
        tmux.press("Enter")
        pane = await anyio.to_thread.run_sync(lambda: tmux.wait_for_text(NEVER_REFUSAL, timeout=JOB_S))
        await wait_idle(observer, thread_id)
    print("\n--- the terminal UI's pane ---\n" + "\n".join(line.rstrip() for line in pane.splitlines()))

    # Codex answered the agent itself: nothing reached rekall, nothing was asked of the user.
    assert ALLOW_QUESTION not in pane
    assert len(daemon_model.requests_containing(NEVER_REFUSAL)) == 1
    assert JobStore.open_reader({"REKALL_JOBS_DIR": str(daemon.jobs_dir)}).read_status(thread_id).state \
        == "not_scheduled"


#: What Codex 0.171.0 answers an agent's call of a destructive MCP tool under ``-a never``.
NEVER_REFUSAL = "MCP tool call requires approval, but approval policy is never"


def rekall_cli_refusal(daemon: Daemon, thread_id: str | None) -> str:
    """What ``rekall probe`` says of a thread it must refuse (exit status not 0)."""
    import subprocess
    import sys

    env = {"CODEX_HOME": str(daemon.codex_home), "REKALL_JOBS_DIR": str(daemon.jobs_dir), "PATH": "/usr/bin:/bin",
           "TMPDIR": str(daemon.jobs_dir.parent), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "rekall", "probe", str(thread_id)], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode != 0, done.stdout
    return done.stdout + done.stderr
