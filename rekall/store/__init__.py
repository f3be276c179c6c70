"""Durable job state: the jobs directory, journals, handoff records, locks and status files.

``JobStore.open()`` finds the directory; ``create_job`` schedules; ``open_lifecycle`` gives
the lock's holder a ``Lifecycle`` to fire triggers on; ``read_status`` rebuilds what a thread
is doing from the journal. See ``rekall.store.jobstore`` for the modules behind it (the
locking protocol is in ``rekall.store.schedule`` and ``rekall.store.locks``) and
``rekall.store.journal`` for the durability rules.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: the fast read paths do not import typing

#: Each public name and the module that defines it. Loaded on first use (PEP 562), so that a
#: fast read path importing one light module of this package (``paths``, ``fsread``,
#: ``views``) does not load the whole store with it.
_WHERE = {
    "Clock": "clock", "SystemClock": "clock",
    "HandoffChanged": "errors", "JournalCorrupt": "errors", "JournalUnusable": "errors", "LockBusy": "errors",
    "StatusCorrupt": "errors", "UnknownJob": "errors", "UnknownRecordVersion": "errors",
    "FileOps": "fsio",
    "MAX_HANDOFF_BYTES": "handoff", "read_handoff_file": "handoff", "validate_handoff": "handoff",
    "CreatedJob": "jobstore", "JobStore": "jobstore",
    "Lifecycle": "lifecycle",
    "Liveness": "processes", "LockHolder": "processes", "process_start_time": "processes",
    "resolve_jobs_dir": "paths",
    "HISTORY_LIMIT": "replay", "Replay": "replay",
}

if TYPE_CHECKING:
    from typing import Any

    from rekall.store.clock import Clock, SystemClock
    from rekall.store.errors import (
        HandoffChanged,
        JournalCorrupt,
        JournalUnusable,
        LockBusy,
        StatusCorrupt,
        UnknownJob,
        UnknownRecordVersion,
    )
    from rekall.store.fsio import FileOps
    from rekall.store.handoff import MAX_HANDOFF_BYTES, read_handoff_file, validate_handoff
    from rekall.store.jobstore import CreatedJob, JobStore
    from rekall.store.lifecycle import Lifecycle
    from rekall.store.processes import Liveness, LockHolder, process_start_time
    from rekall.store.paths import resolve_jobs_dir
    from rekall.store.replay import HISTORY_LIMIT, Replay


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_WHERE)
