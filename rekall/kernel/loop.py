"""The event loop every rekall command runs its coroutine on: :func:`run`.

asyncio wakes a loop blocked in ``select()`` by ``send()`` on its self-pipe, a socket pair; that
is how a finished ``asyncio.to_thread`` call or ``call_soon_threadsafe`` gets noticed. Codex's
sandbox refuses that ``send()`` (:mod:`rekall.kernel.sandbox`), and asyncio swallows the error: the
loop would sleep for ever. There, the loop writes the same byte with ``write()``, which the sandbox
allows; elsewhere it is asyncio's own loop, untouched.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from rekall.kernel.sandbox import refuses_socket_send

T = TypeVar("T")


class _WokenByWrite(asyncio.SelectorEventLoop):
    """asyncio's selector loop, its self-pipe written with ``write()`` instead of ``send()``."""

    def _write_to_self(self) -> None:
        self_pipe = getattr(self, "_csock", None)  # asyncio's own end of the pair (None once closed)
        if self_pipe is None:
            return
        try:
            os.write(self_pipe.fileno(), b"\0")
        except OSError:  # full (a wake-up is pending anyway) or closed: as asyncio's own does
            pass


def _new_loop() -> asyncio.AbstractEventLoop:
    return _WokenByWrite() if refuses_socket_send() else asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a loop that wakes up wherever rekall runs."""
    with asyncio.Runner(loop_factory=_new_loop) as runner:
        return runner.run(main)
