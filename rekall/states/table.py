"""The lifecycle, declared as one table.

Rule 1: everything that decides a job's state lives in this package, and every transition
is a row of ``TRANSITIONS`` below. The machine (``rekall.states.machine``), the docs
(``docs/states.md``), ``rekall explain`` and the journal replay are all built from it.

Rule 2: guards and effects are pure. A guard reads the job (a ``JobView``) and the event's
evidence and answers yes or no; an effect returns the status fields the transition sets.
Neither does I/O or reads a clock: the time comes in as an ``Instant``. That is what makes
every decision replayable and explainable afterwards.

When several rows share a trigger and a source state, their guards are mutually exclusive
and the first that passes wins; when none passes the event is refused, and nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import attrs

from rekall.states.evidence import EXPLICIT_CANCELLATION, HOOK_DELIVERED, USER_MOVED_ON, WITHHELD
from rekall.states.model import NON_TERMINAL_STATES, Instant, JobState, JobView, iso_time
from rekall.states.rules import SYSTEM_ERROR_WAY_OUT, Headroom, check_headroom, outcome_may_be_unknown
from rekall.states.status import JobStatus, known, wire

S = JobState
Evidence = Mapping[str, Any]
Guard = Callable[[JobView, Evidence], bool]
Effect = Callable[[JobView, Evidence, Instant], dict[str, Any]]

#: The pseudo-trigger of a job's first journal record (from nothing to ``scheduled``).
SCHEDULE = "schedule"

# --- guards --------------------------------------------------------------------------------


def owns_job(job: JobView, ev: Evidence) -> bool:
    """The worker names this job."""
    return str(ev["jobId"]).lower() == job.job_id


def boundary_unchanged(job: JobView, ev: Evidence) -> bool:
    """The latest user turn is the one the job was scheduled after."""
    return ev.get("boundaryFingerprint") == known(job.status.userFingerprint)


def _injects(ev: Evidence) -> bool:
    return ev.get("inject") is True


def resume_not_requested(job: JobView, ev: Evidence) -> bool:
    """The handoff did not ask for a continuation (and it is not injected)."""
    return not job.resume and not _injects(ev)


def resume_not_requested_inject(job: JobView, ev: Evidence) -> bool:
    """The handoff did not ask for a continuation; the platform injects it."""
    return not job.resume and _injects(ev)


def _tokens_before(job: JobView, ev: Evidence) -> Any:
    """The count before the compaction: the owner's own when the platform reported one with the
    completion (the app-server), else the job's (the count when the request was sent)."""
    said = ev.get("tokensBefore")
    return known(job.status.contextTokensBefore) if said is None else said


def _headroom(job: JobView, ev: Evidence) -> Headroom:
    return check_headroom(ev.get("tokens"), ev.get("window"), _tokens_before(job, ev))


def resume_overtaken_by_user(job: JobView, ev: Evidence) -> bool:
    """A continuation was asked for, but the user's input came after the compaction completed (not injected)."""
    return job.resume and bool(ev.get("userMovedOn")) and not _injects(ev)


def resume_overtaken_by_user_inject(job: JobView, ev: Evidence) -> bool:
    """A continuation was asked for, but the user's input came after the compaction completed; the platform
    injects the handoff."""
    return job.resume and bool(ev.get("userMovedOn")) and _injects(ev)


def resume_with_headroom(job: JobView, ev: Evidence) -> bool:
    """A continuation was asked for, the user has not moved on, and the telemetry shows headroom."""
    return job.resume and not ev.get("userMovedOn") and _headroom(job, ev).safe


def resume_without_headroom(job: JobView, ev: Evidence) -> bool:
    """A continuation was asked for, the user has not moved on, but the telemetry shows no headroom (the handoff
    is not injected)."""
    return job.resume and not ev.get("userMovedOn") and not _headroom(job, ev).safe and not _injects(ev)


def resume_without_headroom_inject(job: JobView, ev: Evidence) -> bool:
    """A continuation was asked for, the user has not moved on, but the telemetry shows no headroom; the platform
    injects the handoff."""
    return job.resume and not ev.get("userMovedOn") and not _headroom(job, ev).safe and _injects(ev)


def _resume_authorised(job: JobView, ev: Evidence) -> bool:
    return ev.get("handoffVerified") is True and boundary_unchanged(job, ev)


def ready_to_resume(job: JobView, ev: Evidence) -> bool:
    """Handoff verified, user boundary unchanged, headroom still there."""
    return _resume_authorised(job, ev) and _headroom(job, ev).safe


def headroom_lost(job: JobView, ev: Evidence) -> bool:
    """Handoff verified, user boundary unchanged, but the headroom re-check fails (not injected)."""
    return _resume_authorised(job, ev) and not _headroom(job, ev).safe and not _injects(ev)


def headroom_lost_inject(job: JobView, ev: Evidence) -> bool:
    """Handoff verified, user boundary unchanged, the headroom re-check fails; the platform injects it."""
    return _resume_authorised(job, ev) and not _headroom(job, ev).safe and _injects(ev)


def skipped_for_headroom(job: JobView, ev: Evidence) -> bool:
    """The continuation was refused for headroom before the injection."""
    return job.status.resumeSkipped == "insufficient_headroom"


def not_skipped_for_headroom(job: JobView, ev: Evidence) -> bool:
    """No continuation was asked for, or the user's input overtook it."""
    return not skipped_for_headroom(job, ev)


def overtaken_by_user(job: JobView, ev: Evidence) -> bool:
    """The user's input (or a stopped turn) came before the continuation."""
    return ev.get("reason") in USER_MOVED_ON


def overtaken_by_hook(job: JobView, ev: Evidence) -> bool:
    """The plugin's hook won the job's delivery claim at the start of the user's turn, before the continuation
    was sent."""
    return ev.get("reason") == HOOK_DELIVERED


def quiet_for_the_settle_window(job: JobView, ev: Evidence) -> bool:
    """The owner, reachable again, showed the thread idle with no compaction in progress
    for the whole settle window."""
    window_ms = ev.get("settleWindowS", float("inf")) * 1000
    return ev.get("idle") is True and ev.get("compactionsInProgress") == 0 and ev.get("quietMs", 0) >= window_ms


# --- effects -------------------------------------------------------------------------------


def _since(job: JobView, state: JobState, now: Instant) -> int | None:
    start = job.entered_ms.get(state)
    return None if start is None else now.mono_ms - start


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
    before, after = _tokens_before(job, ev), ev["tokens"]
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
        compactionDurationMs=_since(job, S.REQUESTING, now),
        contextWindowUsedFraction=_headroom(job, ev).used_fraction,
    ))


def _known_outcome(now: Instant) -> dict[str, Any]:
    return wire(JobStatus(completedAt=now.iso, outcomeMayBeUnknown=False))


def _not_injected(ev: Evidence) -> dict[str, Any]:
    """No continuation carries the handoff and it is not injected: why (when the evidence says)."""
    limit = ev.get("injectionLimit")
    return {} if limit is None else wire(JobStatus(handoffDelivery="not_delivered", handoffDeliveryNote=limit))


def _cut_short(job: JobView, ev: Evidence) -> dict[str, Any]:
    """What a job ending before its handoff was delivered says of the delivery: an injection that was
    sent is unknown; one that was not, or an explicit cancel, is not delivered, and says why."""
    if job.state is S.INJECTING and ev.get("delivery") != "not_delivered":
        return wire(JobStatus(handoffDelivery="unknown",
                              handoffDeliveryNote="the job ended while the handoff was being injected; it may or "
                                                  "may not have reached the thread, and is never sent again"))
    # Resuming, the continuation may be on its way, unless the evidence proves it was not sent.
    if ev.get("reason") == EXPLICIT_CANCELLATION and known(job.status.handoffSha256) \
            and (job.state is not S.RESUMING or ev.get("delivery") == "not_delivered"):
        return wire(JobStatus(handoffDelivery="not_delivered", handoffDeliveryNote=WITHHELD))
    if job.state is S.INJECTING:
        waited = f", while it waited for {ev['waitingOn']}" if ev.get("waitingOn") else ""
        return wire(JobStatus(handoffDelivery="not_delivered",
                              handoffDeliveryNote=f"the job ended before the handoff was injected{waited}; it was "
                                                  "not sent, and is never sent after this"))
    return _not_injected(ev) if job.state is S.WAITING_FOR_RESUME_IDLE else {}


def _since_completion(job: JobView, now: Instant) -> int | None:
    """From the compaction's completion (as the worker observed it) to now."""
    after = S.WAITING_FOR_RESUME_IDLE if S.WAITING_FOR_RESUME_IDLE in job.entered_ms else S.INJECTING
    return _since(job, after, now)


def _skip(headroom: Headroom) -> dict[str, Any]:
    return wire(JobStatus(resumeSkipped="insufficient_headroom", resumeSkipReason=headroom.reason))


def _completed(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_completion(job, ev, now), **_known_outcome(now), **_not_injected(ev)}


_MOVED_ON_WORDS = {"user_turn_stopped": "the user stopped their turn", "new_user_input": "the user sent new input",
                   "new_turn": "a new turn started", "goal_active": "the thread's goal became active"}


def _user_moved_on(reason: str, when: str = "") -> dict[str, Any]:
    return wire(JobStatus(resumeSkipped=reason,
                          resumeSkipReason=f"the compaction completed, then {_MOVED_ON_WORDS[reason]}{when}: a "
                                           "continuation would talk over it, so none was started"))


def _completed_user_moved_on(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_completion(job, ev, now), **_known_outcome(now), **_user_moved_on(ev["userMovedOn"]),
            **_not_injected(ev)}


def _user_moved_on_inject(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_completion(job, ev, now), **_user_moved_on(ev["userMovedOn"])}


def _skipped_at_completion(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_completion(job, ev, now), **_skip(_headroom(job, ev)), **_known_outcome(now), **_not_injected(ev)}


def _skipped_at_completion_inject(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_completion(job, ev, now), **_skip(_headroom(job, ev))}


def _resume_check(job: JobView, ev: Evidence, **more: Any) -> dict[str, Any]:
    return wire(JobStatus(resumeCheckContextTokens=ev["tokens"], resumeCheckModelContextWindow=ev["window"],
                          resumeCheckWindowUsedFraction=_headroom(job, ev).used_fraction, **more))


def _resume_requested(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return _resume_check(job, ev, resumeRequestedAt=now.iso)  # one record: this runs just before the request


def _skipped_at_resume(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_resume_check(job, ev), **_skip(_headroom(job, ev)), **_known_outcome(now), **_not_injected(ev)}


def _skipped_at_resume_inject(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_resume_check(job, ev), **_skip(_headroom(job, ev))}


def _overtaken(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return _user_moved_on(ev["reason"], " before the continuation")


def _delivered_by_hook(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    # handoffDelivery (hook), its note and time are the claim's, folded in by the job's readers.
    return {**wire(JobStatus(resumeSkipped=HOOK_DELIVERED,
                             resumeSkipReason="the compaction completed, then the user's turn started and the "
                                              "plugin's SessionStart(compact) hook delivered the handoff at its "
                                              "start, just before the continuation: none was sent")),
            **_known_outcome(now)}


def _injected(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**wire(JobStatus(handoffDelivery="injected", handoffInjectedAt=now.iso, injectedBytes=ev["textBytes"],
                             injectDelayMs=_since_completion(job, now))), **_known_outcome(now)}


def _not_delivered(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    delivery = ev["delivery"]
    if delivery == "unknown":
        said = (f"the injection may or may not have reached the thread ({ev['errorCode']}: {ev['error']}); it is "
                "never sent again")
    elif delivery == "hook":  # the claim's note and time are folded in by the job's readers
        said = f"{ev['error']}; rekall sent nothing"
    else:
        said = f"{ev['errorCode']}: {ev['error']}"
    return {**_known_outcome(now), **wire(JobStatus(handoffDelivery=delivery, handoffDeliveryNote=said,
                                                    outcomeMayBeUnknown=delivery == "unknown"))}


def _resumed(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return wire(JobStatus(resumeTurnId=ev["turnId"], resumedAt=now.iso, handoffDelivery="continuation",
                          resumeDelayMs=_since(job, S.WAITING_FOR_RESUME_IDLE, now), outcomeMayBeUnknown=False))


def _cancelled(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**wire(JobStatus(reason=ev["reason"], cancelledAt=now.iso,
                             outcomeMayBeUnknown=outcome_may_be_unknown(job.state, ev))), **_cut_short(job, ev)}


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
        outcomeMayBeUnknown=outcome_may_be_unknown(job.state, ev))) | _cut_short(job, ev)


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
                          outcomeMayBeUnknown=outcome_may_be_unknown(job.state, ev))) | _cut_short(job, ev)


# --- the table -----------------------------------------------------------------------------


@attrs.frozen
class Transition:
    trigger: str
    source: tuple[JobState, ...]
    dest: JobState
    guard: Guard | None
    effect: Effect = attrs.field(repr=False)
    note: str

    @property
    def guard_name(self) -> str | None:
        return None if self.guard is None else self.guard.__name__


_ANY = NON_TERMINAL_STATES
_UNKNOWN_NOTE = "outcomeMayBeUnknown per the outcome rule"

TRANSITIONS: tuple[Transition, ...] = (
    Transition("worker_started", (S.SCHEDULED,), S.WAITING_FOR_IDLE, owns_job, _started,
               "the worker owns the job (identity matches)"),
    Transition("idle_stable", (S.WAITING_FOR_IDLE,), S.REQUESTING, boundary_unchanged, _requested,
               "idle held for the stable interval; user boundary unchanged"),
    Transition("compaction_accepted", (S.REQUESTING,), S.ACCEPTED, None, _accepted,
               "the owner answered ok; acceptance is not completion"),
    Transition("compaction_completed", (S.ACCEPTED,), S.COMPLETED, resume_not_requested, _completed,
               "a new completed compaction; no continuation asked for; no injection (handoffDeliveryNote says why)"),
    Transition("compaction_completed", (S.ACCEPTED,), S.INJECTING, resume_not_requested_inject, _completion,
               "a new completed compaction; no continuation asked for: the handoff is injected"),
    Transition("compaction_completed", (S.ACCEPTED,), S.COMPLETED, resume_overtaken_by_user, _completed_user_moved_on,
               "continuation asked for, but the owner shows the user's input after the compaction completed: "
               "completed, resumeSkipped new_user_input (or user_turn_stopped), no continuation; no injection"),
    Transition("compaction_completed", (S.ACCEPTED,), S.INJECTING, resume_overtaken_by_user_inject,
               _user_moved_on_inject, "continuation asked for, but the owner shows the user's input after the "
               "compaction completed: resumeSkipped new_user_input (or user_turn_stopped), no continuation, the "
               "handoff is injected"),
    Transition("compaction_completed", (S.ACCEPTED,), S.WAITING_FOR_RESUME_IDLE, resume_with_headroom,
               _completion, "continuation asked for and the first headroom check passes"),
    Transition("compaction_completed", (S.ACCEPTED,), S.SKIPPED, resume_without_headroom,
               _skipped_at_completion, "continuation asked for but no headroom (reason recorded); no injection"),
    Transition("compaction_completed", (S.ACCEPTED,), S.INJECTING, resume_without_headroom_inject,
               _skipped_at_completion_inject, "continuation asked for but no headroom: the handoff is injected"),
    Transition("idle_stable", (S.WAITING_FOR_RESUME_IDLE,), S.RESUMING, ready_to_resume, _resume_requested,
               "idle again; handoff hash verified; boundary unchanged; headroom re-checked"),
    Transition("idle_stable", (S.WAITING_FOR_RESUME_IDLE,), S.SKIPPED, headroom_lost, _skipped_at_resume,
               "the second headroom check fails (the design's headroom_lost, folded into idle_stable)"),
    Transition("idle_stable", (S.WAITING_FOR_RESUME_IDLE,), S.INJECTING, headroom_lost_inject,
               _skipped_at_resume_inject, "the second headroom check fails: the handoff is injected"),
    Transition("resume_overtaken", (S.WAITING_FOR_RESUME_IDLE,), S.INJECTING, overtaken_by_user, _overtaken,
               "the user's input or a stopped turn came before the continuation: none runs (resumeSkipped "
               "says why), the handoff is injected (without injection the job is cancelled instead)"),
    Transition("resume_overtaken", (S.RESUMING,), S.COMPLETED, overtaken_by_hook, _delivered_by_hook,
               "the plugin's hook won the delivery claim at the start of the user's turn, just before the "
               "continuation was sent: nothing is sent, resumeSkipped handoff_delivered_by_hook, handoffDelivery "
               "hook (from the claim), outcome known"),
    Transition("handoff_injected", (S.INJECTING,), S.COMPLETED, not_skipped_for_headroom, _injected,
               "the platform acknowledged the injection; no continuation was asked for, or the user's input "
               "overtook it"),
    Transition("handoff_injected", (S.INJECTING,), S.SKIPPED, skipped_for_headroom, _injected,
               "the platform acknowledged the injection; the continuation was refused for headroom"),
    Transition("handoff_not_delivered", (S.INJECTING,), S.COMPLETED, not_skipped_for_headroom, _not_delivered,
               "the injection was refused or not sent (not_delivered), or its answer was lost (unknown: never "
               "sent again; outcomeMayBeUnknown true)"),
    Transition("handoff_not_delivered", (S.INJECTING,), S.SKIPPED, skipped_for_headroom, _not_delivered,
               "as above, after the continuation was refused for headroom"),
    Transition("turn_started", (S.RESUMING,), S.RESUMED, None, _resumed,
               "the owner returned a started turn id"),
    Transition("outcome_settled", (S.REQUESTING, S.ACCEPTED), S.FAILED, quiet_for_the_settle_window, _settled,
               "outcome unknown (an answer or the connection was lost); the owner, reachable again, shows "
               "nothing happening for the settle window; outcomeMayBeUnknown true"),
    Transition("cancel", _ANY, S.CANCELLED, None, _cancelled,
               f"explicit marker, new user input or a new turn, an active goal, or a stopped turn; {_UNKNOWN_NOTE}"),
    Transition("deadline", _ANY, S.TIMED_OUT, None, _timed_out, f"the worker deadline; {_UNKNOWN_NOTE}"),
    Transition("fail", _ANY, S.FAILED, None, _failed,
               f"errorCode plus message (worker_lost when the worker died); {_UNKNOWN_NOTE}"),
    Transition("system_error_held", (S.WAITING_FOR_IDLE, S.WAITING_FOR_RESUME_IDLE), S.FAILED, None, _system_error,
               "threadRuntimeStatus stayed systemError for the window (REKALL_SYSTEM_ERROR_WINDOW_S) after "
               "the user's turn ended; errorCode thread_system_error, nothing in flight"),
)

TRIGGER_NAMES: tuple[str, ...] = tuple(dict.fromkeys(row.trigger for row in TRANSITIONS))


def rows_for(state: JobState, trigger: str) -> tuple[Transition, ...]:
    """The rows that could fire ``trigger`` from ``state``, in the order they are tried."""
    return tuple(row for row in TRANSITIONS if row.trigger == trigger and state in row.source)


def find_row(source: JobState, trigger: str, dest: JobState) -> Transition | None:
    """The row that moves ``source`` to ``dest`` on ``trigger`` (used to check replayed records)."""
    return next((row for row in rows_for(source, trigger) if row.dest is dest), None)
