"""The cancel marker: ``<thread>.<job>.cancel``, written by ``cancel`` and read by the job's worker.

The marker is created exclusively and never rewritten; asking twice is answered the same.
Only the thread's current job, while it is not over, gets one. A job with a handoff also has its
delivery claim taken for the cancel (:mod:`rekall.store.delivery`): from then on no route delivers
the handoff, not even the plugin's hook after the job's worker is gone. Where a route won the
claim first, the answer says which one delivered it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    return attrs.evolve(answer, cancellationRequested=True, **_withheld(store, thread, job, current.view.status))


def _withheld(store: StoreParts, thread: str, job: str, status: JobStatus) -> dict[str, Any]:
    """Take the job's delivery claim for the cancel: what the answer says of the handoff's delivery
    (nothing for a job without a handoff)."""
    from rekall.states.evidence import WITHHELD
    from rekall.states.status import known
    from rekall.store.delivery import CANCEL, DELIVERED_AS, FOREIGN, HOOK, DeliveryKey, take

    if not known(status.handoffSha256):
        return {}
    try:
        taken = take(store.paths.root, DeliveryKey(thread, job=job), CANCEL)
    except OSError as exc:
        raise StoreError(f"the cancel marker is written, but the handoff's delivery claim could not be taken "
                         f"({exc.strerror or exc}): the plugin's hook may still deliver the handoff",
                         code="cancel_claim_failed", hint="free some space or fix the jobs directory, then cancel "
                                                          "again") from exc
    route = taken.holder
    if route == CANCEL:  # taken now, or asked before
        return {"handoffDelivery": "not_delivered", "handoffDeliveryNote": WITHHELD}
    if route == FOREIGN:
        return {"handoffDelivery": "not_delivered", "handoffDeliveryNote": f"{taken.why}: no route delivers while "
                                                                          "it is there"}
    delivered = DELIVERED_AS.get(route, "unknown")
    if delivered == "unknown":
        said = "its delivery claim is held but cannot be read: whether the handoff was delivered is unknown"
    elif route == HOOK:
        said = "already delivered by the hook route before the cancel; a delivery cannot be retracted"
    else:  # the worker claims just before it sends: the request was sent, or is on its way
        said = (f"already taken by the {route} route before the cancel, whose request was sent or is on its way; "
                "it cannot be retracted (the job's status says how it ended)")
    return {"handoffDelivery": delivered, "handoffDeliveryNote": said}
