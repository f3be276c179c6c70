"""The REAL terminal UI started as plain ``codex`` (no ``--remote``), on a CODEX_HOME where no daemon runs.

Codex 0.171.0 has daemon auto-start on by default: the plain UI starts the shared app-server
itself and runs as its client, so rekall reaches its thread like any other on that server. With
a ``-c`` override on its command line the UI runs its own app-server instead, starts no daemon,
and ``probe_compaction`` says so, with the causes rekall cannot tell apart and how to check.

Each test has its own CODEX_HOME and loopback model; whatever daemon the UI started is stopped,
and every process it started ended by pid (tests/codex/daemonkit.py). The first start installs
the daemon's copy of Codex into that CODEX_HOME: the UI is left running until its socket appears.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rekall.kernel.settings import DEFAULT_APP_SERVER_SOCKET
from rekall.store import JobStore
from tests.codex.daemonkit import Daemon, PeerClient, peer_client, rekall_mcp_toml, stop_daemon, trusted_project_toml
from tests.codex.test_app_server_job import JOB_S
from tests.codex.test_terminal_ui import (ALLOW_QUESTION, FILLER, FIRST_PROMPT, SECOND_PROMPT, UI_START_S,
                                          a_first_turn, the_job_to_its_end, thread_of)
from tests.codex.tmuxkit import POLL_S, Tmux
from tests.mcpkit import HANDOFF
from tests.support.codex_home import make_isolated_home
from tests.support.mock_model import MockModel

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

#: The daemon's first start copies Codex into CODEX_HOME (about 424 MB): slow on a loaded machine.
DAEMON_START_S = 180.0


@pytest.fixture
def home_without_daemon(codex_binary: Path, mock_model: MockModel, private_dir: Path) -> Iterator[Daemon]:
    """A CODEX_HOME with this checkout's ``rekall mcp`` and a trusted workspace, and no daemon yet.
    Approvals on request in its config: the UI asks before ``schedule_compaction`` (destructive)."""
    home, jobs, workspace = private_dir / "codex-home", private_dir / "jobs", private_dir / "workspace"
    workspace.mkdir(mode=0o700)
    make_isolated_home(home, mock_model.base_url, rekall_mcp_toml(home, jobs) + trusted_project_toml(workspace),
                       approval_policy="on-request")
    daemon = Daemon(codex_binary, home, {"socketPath": str(home / DEFAULT_APP_SERVER_SOCKET)}, jobs, workspace)
    try:
        yield daemon
    finally:
        stop_daemon(daemon)


def ui_env(codex_home: Path, tmux: Tmux) -> dict[str, str]:
    return {"CODEX_HOME": str(codex_home), "HOME": str(tmux.tmp_dir), "PATH": os.environ.get("PATH", ""),
            "TERM": "xterm-256color", "LANG": "C.UTF-8"}


def socket_appears(daemon: Daemon, timeout: float) -> bool:
    """Whether the daemon's control socket appears within ``timeout`` s (a file, not an event: polled)."""
    deadline = time.monotonic() + timeout
    while not daemon.socket_path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


async def the_uis_thread(observer: PeerClient) -> str:
    """The user's thread the UI opened on the daemon (its title requests run in threads of their own)."""
    with anyio.fail_after(UI_START_S):
        while True:
            for thread_id in (await observer.request("thread/loaded/list", {}))["data"]:
                thread = (await observer.request("thread/read", {"threadId": thread_id}))["thread"]
                if thread.get("threadSource") == "user":
                    return str(thread_id)
            await anyio.sleep(POLL_S)


async def test_plain_codex_starts_the_shared_app_server_itself_and_rekall_compacts_and_resumes_its_thread(
        home_without_daemon: Daemon, mock_model: MockModel, tmux: Tmux) -> None:
    daemon = home_without_daemon
    assert not daemon.socket_path.exists()
    tmux.start([str(daemon.binary)], cwd=daemon.workspace, env=ui_env(daemon.codex_home, tmux))
    assert await anyio.to_thread.run_sync(lambda: socket_appears(daemon, DAEMON_START_S)), tmux.capture()
    version = daemon.daemon_command("version")
    assert version.returncode == 0 and '"running"' in version.stdout, version  # the UI started the daemon

    answer = f"CONTINUED-{uuid.uuid4().hex[:8]}"
    # The link under CODEX_HOME is too long a path to connect to here; its target is the daemon's own.
    async with peer_client(daemon.socket_path.resolve(), name="observer") as observer:
        thread_id = await the_uis_thread(observer)
        await a_first_turn(mock_model, tmux, observer, thread_id)

        # The agent's turn: the tool call (the user allows it), then its reply; then the continuation's answer.
        mock_model.queue_mcp_call("rekall", "schedule_compaction", {"threadId": thread_id, "handoff": HANDOFF})
        mock_model.queue_text("Compaction scheduled.")
        mock_model.queue_text(answer)
        await anyio.to_thread.run_sync(lambda: tmux.paste(SECOND_PROMPT, timeout=JOB_S))
        tmux.press("Enter")
        await anyio.to_thread.run_sync(lambda: tmux.wait_for_text(ALLOW_QUESTION, timeout=JOB_S))
        tmux.press("Enter")  # the first choice: allow this once
        done, pane, turns = await the_job_to_its_end(daemon, tmux, observer, thread_id, answer)
    assert done["state"] == "resumed", done
    assert done["platform"] == "app-server" and done["outcomeMayBeUnknown"] is False
    items = [item for turn in turns for item in turn["items"]]
    assert [i["id"] for i in items if i["type"] == "contextCompaction"] == [done["compactionId"]]
    assert turns[-1]["id"] == done["resumeTurnId"] and turns[-1]["status"] == "completed"
    assert len([r for r in mock_model.requests if r.kind == "compaction" and thread_of(r) == thread_id]) == 1
    assert "Context compacted" in pane


async def test_plain_codex_with_a_config_override_runs_its_own_app_server_and_probe_says_why_it_cannot_reach_it(
        home_without_daemon: Daemon, mock_model: MockModel, tmux: Tmux) -> None:
    daemon = home_without_daemon
    tmux.start([str(daemon.binary), "-c", "notify=[]"], cwd=daemon.workspace, env=ui_env(daemon.codex_home, tmux))
    await anyio.to_thread.run_sync(lambda: tmux.wait_for_text("›", timeout=UI_START_S))
    mock_model.queue_text(FILLER)
    await anyio.to_thread.run_sync(lambda: tmux.paste(FIRST_PROMPT, timeout=JOB_S))
    tmux.press("Enter")
    first = await anyio.to_thread.run_sync(lambda: mock_model.wait_for(
        lambda r: r.kind == "turn" and "error paths" in r.text, timeout=JOB_S))
    thread_id = thread_of(first)
    assert thread_id is not None and "mcp__rekall" in str(first.body.get("tools")), "rekall's tools are offered"
    await anyio.to_thread.run_sync(lambda: tmux.wait_for_text("›", timeout=JOB_S))

    # The agent probes its own thread through `rekall mcp`, run by the UI's own app-server.
    call_id = mock_model.queue_mcp_call("rekall", "probe_compaction", {"threadId": thread_id})
    mock_model.queue_text("rekall cannot reach this session.")
    await anyio.to_thread.run_sync(lambda: tmux.paste("Can rekall compact this conversation?", timeout=JOB_S))
    tmux.press("Enter")
    # The model's next request carries the tool's answer to that call.
    answered = await anyio.to_thread.run_sync(lambda: mock_model.wait_for(
        lambda r: r.kind == "turn" and call_id in json.dumps(r.body), timeout=JOB_S))

    said = answered.text
    assert "no shared app-server runs here either" in said  # what rekall saw
    assert "-c/--config" in said and "daemon_auto_start" in said  # the causes it cannot tell apart
    assert "`/status` shows `Server: Local background server`" in said  # how the user checks
    assert "codex --remote unix://" in said  # and a way to fix it
    # Nothing was sent: no daemon was started, no job exists, the model saw no compaction.
    assert not daemon.socket_path.exists()
    assert JobStore.open_reader({"REKALL_JOBS_DIR": str(daemon.jobs_dir)}).read_status(thread_id).state == \
        "not_scheduled"
    assert not [r for r in mock_model.requests if r.kind == "compaction"]


async def test_plain_codex_with_daemon_auto_start_off_runs_its_own_app_server_and_starts_no_daemon(
        home_without_daemon: Daemon, mock_model: MockModel, tmux: Tmux) -> None:
    from tests.codex.test_terminal_ui_reach import ON_SHARED, status_of_a_ui

    daemon = home_without_daemon
    make_isolated_home(daemon.codex_home, mock_model.base_url,
                       rekall_mcp_toml(daemon.codex_home, daemon.jobs_dir) + trusted_project_toml(daemon.workspace)
                       + "[features]\ndaemon_auto_start = false\n")
    _, card = await anyio.to_thread.run_sync(lambda: status_of_a_ui(daemon, tmux, [], {}))
    assert ON_SHARED not in card and "Server:" not in card, card
    assert not daemon.socket_path.exists()
