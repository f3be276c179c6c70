"""A simulated extension owner and IPC router, for tests, demos and manual use.

* :class:`SimulatedOwner` — async, inside a test's event loop.
* :func:`start_sim_in_thread` — a synchronous, thread-safe handle (:class:`SimHandle`).
* :class:`ScriptedBackend` — the scripted thread; :mod:`rekall.sim.backend` documents the
  interface another backend (a real ``codex app-server``) implements.
"""

from __future__ import annotations

from rekall.sim.backend import Backend, OwnerPort, RouterError, ScriptedBackend
from rekall.sim.owner import GARBAGE, RecordedRequest, SimError, SimulatedOwner
from rekall.sim.threaded import SimHandle, start_sim_in_thread

__all__ = [
    "GARBAGE",
    "Backend",
    "OwnerPort",
    "RecordedRequest",
    "RouterError",
    "ScriptedBackend",
    "SimError",
    "SimHandle",
    "SimulatedOwner",
    "start_sim_in_thread",
]
