"""The chaos suite ends the session by printing its tally (see ``tests/chaos/ledger.py``)."""

from __future__ import annotations

import pytest

from tests.chaos.ledger import LEDGER


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not (LEDGER.jobs or LEDGER.faults):
        return
    terminalreporter.write_sep("=", "chaos summary")
    for line in LEDGER.lines():
        terminalreporter.write_line(line)
