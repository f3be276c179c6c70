"""The chaos suite's tally: faults injected by kind, jobs run, outcomes, duplicates, data lost.

Tests record into the session-wide :data:`LEDGER`; ``tests/chaos/conftest.py`` prints it at
the end of the run and ``bench/chaos.py`` prints its own for the full-size run. Duplicate
requests and data lost must both stay at zero.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import attrs

from tests.chaos.harness import Audit


@attrs.define
class Ledger:
    faults: Counter[str] = attrs.field(factory=Counter)
    outcomes: Counter[str] = attrs.field(factory=Counter)
    jobs: int = 0
    duplicate_requests: int = 0
    data_lost: int = 0
    problems: list[str] = attrs.field(factory=list)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)  # runs record from threads

    def fault(self, kind: str, count: int = 1) -> None:
        with self._lock:
            self.faults[kind] += count

    def problem(self, text: str) -> None:
        with self._lock:
            self.problems.append(text)

    def job(self, result: Audit, label: str = "") -> None:
        with self._lock:
            self._job(result, label)

    def _job(self, result: Audit, label: str) -> None:
        self.jobs += 1
        self.outcomes[result.outcome] += 1
        self.duplicate_requests += result.duplicates
        self.data_lost += bool(result.data_lost)
        where = f"{label}: " if label else ""
        self.problems += [f"{where}{p}" for p in (*result.data_lost, *result.problems)]

    def merge(self, other: Ledger) -> None:
        with self._lock:
            self._merge(other)

    def _merge(self, other: Ledger) -> None:
        self.faults.update(other.faults)
        self.outcomes.update(other.outcomes)
        self.jobs += other.jobs
        self.duplicate_requests += other.duplicate_requests
        self.data_lost += other.data_lost
        self.problems += other.problems

    def to_json(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "outcomes": dict(sorted(self.outcomes.items())),
                "faults": dict(sorted(self.faults.items())), "duplicateRequests": self.duplicate_requests,
                "dataLost": self.data_lost, "problems": list(self.problems)}

    def lines(self) -> list[str]:
        """The summary as a plain-text table."""
        out = [f"jobs run: {self.jobs}    duplicate requests: {self.duplicate_requests} (must be 0)    "
               f"data lost: {self.data_lost} (must be 0)"]
        out += _table("outcome", self.outcomes)
        out += _table("fault injected", self.faults)
        if self.problems:
            out.append(f"problems ({len(self.problems)}):")
            out += [f"  - {p}" for p in self.problems[:30]]
        return out


def _table(title: str, counts: Counter[str]) -> list[str]:
    if not counts:
        return []
    width = max(len(title), *(len(k) for k in counts))
    rows = [f"  {title:<{width}}  {'count':>6}", f"  {'-' * width}  {'-' * 6}"]
    rows += [f"  {kind:<{width}}  {n:>6}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return rows


LEDGER = Ledger()
