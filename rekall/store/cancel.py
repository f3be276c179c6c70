"""The cancel marker: ``<thread>.<job>.cancel``, written by ``cancel`` and read by the job's worker.

The marker is created exclusively and never rewritten; asking twice is answered the same.
Only the thread's current job, while it is not over, gets one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from rekall.kernel.errors import StoreError
from rekall.kernel.ids import job_id as valid_job, thread_id as valid_thread
from rekall.states.status import JobStatus
from rekall.store.errors import UnknownJob

if TYPE_CHECKING:
    from rekall.store.parts import StoreParts


def request_cancel(store: StoreParts, thread_id: str, job_id: str) -> JobStatus:
    """Write the job's cancel marker, if it is the thread's current job and not over."""
    thread, job = valid_thread(thread_id), valid_job(job_id)
    current = store.catalog.latest(thread)
    if current is None or current.job_id != job:
        if store.paths.journal(thread, job).exists():
            raise StoreError(f"job {job} is not the current job of thread {thread}",
                             code="job_identity_mismatch", hint="inspect the thread with `rekall status`")
        raise UnknownJob(f"no job {job} for thread {thread}", hint="check the ids with `rekall status`")
    answer = JobStatus(threadId=thread, jobId=job, state=current.state.value)
    if current.state.terminal:
        return attrs.evolve(answer, cancellationRequested=False)
    try:
        store.fs.create_exclusive(store.paths.cancel(thread, job), b"cancel\n")
    except FileExistsError:
        pass  # asked before: the marker is already there
    return attrs.evolve(answer, cancellationRequested=True)
