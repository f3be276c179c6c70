"""The jobs of one jobs directory, read from their journals: one job, a thread's jobs in order,
its latest, a job found by its id or its thread's.

A thread's jobs are ordered by the job number their first record carries (then creation
time), never by file times; only the first record of each journal is read to order them.
"""

from __future__ import annotations

from pathlib import Path

from rekall.kernel.ids import job_id as valid_job, thread_id as valid_thread
from rekall.states.status import read
from rekall.store.errors import JournalCorrupt, UnknownJob
from rekall.store.journal import first_record
from rekall.store.paths import JobPaths
from rekall.store.replay import HISTORY_LIMIT, Replay, replay_file
from rekall.store.wire import TransitionRecord


class Catalog:
    """Read-only access to the journals of ``paths``'s directory."""

    def __init__(self, paths: JobPaths) -> None:
        self.paths = paths

    @property
    def root(self) -> Path:
        return self.paths.root

    def load(self, thread_id: str, job_id: str) -> Replay:
        """One job, read-only, from its journal."""
        thread, job = valid_thread(thread_id), valid_job(job_id)
        try:
            return replay_file(self.paths.journal(thread, job), thread, job)
        except FileNotFoundError:
            raise UnknownJob(f"no job {job} for thread {thread} in {self.root}",
                             hint="check the ids with `rekall history`") from None

    def load_if_exists(self, thread: str, job: str) -> Replay | None:
        try:
            return self.load(thread, job)
        except UnknownJob:
            return None

    def ordered(self, thread: str, jobs: list[str] | None = None) -> list[tuple[int, str, str]]:
        """``(job number, created at, job id)`` of the thread's jobs (or of ``jobs``, already listed), oldest
        first, from first records only."""
        order = []
        for job in jobs if jobs is not None else [job for _, job in self.paths.journals(thread=thread)]:
            try:
                first = first_record(self.paths.journal(thread, job))
            except FileNotFoundError:
                continue  # pruned meanwhile
            number = read(first.fields).jobNumber if isinstance(first, TransitionRecord) else None
            if not isinstance(number, int):
                raise JournalCorrupt(f"{self.paths.journal(thread, job)} does not start by scheduling a job",
                                     hint="move it aside; nothing was changed")
            order.append((number, first.at, job))
        return sorted(order)

    def thread_jobs(self, thread_id: str, *, before: int | None = None, last: int | None = None,
                    listed: list[str] | None = None) -> list[Replay]:
        """The thread's jobs, oldest first: optionally only those numbered below ``before``, and the
        ``last`` few of them (only those are replayed). ``listed``: the thread's job ids, when known."""
        thread = valid_thread(thread_id)
        order = [entry for entry in self.ordered(thread, listed) if before is None or entry[0] < before]
        return [self.load(thread, job) for _, _, job in order[-last if last else 0:]]

    def latest(self, thread_id: str, listed: list[str] | None = None) -> Replay | None:
        jobs = self.thread_jobs(thread_id, last=1, listed=listed)
        return jobs[0] if jobs else None

    def next_job_number(self, thread: str) -> int:
        order = self.ordered(thread)
        return order[-1][0] + 1 if order else 1

    def earlier(self, job: Replay, listed: list[str] | None = None) -> list[Replay]:
        """The jobs a status's history summarises: the last few before ``job``."""
        return self.thread_jobs(job.thread_id, before=job.job_number, last=HISTORY_LIMIT, listed=listed)

    def all_jobs(self) -> list[tuple[str, str]]:
        """``(thread, job)`` of every journal in the store."""
        return self.paths.journals()

    def find(self, job_or_thread: str) -> Replay:
        """A job by its id, or a thread's latest job by the thread id."""
        wanted = valid_job(job_or_thread)
        matches = self.paths.journals(job=wanted)
        if matches:
            return self.load(*matches[0])
        latest = self.latest(wanted)
        if latest is not None:
            return latest
        raise UnknownJob(f"no job or thread {wanted} in {self.root}",
                         hint="list jobs with `rekall history`; check REKALL_JOBS_DIR")
