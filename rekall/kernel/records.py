"""The records every platform, the worker and the service share: a thread's facts, and what a
request to its owner came to. Small and free of I/O, so that any platform can use them without
importing another.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from rekall.kernel.errors import IpcError

#: SHA-256 of ``no-user-input``, spelled out (tests/thread/test_package.py checks it): hashlib is
#: imported where a digest is made, after a worker's follow has gone out, not on its way.
NO_USER_INPUT = "8fb84ab36bb0823a558267ede0a8e1c61c548408bb86542f96359581110a51ff"
STOPPED_STATUSES = frozenset({"interrupted", "failed"})
RUNNING_STATUS = "inProgress"
#: The goal status while Codex runs the thread's turns by itself; ``NO_GOAL``: the thread has none.
GOAL_ACTIVE = "active"
NO_GOAL = "none"
#: The busy reason while ``threadRuntimeStatus`` is ``null`` (the thread is not loaded yet).
RUNTIME_NULL = "runtime_null"
#: The layout problem of a thread whose state has not been seen.
NO_STATE = "conversation state is missing"

#: What is known about a failed request: provably never sent, or it may have reached the owner.
Delivery = Literal["not_delivered", "unknown"]


@attrs.frozen
class ThreadFacts:
    """Everything the worker needs to know about a thread, at one revision."""

    runtime_status: str | None = None
    busy_reason: str | None = "no_state"
    pending_requests: int = 0
    unconfirmed_submissions: int = 0
    completed_compaction_ids: frozenset[str] = frozenset()
    running_compaction_ids: frozenset[str] = frozenset()
    boundary_fingerprint: str = NO_USER_INPUT
    interrupted: bool = False
    user_turn_running: bool = False
    latest_user_turn_id: Any = None
    tokens: int | None = None
    window: int | None = None
    #: The owner's own count from before its latest compaction, where the platform reports one (the
    #: app-server's first ``thread/tokenUsage/updated`` of the compaction turn); ``None`` elsewhere.
    tokens_before_compaction: int | None = None
    layout_problem: str | None = NO_STATE
    #: Codex's goal status where the platform shows it (``active``, ``paused``, ..., ``none``);
    #: ``None`` when it cannot be told (the extension's state carries no goal).
    goal: str | None = None

    @property
    def idle(self) -> bool:
        return self.busy_reason is None

    @property
    def goal_active(self) -> bool:
        return self.goal == GOAL_ACTIVE


EMPTY = ThreadFacts()


class ConnectionLostError(IpcError):
    """The connection to a thread's owner closed or failed."""

    code = "connection_lost"


@attrs.frozen
class Failure:
    """Why a request did not succeed. ``code`` is a stable error code (``connection_lost``, …)."""

    code: str
    message: str
    delivery: Delivery


@attrs.frozen
class Acted:
    """The answer to ``compact()`` or ``start_turn()``: exactly one of ``failure`` and success.

    ``turn_id``/``turn_status`` are set for a started turn (the status may be ``None``)."""

    failure: Failure | None = None
    turn_id: str | None = None
    turn_status: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


__all__ = ["EMPTY", "NO_STATE", "NO_USER_INPUT", "RUNNING_STATUS", "RUNTIME_NULL", "STOPPED_STATUSES", "Acted",
           "ConnectionLostError", "Delivery", "Failure", "ThreadFacts"]
