"""The account-home seam for the processes a test starts (see ``sitecustomize`` here)."""

from __future__ import annotations

import os
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)


def account_seam(home: Path | str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that make a started Python process see ``home`` as the account's home:
    this folder first on ``PYTHONPATH`` (its ``sitecustomize``), and the home."""
    current = (os.environ if env is None else env).get("PYTHONPATH", "")
    parts = [part for part in current.split(os.pathsep) if part and part != _HERE]
    return {"PYTHONPATH": os.pathsep.join([_HERE, *parts]), "RKTEST_ACCOUNT_HOME": str(home)}


def account_env() -> dict[str, str]:
    """:func:`account_seam` for the test running now (tests/conftest.py named its home), for a
    process started with an environment of its own (Codex starting ``rekall mcp``)."""
    home = os.environ.get("RKTEST_ACCOUNT_HOME")
    return {} if home is None else account_seam(home)
