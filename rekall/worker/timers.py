"""Timers that fire when they are due: not before, and not a millisecond after.

Two things make an asyncio timer late on Linux, and the worker's debounces pay both before a
request leaves:

* ``epoll`` and ``poll`` take their timeout in whole milliseconds, rounded up; ``select``
  takes microseconds. :func:`event_loop` is a loop that waits in ``select`` (a worker watches
  a handful of descriptors, far below ``select``'s limit, FD_SETSIZE = 1024).
* The kernel lets a wait of ``d`` end up to ``d / 1000`` late (its timer slack for ``select``
  and ``epoll``: 200 µs for a 200 ms debounce). A :class:`Timer` first wakes
  :data:`FINAL_APPROACH_S` early and then waits the short rest, whose slack is the kernel's
  floor, ``timer_slack_ns``: 50 µs by default, which :func:`event_loop` lowers to
  :data:`TIMER_SLACK_NS` for this process where Linux allows it.

Neither ever runs a callback before its time: the loop runs a handle only once its time has
come.
"""

from __future__ import annotations

import asyncio
import os
import selectors
from collections.abc import Callable
from typing import Any

#: How long before its time a timer wakes the loop to wait the rest precisely.
FINAL_APPROACH_S = 0.002
#: The timer slack the worker asks the kernel for (Linux's default is 50 µs on every timed wait).
TIMER_SLACK_NS = 1000


def event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop whose waits take microsecond timeouts (``select``) where it can."""
    if os.name != "posix":
        return asyncio.new_event_loop()
    try:  # this process's own slack (Linux 4.6+); elsewhere, or refused, waits are only a little later
        with open("/proc/self/timerslack_ns", "w") as slack:
            slack.write(str(TIMER_SLACK_NS))
    except OSError:
        pass
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


class Timer:
    """A callback scheduled at a loop time; :meth:`cancel` stops it at either stage."""

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float, callback: Callable[..., Any],
                 *args: Any) -> None:
        self.when = when
        self._loop, self._callback, self._args = loop, callback, args
        if when - loop.time() > FINAL_APPROACH_S:
            self._handle = loop.call_at(when - FINAL_APPROACH_S, self._approach)
        else:
            self._handle = loop.call_at(when, callback, *args)

    def _approach(self) -> None:
        self._handle = self._loop.call_at(self.when, self._callback, *self._args)

    def cancel(self) -> None:
        self._handle.cancel()

    def cancelled(self) -> bool:
        return self._handle.cancelled()


def call_at(when: float, callback: Callable[..., Any], *args: Any) -> Timer:
    """``callback(*args)`` on the running loop at ``when`` (its clock: ``time.monotonic()``), on time."""
    return Timer(asyncio.get_running_loop(), when, callback, *args)


def call_later(delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
    """``callback(*args)`` on the running loop ``delay`` seconds from now, on time."""
    loop = asyncio.get_running_loop()
    return Timer(loop, loop.time() + delay, callback, *args)
