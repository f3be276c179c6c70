"""Which terminal sessions are on the shared app-server, told by the REAL terminal UI and daemon of 0.171.0.

Each case starts the terminal UI under tmux on the session's daemon home (a daemon runs), types
``/status``, reads its ``Session:`` id and ``Server:`` line, and asks the daemon whether it has
that thread loaded. A UI on the shared app-server shows ``Server: Local background server`` and its
thread is the daemon's; a UI that runs its own app-server shows no ``Server:`` line and the daemon
does not know its thread. These are the flags rekall's out-of-reach message names
(``rekall.adapters.app_server.platform.OWN_APP_SERVER``) and docs/app-server.md lists.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from tests.codex.daemonkit import Daemon, peer_client
from tests.codex.test_plain_terminal_ui import ui_env
from tests.codex.test_terminal_ui import UI_START_S
from tests.codex.tmuxkit import Tmux

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

SESSION = re.compile(r"Session:\s+([0-9a-f]{8}-[0-9a-f-]{27})")
ON_SHARED = "Server:              Local background server"
READY = "Ask Codex to do anything"
CARD_END = "Limits:"  # the last line of a /status card
TYPED_STATUS = "› /status"
FEATURES_DIFFER = "Background server has incompatible feature settings"
RUN_WITHOUT_DAEMON = "1"  # "1. Run without daemon this time"; 2 restarts the daemon, 3 cancels
PROFILE = "reach-profile"

#: ``--enable`` of a feature the daemon has on too changes nothing it shares.
JOINS = [[], ["-a", "never"], ["-m", "mock-model"], ["-s", "read-only"], ["--enable", "goals"]]
RUNS_ITS_OWN = [["-c", "notify=[]"], ["--search"], ["-p", PROFILE], ["--strict-config"], ["--approve-for-me"],
                ["--dangerously-bypass-hook-trust"], ["--no-daemon"]]


def status_of_a_ui(daemon: Daemon, tmux: Tmux, flags: list[str], extra_env: dict[str, str], *,
                   choice: str | None = None) -> tuple[str, str]:
    """The UI's session id and the ``/status`` card that names it; ``choice``: the key pressed when the UI
    asks what to do about feature settings the daemon does not share."""
    tmux.start([str(daemon.binary), *flags], cwd=daemon.workspace, env={**ui_env(daemon.codex_home, tmux), **extra_env})
    if choice is not None:
        tmux.wait_for_text(FEATURES_DIFFER, timeout=UI_START_S)
        tmux.press(choice)
    tmux.wait_for_text(READY, timeout=UI_START_S)
    return the_session_card(tmux)


def the_session_card(tmux: Tmux) -> tuple[str, str]:
    """The first ``/status`` card that names the UI's session, and that id.

    The composer is ready before the UI has its thread, and a card is what the UI knew when it was asked:
    asked before the thread, it has no ``Session:`` line and never gains one (seen on a loaded machine).
    So the UI is asked again, each time once its previous card is printed, until a card names a session."""
    deadline = time.monotonic() + UI_START_S
    unnamed = 0
    while True:
        card = status_card(tmux, timeout=max(deadline - time.monotonic(), 0.0))
        found = SESSION.search(card)
        if found:
            return found.group(1), card
        unnamed += 1
        assert time.monotonic() < deadline, f"no /status card named a session within {UI_START_S} s ({unnamed} asked):\n{card}"


def status_card(tmux: Tmux, *, timeout: float) -> str:
    """Type ``/status``; the card the UI prints for it, the last in the pane (from its ``/status`` line on)."""
    tmux.run("send-keys", "-t", "ui", "-l", "/status")
    tmux.wait_for_text(TYPED_STATUS, timeout=timeout)  # in the composer: earlier cards show "/status" too
    tmux.press("Enter")
    # The UI holds the command in the composer while it starts ("Waiting for startup"); taken, it prints the card.
    pane = tmux.wait_until(lambda text: TYPED_STATUS not in text and CARD_END in text, "a /status card",
                           timeout=timeout)
    lines = pane.splitlines()
    end = max(i for i, line in enumerate(lines) if CARD_END in line)
    start = max(i for i, line in enumerate(lines[:end]) if line.strip() == "/status")
    return "\n".join(lines[start:end + 1])


@pytest.mark.parametrize("flags", [["--enable", "chronicle"], ["--disable", "hooks"]], ids=" ".join)
async def test_a_feature_setting_the_daemon_does_not_share_makes_the_ui_ask_and_running_without_it_is_out_of_reach(
        app_server_daemon: Daemon, tmux: Tmux, flags: list[str]) -> None:
    daemon = app_server_daemon
    session, card = await anyio.to_thread.run_sync(
        lambda: status_of_a_ui(daemon, tmux, flags, {}, choice=RUN_WITHOUT_DAEMON))
    assert session not in await loaded_on_the_daemon(daemon) and ON_SHARED not in card, card


async def loaded_on_the_daemon(daemon: Daemon) -> set[str]:
    async with peer_client(daemon.socket_path, name="observer") as observer:
        return set((await observer.request("thread/loaded/list", {}))["data"])


@pytest.mark.parametrize(("flags", "extra_env", "joins"), [
    *[(flags, {}, True) for flags in JOINS],
    *[(flags, {}, False) for flags in RUNS_ITS_OWN],
    ([], {"CODEX_EXEC_SERVER_URL": "ws://127.0.0.1:9"}, False),
], ids=lambda v: " ".join(v) if isinstance(v, list) else (",".join(v) if isinstance(v, dict) else None))
async def test_the_terminal_ui_joins_the_shared_app_server_unless_its_command_line_needs_its_own(
        app_server_daemon: Daemon, tmux: Tmux, flags: list[str], extra_env: dict[str, str], joins: bool) -> None:
    daemon = app_server_daemon
    (daemon.codex_home / f"{PROFILE}.config.toml").write_text('model = "mock-model"\n', encoding="utf-8")
    session, card = await anyio.to_thread.run_sync(lambda: status_of_a_ui(daemon, tmux, flags, extra_env))
    on_the_daemon = session in await loaded_on_the_daemon(daemon)
    assert (on_the_daemon, ON_SHARED in card) == (joins, joins), card


def exec_session(daemon: Daemon, *flags: str) -> str:
    """``codex exec`` run to its end; the session id it prints."""
    env = {"CODEX_HOME": str(daemon.codex_home), "HOME": str(daemon.workspace), "PATH": os.environ.get("PATH", "")}
    done = subprocess.run([str(daemon.binary), "exec", *flags, "--skip-git-repo-check", "Say hello."],
                          cwd=daemon.workspace, env=env, capture_output=True, text=True, timeout=UI_START_S)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r"(?:session|thread) id: (\S+)", done.stdout + done.stderr)
    assert found, done.stderr[-2000:]
    return found.group(1)


async def test_codex_exec_runs_its_own_app_server_unless_given_remote(app_server_daemon: Daemon) -> None:
    daemon = app_server_daemon
    alone = await anyio.to_thread.run_sync(lambda: exec_session(daemon))
    remote = await anyio.to_thread.run_sync(
        lambda: exec_session(daemon, "--remote", f"unix://{Path(daemon.socket_path).resolve()}"))
    loaded = await loaded_on_the_daemon(daemon)
    assert remote in loaded and alone not in loaded
