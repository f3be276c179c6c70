"""What each trigger must carry: the evidence keys the worker passes, and their checks.

Evidence is journaled with the transition it justified, so it is checked strictly before
anything happens: an unknown or missing key is a programming error on the caller's side
and fails loudly (a typo would otherwise make a guard quietly say no).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from rekall.kernel.errors import InvalidInput

#: The user's (or the thread's own) moves after which no continuation is started (a cancel reason too,
#: before a compaction completed). ``new_turn``: a new turn where goals cannot be told.
USER_MOVED_ON = ("new_user_input", "new_turn", "goal_active", "user_turn_stopped")
#: The cancel reason of ``rekall cancel`` and ``cancel_compaction``: no route delivers the handoff after it.
EXPLICIT_CANCELLATION = "explicit_cancellation"
CANCEL_REASONS = (EXPLICIT_CANCELLATION, *USER_MOVED_ON)
#: What a job's record says of a handoff that an explicit cancel withheld.
WITHHELD = ("the job was cancelled explicitly (rekall cancel or cancel_compaction) before any route delivered the "
            "handoff: no continuation, injection or hook will deliver it")
#: Once resuming, the continuation lost the job's delivery claim to the plugin's SessionStart(compact) hook: the
#: hook runs only at a turn's start and the continuation was not sent, so the user's turn carries the handoff.
HOOK_DELIVERED = "handoff_delivered_by_hook"
DELIVERY = ("not_delivered", "unknown")


class InvalidEvidence(InvalidInput):
    """A trigger was fired with evidence that does not match its declaration."""

    code = "invalid_evidence"


class UnknownTrigger(InvalidInput):
    """A trigger name the lifecycle does not declare."""

    code = "unknown_trigger"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: Type names used in declarations (and printed in the docs) with their checks.
_KINDS = {
    "str": lambda v: isinstance(v, str) and v.strip() != "",
    "text": lambda v: isinstance(v, str),  # may be empty: a blank error message must not stop a fail
    "int": _is_int,
    "number": lambda v: (_is_int(v) or isinstance(v, float)) and math.isfinite(v),
    "bool": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


@attrs.frozen
class Key:
    name: str
    #: ``|``-separated kind names from ``_KINDS``, e.g. ``"int|null"``.
    kind: str
    required: bool = True
    choices: tuple[str, ...] | None = None

    def describe(self) -> str:
        kind = "|".join(repr(c) for c in self.choices) if self.choices else self.kind
        return f"{self.name}{'' if self.required else '?'}: {kind}"

    def check(self, trigger: str, value: Any) -> None:
        ok = any(_KINDS[k](value) for k in self.kind.split("|"))
        if ok and self.choices is not None:
            ok = value in self.choices
        if not ok:
            wanted = " or ".join(map(repr, self.choices)) if self.choices else self.kind.replace("|", " or ")
            raise InvalidEvidence(f"{trigger}: evidence {self.name} must be {wanted}; got {value!r:.80}",
                                  field=self.name, hint="fix the caller; nothing was changed")


@attrs.frozen
class TriggerSpec:
    name: str
    doc: str
    keys: tuple[Key, ...]

    def validate(self, evidence: Mapping[str, Any]) -> dict[str, Any]:
        known = {k.name for k in self.keys}
        unknown = sorted(set(evidence) - known)
        if unknown:
            raise InvalidEvidence(f"{self.name}: unknown evidence {', '.join(unknown)}; "
                                  f"allowed: {', '.join(sorted(known))}", field=unknown[0],
                                  hint="fix the caller; nothing was changed")
        for key in self.keys:
            if key.name in evidence:
                key.check(self.name, evidence[key.name])
            elif key.required:
                raise InvalidEvidence(f"{self.name}: evidence {key.name} is required", field=key.name,
                                      hint="fix the caller; nothing was changed")
        return {k.name: evidence[k.name] for k in self.keys if k.name in evidence}


_IDLE = (
    Key("idleMs", "number"),
    Key("tokens", "int|null"),
    Key("window", "int|null"),
    Key("revision", "int|null"),
    Key("boundaryFingerprint", "str|null"),
)
#: Where no continuation will carry the handoff: whether it is injected instead (``inject``), and
#: if not, why (``injectionLimit``: the setting, or the platform's limit). Absent in older journals.
_DELIVERY = (
    Key("inject", "bool", required=False),
    Key("injectionLimit", "str", required=False),
)

TRIGGERS: Mapping[str, TriggerSpec] = {
    spec.name: spec
    for spec in (
        TriggerSpec("worker_started", "The worker process started and names the job it runs.", (
            Key("jobId", "str"), Key("pid", "int"), Key("host", "str"),
            Key("processStartTime", "str|null"),
            # Since journal record version 2: which platform the worker follows the thread on.
            Key("platform", "str", required=False),
            # The worker's deadline, counted from here (older workers did not say).
            Key("deadlineS", "number", required=False),
        )),
        TriggerSpec("idle_stable", "The thread stayed idle for the stable interval.", (
            *_IDLE, Key("handoffVerified", "bool", required=False), *_DELIVERY,
        )),
        TriggerSpec("compaction_accepted", "The owner answered the compaction request with ok "
                    "(or a new completed compaction proved it).", (
            Key("ownerId", "str|null"), Key("inferredFrom", "str", required=False),
        )),
        TriggerSpec("compaction_completed", "A new completed contextCompaction item appeared.", (
            Key("compactionId", "str"), Key("tokens", "int|null"), Key("window", "int|null"),
            Key("revision", "int|null"), *_DELIVERY,
            # The user's input came after it (no continuation then): why, as for a cancel.
            Key("userMovedOn", "str", required=False, choices=USER_MOVED_ON),
            # The owner's own count from before the compaction, where the platform reports one
            # (the app-server's first count of the compaction turn); else the request's count counts.
            Key("tokensBefore", "int|null", required=False),
        )),
        TriggerSpec("outcome_settled", "A request's outcome was unknown; the owner, reachable again, showed "
                    "the thread idle with no compaction in progress for the settle window.", (
            Key("idle", "bool"), Key("compactionsInProgress", "int"), Key("quietMs", "number"),
            Key("settleWindowS", "number"), Key("runtimeStatus", "str|null"), Key("ownerId", "str|null"),
            Key("revision", "int|null"),
        )),
        TriggerSpec("cancel", "An explicit cancel marker, new user input (a new turn where goals cannot be told), "
                              "an active goal, or a stopped user turn.", (
            Key("reason", "str", choices=CANCEL_REASONS), Key("delivery", "str", required=False, choices=DELIVERY),
            Key("injectionLimit", "str", required=False),
        )),
        TriggerSpec("route_chosen", "The delivery machine's first step, with the compaction's completion (the "
                    "machine fires it from compaction_completed's evidence): which route carries the handoff.", (
            Key("tokens", "int|null"), Key("window", "int|null"), *_DELIVERY,
            Key("userMovedOn", "str", required=False, choices=USER_MOVED_ON),
            Key("tokensBefore", "int|null", required=False),
        )),
        TriggerSpec("rerouted", "The user's input (or a stopped turn) came after the compaction completed and "
                    "before the continuation: none will run, and the handoff is injected instead.", (
            Key("reason", "str", choices=USER_MOVED_ON),
        )),
        TriggerSpec("handoff_delivered", "The owner acknowledged the route's request: the continuation turn it "
                    "started (turnId), or the injection (textBytes: the size of the text sent).", (
            Key("turnId", "str", required=False), Key("turnStatus", "str|null", required=False),
            Key("textBytes", "int", required=False),
        )),
        TriggerSpec("handoff_not_delivered", "The route's request failed (refused, not sent, or its answer was "
                    "lost: delivery unknown), or the plugin's hook had delivered the handoff at the start of the "
                    "user's turn (hook); it is never sent again.", (
            Key("errorCode", "str"), Key("error", "text"), Key("delivery", "str", choices=(*DELIVERY, "hook")),
        )),
        TriggerSpec("deadline", "The worker's deadline passed.", (
            Key("deadlineS", "number"),
            # What the job waited for and the last fact the thread showed (older workers did not say).
            Key("waitingOn", "text", required=False), Key("lastFact", "text", required=False),
            # While the handoff waited to be injected: whether it was sent.
            Key("delivery", "str", required=False, choices=DELIVERY),
        )),
        TriggerSpec("fail", "An error stopped the job; errorCode is stable, error is for people.", (
            Key("errorCode", "str"), Key("error", "text"),
            Key("delivery", "str", required=False, choices=DELIVERY),
        )),
        TriggerSpec("system_error_held", "The runtime status stayed systemError for the window after the "
                    "user's turn ended.", (
            Key("runtimeStatus", "str", choices=("systemError",)), Key("heldMs", "number"),
            Key("windowS", "number"), Key("revision", "int|null"),
        )),
    )
}


def validate_evidence(trigger: str, evidence: Mapping[str, Any]) -> dict[str, Any]:
    spec = TRIGGERS.get(trigger)
    if spec is None:
        raise UnknownTrigger(f"unknown trigger {trigger!r:.60}; known: {', '.join(TRIGGERS)}", field="trigger",
                             hint="fire one of the declared triggers; nothing was changed")
    return spec.validate(evidence)
