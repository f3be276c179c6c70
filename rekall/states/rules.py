"""The two judgement rules the lifecycle applies, each a pure function in one place.

* Headroom: may rekall start a continuation turn after this compaction?
* Outcome: when a job ends early, could a request it sent still have had an effect?
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rekall.states.model import JobState

#: What a user does about a thread stuck in ``systemError`` (the job's error and the probe say it).
SYSTEM_ERROR_WAY_OUT = "Send a message in the chat or reload the VS Code window (Developer: Reload Window)"

#: At most this fraction of the context window may be in use for a continuation (60% passes).
HEADROOM_LIMIT = 0.6

MISSING_TELEMETRY = "missing_token_telemetry"
STALE_TELEMETRY = "stale_or_unreclaimed_token_telemetry"
TOO_FULL = "more_than_60_percent_used"


@attrs.frozen
class Headroom:
    safe: bool
    #: Why it is unsafe (one of the three reasons above); ``None`` when safe.
    reason: str | None
    #: tokens / window when both are usable, else ``None``.
    used_fraction: float | None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_headroom(tokens: Any, window: Any, tokens_before: Any) -> Headroom:
    """Judge token telemetry seen after a compaction.

    Unsafe when telemetry is missing (tokens not an int >= 0, window not an int > 0), when it
    does not show fewer tokens than before the request (stale, or nothing reclaimed), or when
    more than 60% of the window is in use. Exactly 60% passes.
    """
    if not (_count(tokens) and tokens >= 0 and _count(window) and window > 0):
        return Headroom(False, MISSING_TELEMETRY, None)
    used = tokens / window
    if _count(tokens_before) and tokens >= tokens_before:
        return Headroom(False, STALE_TELEMETRY, used)
    if used > HEADROOM_LIMIT:
        return Headroom(False, TOO_FULL, used)
    return Headroom(True, None, used)


#: States in which rekall has sent a request whose effect it has not seen: a job ending in one
#: (or a worker failing in one) may still have changed the thread.
REQUEST_SENT_UNOBSERVED = frozenset({JobState.REQUESTING, JobState.ACCEPTED, JobState.RESUMING,
                                     JobState.INJECTING})


def outcome_may_be_unknown(source: JobState, evidence: Mapping[str, Any]) -> bool:
    """True when a job leaving ``source`` early may still have changed the thread.

    Before any request (scheduled, waiting_for_idle) and between compaction and resume
    (waiting_for_resume_idle) nothing is in flight. In requesting, resuming and injecting a request may
    have been delivered, unless the evidence proves it was not (``delivery="not_delivered"``).
    In accepted the owner took the request, so the compaction may still complete.
    """
    if source not in REQUEST_SENT_UNOBSERVED:
        return False
    return source is JobState.ACCEPTED or evidence.get("delivery") != "not_delivered"
