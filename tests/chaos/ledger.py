"""The chaos suite's tally: faults injected and faults landed by kind, jobs run, outcomes,
duplicates, data lost.

A fault is *injected* when a test carries it out; it has *landed* when it met a live job (a
worker of the job ran and the job had not ended, or an armed fault fired on the job's
request). Randomized runs plan faults at random moments, so many land after the job ended;
the two counts are kept apart. Duplicate requests count every compact or start-turn request
that reached the router, refused ones included.

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
    landed: Counter[str] = attrs.field(factory=Counter)
    outcomes: Counter[str] = attrs.field(factory=Counter)
    jobs: int = 0
    duplicate_requests: int = 0
    data_lost: int = 0
    problems: list[str] = attrs.field(factory=list)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)  # runs record from threads

    def fault(self, kind: str, count: int = 1, *, on_live_job: bool = False) -> None:
        """Injected ``count`` times; ``on_live_job`` when the test made sure each met a live job."""
        with self._lock:
            self.faults[kind] += count
            if on_live_job:
                self.landed[kind] += count

    def landed_fault(self, kind: str) -> None:
        with self._lock:
            self.landed[kind] += 1

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
        self.landed.update(other.landed)
        self.outcomes.update(other.outcomes)
        self.jobs += other.jobs
        self.duplicate_requests += other.duplicate_requests
        self.data_lost += other.data_lost
        self.problems += other.problems

    def to_json(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "outcomes": dict(sorted(self.outcomes.items())),
                "faultsInjected": sum(self.faults.values()), "faultsLanded": sum(self.landed.values()),
                "faults": {kind: {"injected": n, "landed": self.landed[kind]} for kind, n in sorted(self.faults.items())},
                "duplicateRequests": self.duplicate_requests, "dataLost": self.data_lost,
                "problems": list(self.problems)}

    def lines(self) -> list[str]:
        """The summary as a plain-text table."""
        out = [f"jobs run: {self.jobs}    faults landed on a live job: {sum(self.landed.values())} of "
               f"{sum(self.faults.values())} injected    duplicate requests: {self.duplicate_requests} (must be 0)"
               f"    data lost: {self.data_lost} (must be 0)"]
        out += _table("outcome", {k: (n,) for k, n in self.outcomes.items()}, ("count",))
        out += _table("fault", {k: (n, self.landed[k]) for k, n in self.faults.items()}, ("injected", "landed"))
        if self.problems:
            out.append(f"problems ({len(self.problems)}):")
            out += [f"  - {p}" for p in self.problems[:30]]
        return out


def _table(title: str, counts: dict[str, tuple[int, ...]], columns: tuple[str, ...]) -> list[str]:
    if not counts:
        return []
    width = max(len(title), *(len(k) for k in counts))
    rows = [f"  {title:<{width}}" + "".join(f"  {c:>8}" for c in columns),
            f"  {'-' * width}" + "".join(f"  {'-' * 8}" for _ in columns)]
    rows += [f"  {kind:<{width}}" + "".join(f"  {n:>8}" for n in ns)
             for kind, ns in sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0]))]
    return rows


LEDGER = Ledger()
