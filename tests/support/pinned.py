"""Where the pinned real Codex CLI lives when ``scripts/install-codex`` has installed it.

Tests, ``bench/verify_codex.py`` and ``rekall sim --backend codex`` run the real engine from
the npm package ``@openai/codex``. ``scripts/install-codex`` installs the pinned version into
``$REKALL_CACHE_DIR`` (default ``$XDG_CACHE_HOME/rekall`` or ``~/.cache/rekall``); the test
command exports its launcher as ``REKALL_TEST_CODEX``. This module mirrors that layout so that
every caller finds the same binary, and says clearly when there is none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from rekall.adapters.app_server.releases import NEWEST, OLDEST

#: Keep in step with scripts/install-codex.
PINNED_VERSION = "0.171.0"
TEST_BINARY_VAR = "REKALL_TEST_CODEX"
#: The releases CI runs the real-daemon end-to-end tests on: the oldest of the declared range, one
#: in the middle and the newest (the pinned one, with the whole suite). scripts/test asks for the
#: others with ``python -m tests.support.pinned``; bench/codex_releases.py runs a whole job on each.
CI_RELEASES = (OLDEST, "0.163.0", NEWEST)


def cached_codex_launcher(env: Mapping[str, str] | None = None) -> Path:
    """The path scripts/install-codex installs the pinned launcher to (it may not exist)."""
    env = os.environ if env is None else env
    version = env.get("REKALL_CODEX_VERSION") or PINNED_VERSION
    if env.get("REKALL_CACHE_DIR"):
        cache = Path(env["REKALL_CACHE_DIR"])
    else:
        cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rekall"
    return cache / f"codex-{version}" / "node_modules" / ".bin" / "codex"


def find_real_codex(env: Mapping[str, str] | None = None) -> tuple[Path | None, str]:
    """The real codex launcher for tests and benches, or ``None`` with the reason it is missing."""
    env = os.environ if env is None else env
    explicit = env.get(TEST_BINARY_VAR)
    candidate = Path(explicit) if explicit else cached_codex_launcher(env)
    origin = TEST_BINARY_VAR if explicit else "the install-codex cache"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate, f"{candidate} (from {origin})"
    return None, (f"real Codex not found at {candidate} (from {origin}); run scripts/install-codex "
                  f"(needs npm) or set {TEST_BINARY_VAR}")


def running_in_ci(env: Mapping[str, str] | None = None) -> bool:
    """CI set to anything but empty or ``false``: there a missing real Codex fails the tests instead
    of skipping them (scripts/test applies the same rule)."""
    value = (os.environ if env is None else env).get("CI") or ""
    return value.strip().lower() not in ("", "false")


if __name__ == "__main__":
    # The CI releases besides the pinned one, one a line (scripts/test installs and tests each).
    print("\n".join(v for v in CI_RELEASES if v != PINNED_VERSION))
