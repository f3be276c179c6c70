"""The compaction machine: when a job's compaction ends, and how.

A job starts here (``scheduled``), waits for the thread to stay idle, asks its owner for the
compaction, and hands the job over to the delivery machine (:mod:`rekall.states.delivery`) when
the compaction completes (``compacted``). The job's ends are this machine's too: a cancel, the
deadline, a failure or a runtime stuck in ``systemError`` end the job wherever it is, before or
during the delivery. No row here knows a delivery route. The rules both tables follow are in
:mod:`rekall.states.rows`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from rekall.states.delivery import DELIVERY, cut_short
from rekall.states.model import COMPACTION_STATES, TERMINAL_STATES, DeliveryState, Instant, JobState, JobView, \
    iso_time
from rekall.states.rows import Evidence, Table, Transition, boundary_unchanged, headroom, since, tokens_before
from rekall.states.rules import SYSTEM_ERROR_WAY_OUT, outcome_may_be_unknown
from rekall.states.status import JobStatus, wire

S = JobState

#: The pseudo-trigger of a job's first journal record (from nothing to ``scheduled``).
SCHEDULE = "schedule"

# --- guards --------------------------------------------------------------------------------


def owns_job(job: JobView, ev: Evidence) -> bool:
    """The worker names this job."""
    return str(ev["jobId"]).lower() == job.job_id


def nothing_in_flight(job: JobView, ev: Evidence) -> bool:
    """No request of the job's is on its way (none was sent, or the delivery's is not sent yet)."""
    return job.delivery in (DeliveryState.PENDING, DeliveryState.WAITING)


def quiet_for_the_settle_window(job: JobView, ev: Evidence) -> bool:
    """The owner, reachable again, showed the thread idle with no compaction in progress
    for the whole settle window."""
    window_ms = ev.get("settleWindowS", float("inf")) * 1000
    return ev.get("idle") is True and ev.get("compactionsInProgress") == 0 and ev.get("quietMs", 0) >= window_ms


# --- effects -------------------------------------------------------------------------------


def _started(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    deadline = ev.get("deadlineS")
    return wire(JobStatus(pid=ev["pid"], workerStartedAt=now.iso, workerDeadlineAt=None if deadline is None
                          else iso_time(now.wall + timedelta(seconds=deadline))))


def _requested(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return wire(JobStatus(requestedAt=now.iso, contextTokensBefore=ev["tokens"],
                          modelContextWindowBefore=ev["window"]))


def _accepted(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return wire(JobStatus(acceptedAt=now.iso, ownerId=ev["ownerId"]))


def _completion(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    before, after = tokens_before(job, ev), ev["tokens"]
    reclaimed = fraction = None
    if isinstance(before, int) and isinstance(after, int):
        reclaimed = before - after
        fraction = reclaimed / before if before > 0 else None
    return wire(JobStatus(
        compactionId=ev["compactionId"],
        compactionCompletedAt=now.iso,
        contextTokensBefore=before,
        contextTokensAfter=after,
        modelContextWindowAfter=ev["window"],
        tokensReclaimed=reclaimed,
        reclaimedFraction=fraction,
        compactionDurationMs=since(job, S.REQUESTING, now),
        contextWindowUsedFraction=headroom(job, ev).used_fraction,
    ))


def _cancelled(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**wire(JobStatus(reason=ev["reason"], cancelledAt=now.iso,
                             outcomeMayBeUnknown=outcome_may_be_unknown(job.state, ev))), **cut_short(job, ev)}


def _settled(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    owner = "the owner" if ev.get("ownerId") is None else f"the owner {ev['ownerId']}"  # none on the app-server
    seen = (f"{owner} showed the thread idle (runtime {ev['runtimeStatus']}) with no compaction "
            f"in progress and no new completed compaction for {ev['quietMs'] / 1000:.1f} s (revision "
            f"{ev['revision']})")
    return wire(JobStatus(
        errorCode="outcome_unknown", failedAt=now.iso, outcomeMayBeUnknown=True,
        error=f"the answer to the request sent in {job.state.value} was lost; after reconnecting, {seen}. "
              "The request may or may not have reached the thread's owner; nothing was retried"))


def _timed_out(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    waited = f", waiting for {ev['waitingOn']}" if ev.get("waitingOn") else ""
    seen = f"; last seen: {ev['lastFact']}" if ev.get("lastFact") else ""
    return wire(JobStatus(
        timedOutAt=now.iso, errorCode="deadline_exceeded",
        error=f"deadline of {ev['deadlineS']:g} s exceeded in {job.state.value}{waited}{seen}; no automatic retry",
        outcomeMayBeUnknown=outcome_may_be_unknown(job.state, ev))) | cut_short(job, ev)


def _system_error(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    done = ("nothing was compacted" if job.state is S.WAITING_FOR_IDLE
            else "the compaction completed, no continuation turn was started")
    return wire(JobStatus(
        errorCode="thread_system_error", failedAt=now.iso,
        error=f"the thread's runtime status stayed systemError for {ev['windowS']:g} s after the user's "
              f"turn ended; {done}. {SYSTEM_ERROR_WAY_OUT}",
        outcomeMayBeUnknown=outcome_may_be_unknown(job.state, ev)))


def _failed(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return wire(JobStatus(errorCode=ev["errorCode"], error=ev["error"], failedAt=now.iso,
                          outcomeMayBeUnknown=outcome_may_be_unknown(job.state, ev))) | cut_short(job, ev)


# --- the table -----------------------------------------------------------------------------

_OPEN = tuple(state for state in COMPACTION_STATES if state not in TERMINAL_STATES)
_UNKNOWN_NOTE = "outcomeMayBeUnknown per the outcome rule"

COMPACTION = Table("compaction", "Compaction", __doc__.split("\n\n")[0], COMPACTION_STATES,
                   frozenset(COMPACTION_STATES) & TERMINAL_STATES, (
    Transition("worker_started", (S.SCHEDULED,), S.WAITING_FOR_IDLE, owns_job, _started,
               "the worker owns the job (identity matches)"),
    Transition("idle_stable", (S.WAITING_FOR_IDLE,), S.REQUESTING, boundary_unchanged, _requested,
               "idle held for the stable interval; user boundary unchanged"),
    Transition("compaction_accepted", (S.REQUESTING,), S.ACCEPTED, None, _accepted,
               "the owner answered ok; acceptance is not completion"),
    Transition("compaction_completed", (S.ACCEPTED,), S.COMPACTED, None, _completion,
               "a new completed compaction, this job's: the delivery machine chooses the route next (route_chosen, "
               "with this evidence)"),
    Transition("outcome_settled", (S.REQUESTING, S.ACCEPTED), S.FAILED, quiet_for_the_settle_window, _settled,
               "outcome unknown (an answer or the connection was lost); the owner, reachable again, shows "
               "nothing happening for the settle window; outcomeMayBeUnknown true"),
    Transition("cancel", _OPEN, S.CANCELLED, None, _cancelled,
               f"explicit marker, new user input or a new turn, an active goal, or a stopped turn; {_UNKNOWN_NOTE}"),
    Transition("deadline", _OPEN, S.TIMED_OUT, None, _timed_out, f"the worker deadline; {_UNKNOWN_NOTE}"),
    Transition("fail", _OPEN, S.FAILED, None, _failed,
               f"errorCode plus message (worker_lost when the worker died); {_UNKNOWN_NOTE}"),
    Transition("system_error_held", (S.WAITING_FOR_IDLE, S.COMPACTED), S.FAILED, nothing_in_flight, _system_error,
               "threadRuntimeStatus stayed systemError for the window (REKALL_SYSTEM_ERROR_WINDOW_S) after "
               "the user's turn ended; errorCode thread_system_error"),
))

#: Both machines, the compaction machine first: a job starts there.
MACHINES: tuple[Table, ...] = (COMPACTION, DELIVERY)
#: The triggers that end a job: the compaction machine takes them wherever the job is.
ENDS: frozenset[str] = frozenset(row.trigger for row in COMPACTION.rows if S.COMPACTED in row.source)
TRIGGER_NAMES: tuple[str, ...] = tuple(dict.fromkeys(row.trigger for table in MACHINES for row in table.rows))


def table_named(name: str) -> Table:
    return next(table for table in MACHINES if table.name == name)
