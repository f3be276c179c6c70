"""The store's errors. Each says which file is at fault and what to do; none loses data."""

from __future__ import annotations

from rekall.kernel.errors import StoreError


class JournalCorrupt(StoreError):
    """A journal line that is not the torn tail of a crash failed its checks."""

    code = "journal_corrupt"


class UnknownRecordVersion(StoreError):
    """A journal record written by a newer rekall (or something else entirely)."""

    code = "journal_version_unknown"


class JournalUnusable(StoreError):
    """A write to the journal failed; this handle refuses further writes (never retry fsync)."""

    code = "journal_unusable"


class StatusCorrupt(StoreError):
    """A status file that cannot be read and cannot be rebuilt (no journal exists)."""

    code = "status_corrupt"


class LockBusy(StoreError):
    """The thread's lock is held and rekall cannot (or must not) take it over."""

    code = "lock_busy"


class HandoffChanged(StoreError):
    """The saved handoff record no longer matches its SHA-256, or does not bind this job."""

    code = "handoff_changed"


class UnknownJob(StoreError):
    """No journal exists for the job (or thread) asked about."""

    code = "unknown_job"
