"""The real Codex for tests: found, or skipped with the reason, or (in CI) a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pinned import find_real_codex, running_in_ci


def real_codex() -> Path:
    """The pinned real Codex launcher; in CI its absence fails the test, since skipping would turn
    the build green without the tests that matter most."""
    binary, reason = find_real_codex()
    if binary is None:
        if running_in_ci():
            pytest.fail(f"{reason}; CI requires the real Codex", pytrace=False)
        pytest.skip(reason)
    return binary
