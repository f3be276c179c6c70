"""Where the store gets its time. Tests inject ``rekall.testing.FakeClock`` instead."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Protocol

from rekall.states.model import Instant


class Clock(Protocol):
    def now(self) -> Instant: ...


class SystemClock:
    """UTC wall time for records; ``time.monotonic`` (system-wide on one boot) for durations."""

    def now(self) -> Instant:
        return Instant(datetime.now(timezone.utc), time.monotonic_ns() // 1_000_000)
