"""Public helpers for testing code built on rekall (shipped like httpx's ``MockTransport``).

``FakeClock``: a clock for ``JobStore(clock=...)`` whose wall and monotonic time only move
when the test says so.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from rekall.states.model import Instant


class FakeClock:
    """Starts at ``start`` (UTC) and monotonic ``mono_ms``; ``advance`` moves both together."""

    def __init__(self, start: datetime | None = None, mono_ms: int = 1_000_000) -> None:
        self.wall = start or datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)
        self.mono_ms = mono_ms

    def now(self) -> Instant:
        return Instant(self.wall, self.mono_ms)

    def advance(self, ms: int) -> None:
        self.wall += timedelta(milliseconds=ms)
        self.mono_ms += ms


__all__ = ["FakeClock"]

# The in-memory transport (rekall.transports.memory): connect a session to a fake peer without sockets.
from rekall.transports.memory import MemoryStream, MemoryTransport, memory_stream_pair  # noqa: E402

__all__ += ["MemoryStream", "MemoryTransport", "memory_stream_pair"]
