"""A private tmux server that runs the real Codex terminal UI for a test.

Each :class:`Tmux` is its own server (``tmux -L <unique name> -f /dev/null``) whose socket lives
in the test's tmp dir (``TMUX_TMPDIR``), so it never meets the user's tmux or another test's.
:meth:`Tmux.close` kills the server, ends the UI process by pid if it outlived its pane, and
removes the socket. Text is pasted (``set-buffer`` + ``paste-buffer -p``, a bracketed paste)
rather than typed key by key; every wait polls ``capture-pane`` against a deadline.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.codex.daemonkit import EXIT_WAIT_S, _wait_gone
from tests.support.pinned import running_in_ci

TMUX_COMMAND_TIMEOUT_S = 10.0
POLL_S = 0.1


def tmux_binary() -> str:
    """tmux on PATH. ``.ci/run`` installs it where it is missing; in CI its absence fails the test
    (like the real Codex's), elsewhere the test is skipped with the reason."""
    found = shutil.which("tmux")
    if found is None:
        reason = "tmux is not installed (`.ci/run` installs it; or `apt-get install tmux`)"
        if running_in_ci():
            pytest.fail(f"{reason}; CI requires the terminal-UI test", pytrace=False)
        pytest.skip(reason)
    return found


class Tmux:
    def __init__(self, tmp_dir: Path, *, width: int = 160, height: int = 50) -> None:
        self.tmp_dir = tmp_dir
        self.name = f"rekall-{uuid.uuid4().hex[:12]}"
        self.width, self.height = width, height
        self._argv = [tmux_binary(), "-L", self.name, "-f", "/dev/null"]
        self._env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMUX_TMPDIR": str(tmp_dir)}
        self.pane_pid: int | None = None

    @property
    def socket_path(self) -> Path:
        return self.tmp_dir / f"tmux-{os.getuid()}" / self.name

    def run(self, *args: str) -> str:
        done = subprocess.run([*self._argv, *args], env=self._env, capture_output=True, text=True,
                              timeout=TMUX_COMMAND_TIMEOUT_S)
        if done.returncode != 0:
            raise AssertionError(f"tmux {args[0]} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def start(self, argv: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        """Run ``argv`` in a new detached session with exactly ``env`` (``env -i``)."""
        command = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv])
        self.run("new-session", "-d", "-s", "ui", "-x", str(self.width), "-y", str(self.height), "-c", str(cwd), command)
        self.pane_pid = int(self.run("display-message", "-p", "-t", "ui", "#{pane_pid}").strip())

    def capture(self) -> str:
        return self.run("capture-pane", "-p", "-J", "-t", "ui")

    def wait_until(self, shown: Callable[[str], bool], what: str, *, timeout: float) -> str:
        """The pane once ``shown(pane)``; AssertionError naming ``what``, with the pane, after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            pane = self.capture()
            if shown(pane):
                return pane
            if time.monotonic() > deadline:
                raise AssertionError(f"the pane did not show {what} within {timeout} s; it shows:\n{pane}")
            time.sleep(POLL_S)

    def wait_for_text(self, text: str, *, timeout: float) -> str:
        """The pane once it shows ``text``; AssertionError with the pane after ``timeout`` s."""
        return self.wait_until(lambda pane: text in pane, repr(text), timeout=timeout)

    def paste(self, text: str, *, timeout: float) -> None:
        """Paste ``text`` and wait until the pane changes (the UI may show a long paste as a placeholder)."""
        before = self.capture()
        self.run("set-buffer", "-b", "prompt", text)
        self.run("paste-buffer", "-p", "-d", "-b", "prompt", "-t", "ui")
        deadline = time.monotonic() + timeout
        while self.capture() == before:
            if time.monotonic() > deadline:
                raise AssertionError(f"the pane did not change within {timeout} s of pasting; it shows:\n{before}")
            time.sleep(POLL_S)

    def press(self, key: str) -> None:
        self.run("send-keys", "-t", "ui", key)

    def close(self) -> None:
        subprocess.run([*self._argv, "kill-server"], env=self._env, capture_output=True, timeout=TMUX_COMMAND_TIMEOUT_S)
        if self.pane_pid is not None:  # the UI gets SIGHUP with its pane; end it by pid if it lingers
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if _wait_gone(self.pane_pid, EXIT_WAIT_S):
                    break
                try:
                    os.kill(self.pane_pid, sig)
                except ProcessLookupError:
                    break
            assert _wait_gone(self.pane_pid, EXIT_WAIT_S), f"the terminal UI (pid {self.pane_pid}) survived SIGKILL"
        self.socket_path.unlink(missing_ok=True)
