"""A small tmpfs for a test, mounted where it asks (root only; skipped with the reason elsewhere)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(mount: Path, *, without_root: str) -> Iterator[Path]:
    """A 1 MiB tmpfs (0700) at ``mount``, unmounted afterwards; ``without_root`` says what covers
    the rule when the test is skipped for want of root."""
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs needs root; {without_root}")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def remount_read_only(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True, capture_output=True)
