"""The delivery machine: how, once, the handoff reaches the model after the compaction completed.

The compaction machine (:mod:`rekall.states.table`) hands the job over when its compaction completes
(``compaction_completed`` into ``compacted``); the same event then chooses the route here
(``route_chosen``). The route is a value, not a row: a continuation turn (asked for with
``resume`` and headroom) or the injection (the platform's way in, without a turn). Whatever the
route, the delivery waits for the thread to stay idle, journals the request before it leaves
(``sending``), and ends ``delivered`` when the owner acknowledges it, or ``settled`` when rekall
delivered nothing (``handoffDelivery`` says why). The plugin's hook is a third route: it delivers
outside the worker, and the worker learns of it from the delivery claim (:mod:`rekall.store.delivery`).

The job's ends (cancelled, timed out, failed) are the compaction machine's: ``cut_short`` here says
what such an end means for the handoff.
"""

from __future__ import annotations

from typing import Any

from rekall.states.evidence import EXPLICIT_CANCELLATION, HOOK_DELIVERED, USER_MOVED_ON, WITHHELD
from rekall.kernel.jobstate import CONTINUATION, INJECTION, INSUFFICIENT_HEADROOM
from rekall.states.model import DeliveryState, Instant, JobState, JobView
from rekall.states.rows import Evidence, Table, Transition, boundary_unchanged, headroom, known_outcome, since
from rekall.states.status import JobStatus, known, wire

D = DeliveryState
S = JobState

# --- guards --------------------------------------------------------------------------------


def _injects(ev: Evidence) -> bool:
    return ev.get("inject") is True


def _continuation_fits(job: JobView, ev: Evidence) -> bool:
    return job.resume and not ev.get("userMovedOn") and headroom(job, ev).safe


def a_route_carries_it(job: JobView, ev: Evidence) -> bool:
    """A continuation was asked for, the user has not moved on and the telemetry shows headroom; or the
    platform injects the handoff."""
    return _continuation_fits(job, ev) or _injects(ev)


def no_route_carries_it(job: JobView, ev: Evidence) -> bool:
    """No continuation (none asked for, the user moved on, or no headroom) and no injection."""
    return not a_route_carries_it(job, ev)


def _resume_checked(job: JobView, ev: Evidence) -> bool:
    return job.route == CONTINUATION and ev.get("handoffVerified") is True and boundary_unchanged(job, ev)


def route_may_send(job: JobView, ev: Evidence) -> bool:
    """Handoff verified; for a continuation, also the user boundary unchanged and headroom re-checked."""
    if job.route == INJECTION:
        return ev.get("handoffVerified") is True
    return _resume_checked(job, ev) and headroom(job, ev).safe


def headroom_lost_inject(job: JobView, ev: Evidence) -> bool:
    """A continuation's re-check fails for headroom (handoff verified, boundary unchanged); the platform
    injects the handoff."""
    return _resume_checked(job, ev) and not headroom(job, ev).safe and _injects(ev)


def headroom_lost(job: JobView, ev: Evidence) -> bool:
    """A continuation's re-check fails for headroom (handoff verified, boundary unchanged); no injection."""
    return _resume_checked(job, ev) and not headroom(job, ev).safe and not _injects(ev)


def continuation_overtaken(job: JobView, ev: Evidence) -> bool:
    """The user's input (or a stopped turn) came before the continuation."""
    return job.route == CONTINUATION and ev.get("reason") in USER_MOVED_ON


def answers_the_route(job: JobView, ev: Evidence) -> bool:
    """The acknowledgement is the route's: a started turn for a continuation, the bytes injected for an
    injection."""
    return ("turnId" if job.route == CONTINUATION else "textBytes") in ev


def not_delivered_by_the_route(job: JobView, ev: Evidence) -> bool:
    """The injection was refused, not sent or its answer lost; or the plugin's hook holds the delivery claim
    (the only way here for a continuation: one that fails ends the job)."""
    return job.route == INJECTION or ev.get("delivery") == "hook"


# --- routes --------------------------------------------------------------------------------


def _chosen(job: JobView, ev: Evidence) -> str | None:
    if _continuation_fits(job, ev):
        return CONTINUATION
    return INJECTION if _injects(ev) else None


def _to_injection(job: JobView, ev: Evidence) -> str:
    return INJECTION


# --- effects -------------------------------------------------------------------------------


def not_injected(ev: Evidence) -> dict[str, Any]:
    """No continuation carries the handoff and it is not injected: why (when the evidence says)."""
    limit = ev.get("injectionLimit")
    return {} if limit is None else wire(JobStatus(handoffDelivery="not_delivered", handoffDeliveryNote=limit))


def _skip(job: JobView, ev: Evidence) -> dict[str, Any]:
    return wire(JobStatus(resumeSkipped=INSUFFICIENT_HEADROOM, resumeSkipReason=headroom(job, ev).reason))


_MOVED_ON_WORDS = {"user_turn_stopped": "the user stopped their turn", "new_user_input": "the user sent new input",
                   "new_turn": "a new turn started", "goal_active": "the thread's goal became active"}


def _user_moved_on(reason: str, when: str = "") -> dict[str, Any]:
    return wire(JobStatus(resumeSkipped=reason,
                          resumeSkipReason=f"the compaction completed, then {_MOVED_ON_WORDS[reason]}{when}: a "
                                           "continuation would talk over it, so none was started"))


def _why_no_continuation(job: JobView, ev: Evidence) -> dict[str, Any]:
    """A continuation was asked for but none carries the handoff: the user moved on, or no headroom."""
    if not job.resume or _continuation_fits(job, ev):
        return {}
    return _user_moved_on(ev["userMovedOn"]) if ev.get("userMovedOn") else _skip(job, ev)


def _route_chosen(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return _why_no_continuation(job, ev)


def _nothing_to_send(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_why_no_continuation(job, ev), **known_outcome(now), **not_injected(ev)}


def _resume_check(job: JobView, ev: Evidence, **more: Any) -> dict[str, Any]:
    return wire(JobStatus(resumeCheckContextTokens=ev["tokens"], resumeCheckModelContextWindow=ev["window"],
                          resumeCheckWindowUsedFraction=headroom(job, ev).used_fraction, **more))


def _sending(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    if job.route != CONTINUATION:
        return {}
    return _resume_check(job, ev, resumeRequestedAt=now.iso)  # one record: this runs just before the request


def _skipped_at_resume_inject(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_resume_check(job, ev), **_skip(job, ev)}


def _skipped_at_resume(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return {**_skipped_at_resume_inject(job, ev, now), **known_outcome(now), **not_injected(ev)}


def _overtaken(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    return _user_moved_on(ev["reason"], " before the continuation")


def _since_completion(job: JobView, now: Instant) -> int | None:
    """From the compaction's completion (as the worker observed it) to now."""
    after = S.WAITING_FOR_RESUME_IDLE if S.WAITING_FOR_RESUME_IDLE in job.entered_ms else S.INJECTING
    return since(job, after, now)


def _delivered(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    if job.route == CONTINUATION:
        return wire(JobStatus(resumeTurnId=ev["turnId"], resumedAt=now.iso, handoffDelivery="continuation",
                              resumeDelayMs=since(job, S.WAITING_FOR_RESUME_IDLE, now), outcomeMayBeUnknown=False))
    return {**wire(JobStatus(handoffDelivery="injected", handoffInjectedAt=now.iso, injectedBytes=ev["textBytes"],
                             injectDelayMs=_since_completion(job, now))), **known_outcome(now)}


def _not_delivered(job: JobView, ev: Evidence, now: Instant) -> dict[str, Any]:
    delivery = ev["delivery"]
    if delivery == "hook" and job.route == CONTINUATION:
        # handoffDelivery (hook), its note and time are the claim's, folded in by the job's readers.
        return {**wire(JobStatus(resumeSkipped=HOOK_DELIVERED,
                                 resumeSkipReason="the compaction completed, then the user's turn started and the "
                                                  "plugin's SessionStart(compact) hook delivered the handoff at its "
                                                  "start, just before the continuation: none was sent")),
                **known_outcome(now)}
    if delivery == "unknown":
        said = (f"the injection may or may not have reached the thread ({ev['errorCode']}: {ev['error']}); it is "
                "never sent again")
    elif delivery == "hook":  # the claim's note and time are folded in by the job's readers
        said = f"{ev['error']}; rekall sent nothing"
    else:
        said = f"{ev['errorCode']}: {ev['error']}"
    return {**known_outcome(now), **wire(JobStatus(handoffDelivery=delivery, handoffDeliveryNote=said,
                                                   outcomeMayBeUnknown=delivery == "unknown"))}


def cut_short(job: JobView, ev: Evidence) -> dict[str, Any]:
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
    return not_injected(ev) if job.state is S.WAITING_FOR_RESUME_IDLE else {}


# --- the table -----------------------------------------------------------------------------

DELIVERY = Table("delivery", "Delivery", __doc__.split("\n\n")[0], tuple(DeliveryState),
                 frozenset({D.DELIVERED, D.SETTLED}), (
    Transition("route_chosen", (D.PENDING,), D.WAITING, a_route_carries_it, _route_chosen,
               "with the compaction's completion: a continuation when asked for, the user has not moved on and "
               "the headroom check passes; otherwise the injection, where the platform injects (resumeSkipped "
               "says why no continuation)", route=_chosen),
    Transition("route_chosen", (D.PENDING,), D.SETTLED, no_route_carries_it, _nothing_to_send,
               "no continuation (none asked for, the user moved on, or no headroom: resumeSkipped says) and no "
               "injection (handoffDeliveryNote says why)"),
    Transition("idle_stable", (D.WAITING,), D.SENDING, route_may_send, _sending,
               "idle held; handoff hash verified; for a continuation, the boundary unchanged and the headroom "
               "re-checked. Journaled before the request leaves"),
    Transition("idle_stable", (D.WAITING,), D.WAITING, headroom_lost_inject, _skipped_at_resume_inject,
               "the continuation's second headroom check fails: the route becomes the injection", route=_to_injection),
    Transition("idle_stable", (D.WAITING,), D.SETTLED, headroom_lost, _skipped_at_resume,
               "the continuation's second headroom check fails and nothing is injected (the design's "
               "headroom_lost, folded into idle_stable)"),
    Transition("rerouted", (D.WAITING,), D.WAITING, continuation_overtaken, _overtaken,
               "the user's input or a stopped turn came before the continuation: none runs (resumeSkipped says "
               "why), the route becomes the injection (without injection the job is cancelled instead)",
               route=_to_injection),
    Transition("handoff_delivered", (D.SENDING,), D.DELIVERED, answers_the_route, _delivered,
               "the owner acknowledged the request: the continuation turn started, or the injection landed"),
    Transition("handoff_not_delivered", (D.WAITING, D.SENDING), D.SETTLED, not_delivered_by_the_route, _not_delivered,
               "the request was refused or not sent (not_delivered), its answer was lost (unknown: never sent "
               "again; outcomeMayBeUnknown true), or the plugin's hook holds the delivery claim (hook: a "
               "continuation overtaken by the hook leaves resumeSkipped handoff_delivered_by_hook)"),
))
