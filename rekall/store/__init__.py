"""Durable job state: the jobs directory, journals, handoff records, locks and status files.

``JobStore.open()`` finds the directory; ``create_job`` schedules; ``open_lifecycle`` gives
the job's owner a ``Lifecycle`` to fire triggers on; ``read_status`` rebuilds what a thread
is doing from the journal. See ``rekall.store.jobstore`` for the modules behind it (the
locking protocol is in ``rekall.store.schedule`` and ``rekall.store.locks``) and
``rekall.store.journal`` for the durability rules.
"""

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
from rekall.store.owner import Liveness, LockOwner, process_start_time
from rekall.store.paths import resolve_jobs_dir
from rekall.store.replay import HISTORY_LIMIT, Replay

__all__ = [
    "HISTORY_LIMIT",
    "MAX_HANDOFF_BYTES",
    "Clock",
    "CreatedJob",
    "FileOps",
    "HandoffChanged",
    "JobStore",
    "JournalCorrupt",
    "JournalUnusable",
    "Lifecycle",
    "Liveness",
    "LockBusy",
    "LockOwner",
    "Replay",
    "StatusCorrupt",
    "SystemClock",
    "UnknownJob",
    "UnknownRecordVersion",
    "process_start_time",
    "read_handoff_file",
    "resolve_jobs_dir",
    "validate_handoff",
]
