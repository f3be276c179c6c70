"""A job's one state, derived from its two machines' states: the one place this is decided.

The compaction machine's state is the job's until it hands the job over (``compacted``); then the
delivery machine's state, named for its route, is (the design card's names:
``waiting_for_resume_idle``, ``resuming``, ``injecting``, ``resumed``, ``completed``,
``skipped``). An end (cancelled, timed out, failed) is the compaction machine's. By value, so that
the plugin's hook, which reads journals without the lifecycle's types, derives it as the store does
(:func:`rekall.states.model.job_state` names the result).
"""

from __future__ import annotations

COMPACTED = "compacted"
#: What a job's record says of a continuation refused for headroom (``resumeSkipped``): it ends ``skipped``.
INSUFFICIENT_HEADROOM = "insufficient_headroom"
#: The routes the job's worker sends the handoff by: a continuation turn, or the injection (the delivery
#: machine's routes, and the names of their delivery claims, :mod:`rekall.store.delivery`).
CONTINUATION, INJECTION = "continuation", "injection"


def job_state_named(compaction: str, delivery: str, route: str | None, resume_skipped: object) -> str:
    """The job's state from the compaction machine's state, the delivery machine's state and route, and
    ``resumeSkipped`` (which tells ``skipped`` from ``completed``)."""
    if compaction != COMPACTED or delivery == "pending":
        return compaction
    continuation = route == CONTINUATION
    if delivery == "waiting":
        return "waiting_for_resume_idle" if continuation else "injecting"
    if delivery == "sending":
        return "resuming" if continuation else "injecting"
    if delivery == "delivered" and continuation:
        return "resumed"
    return "skipped" if resume_skipped == INSUFFICIENT_HEADROOM else "completed"
