"""A thread of the shared app-server as rekall sees it: its facts, kept from public messages.

The shared app-server (the daemon of plain ``codex`` and ``codex --remote``) speaks the public protocol, not the
extension's conversation state. This model turns what that protocol says about one thread into
the same :class:`~rekall.thread.facts.ThreadFacts` the worker's policy reads on the extension,
and the same domain events. Sans-I/O: it is fed a thread object (from ``thread/resume`` or
``thread/read`` plus ``thread/turns/list``) and then every message, in arrival order.

The rules (codex 0.171.0; docs/app-server.md has the observed shapes):

Idle
    ``status.type == "idle"``, no turn in progress and no server request pending for this
    thread (an approval, a question: meant for the user's client, never answered by rekall).
Turns
    A turn is the user's when it holds a ``userMessage`` item, a compaction turn when it holds
    a ``contextCompaction`` item. A turn announced by ``turn/started`` has no items yet: it is
    nobody's until its first item says (our own compaction turn must not look like new input).
    A listing's summary view shows no items for a compaction turn: it is nobody's either.
User boundary
    The latest user turn; its fingerprint is SHA-256 over its id. ``interrupted`` when it ended
    ``interrupted`` or ``failed``; ``user_turn_running`` while it is ``inProgress``.
Compactions
    ``item/started`` of a ``contextCompaction`` item: running; its ``item/completed``:
    completed; its turn ending without it (``interrupted``, ``failed``): neither. In a loaded
    history, a compaction item of a turn that ``completed`` is completed, of a turn in progress
    running, of any other turn neither; what ran before a reload (a daemon restarted
    mid-compaction) is forgotten: the loaded thread alone says what runs now.
Goal
    The answer to ``thread/goal/get`` (``goal``: a ``ThreadGoal`` or ``null``), then
    ``thread/goal/updated`` (its ``goal.status``) and ``thread/goal/cleared`` (no goal). Unknown
    until the first of them: the thread object carries no goal.
Telemetry
    ``thread/tokenUsage/updated``: ``last.totalTokens`` and ``modelContextWindow``, the latest
    one. During a compaction three arrive before its ``item/completed`` (the old count, the
    compaction request's own, then the compacted size): the one that counts after a
    compaction is therefore the last before its completion, which is what the facts hold when
    :class:`~rekall.kernel.events.CompactionCompleted` is emitted, and the count from before it is the
    first of the compaction turn (``tokens_before_compaction``; ``None`` until one is seen).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from rekall.kernel import events as ev
from rekall.adapters.app_server.rpc import Message, ServerRequest
from rekall.kernel.records import NO_GOAL, NO_USER_INPUT, RUNNING_STATUS, RUNTIME_NULL, STOPPED_STATUSES, ThreadFacts
from rekall.thread.facts import as_int
from rekall.thread.mirror import diff_events

TurnKind = Literal["user", "compaction", "unknown"]
#: The ``threadSource`` of the terminal UI's title request: a side thread, never the conversation.
TITLE_SOURCE = "thread_title"


@attrs.define
class _Turn:
    id: str
    status: str
    kind: TurnKind = "unknown"
    #: The ids of its compaction items.
    compactions: set[str] = attrs.Factory(set)


def _kind_of(items: Any) -> TurnKind:
    types = {item.get("type") for item in items if isinstance(item, dict)} if isinstance(items, list) else set()
    if "contextCompaction" in types:
        return "compaction"
    return "user" if "userMessage" in types else "unknown"


def _goal_status(goal: Any) -> str | None:
    """A ``ThreadGoal``'s status; ``none`` for no goal (``null``); unknown (``None``) for anything else."""
    if goal is None:
        return NO_GOAL
    status = goal.get("status") if isinstance(goal, dict) else None
    return status if isinstance(status, str) and status != NO_GOAL else None


def fingerprint_of(turn_id: str) -> str:
    return hashlib.sha256(json.dumps({"turnId": turn_id}, sort_keys=True).encode()).hexdigest()


class ThreadModel:
    """One thread's facts, from a loaded thread object and the messages that follow it."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.revision = 0  # messages applied, for the journal: the app-server has no revisions
        self.runtime_status: str | None = None
        self.thread_source: str | None = None
        self.turns: dict[str, _Turn] = {}
        self.pending: dict[int | str, str] = {}
        self.completed: set[str] = set()
        self.running: set[str] = set()
        self.tokens: int | None = None
        self.window: int | None = None
        #: Compaction turns whose first count was seen (that count is the size before the compaction).
        self.counted_compactions: set[str] = set()
        self.tokens_before_compaction: int | None = None
        self.goal: str | None = None
        self.problem: str | None = "no thread loaded yet"

    # --- input ------------------------------------------------------------------------

    def load(self, thread: Mapping[str, Any], turns: list[Any] | None = None) -> list[ev.DomainEvent]:
        """Take the thread object (``turns`` from a listing when the object has none), oldest first."""
        before = self.facts
        status = thread.get("status")
        self.runtime_status = status.get("type") if isinstance(status, dict) else None
        self.thread_source = thread.get("threadSource")
        listed = thread.get("turns") if turns is None else turns
        self.problem = None if self.runtime_status is not None else "the thread has no status.type"
        if not isinstance(listed, list):
            listed, self.problem = [], "the thread's turns are not a list"
        self.turns = {}
        self.running = set()
        for turn in listed:
            if not isinstance(turn, dict) or not isinstance(turn.get("id"), str):
                self.problem = "a turn has no string id"
                continue
            items = turn.get("items")
            status = str(turn.get("status"))
            known = self.turns[turn["id"]] = _Turn(turn["id"], status, _kind_of(items))
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and item.get("type") == "contextCompaction" and isinstance(item.get("id"), str):
                    known.compactions.add(item["id"])
                    if status == RUNNING_STATUS:
                        self.running.add(item["id"])
                    elif status == "completed":
                        self.completed.add(item["id"])
        self.revision += 1
        return self._changes(before)

    def load_goal(self, answer: Mapping[str, Any]) -> list[ev.DomainEvent]:
        """Take the answer to ``thread/goal/get``."""
        before = self.facts
        self.goal = _goal_status(answer.get("goal"))
        return self._counted(before)

    def apply(self, message: Message) -> list[ev.DomainEvent]:
        """One message from the server; the events for what it changed (none for other threads)."""
        params = message.params
        if isinstance(message, ServerRequest):
            if params.get("threadId") != self.thread_id:
                return []
            before = self.facts
            self.pending[message.id] = message.method
            return self._counted(before)
        if params.get("threadId") != self.thread_id:
            return []
        before = self.facts
        method = message.method
        if method == "thread/status/changed":
            status = params.get("status")
            self.runtime_status = status.get("type") if isinstance(status, dict) else None
        elif method == "thread/closed":
            self.runtime_status = "notLoaded"
        elif method in ("turn/started", "turn/completed"):
            self._turn(params.get("turn"))
        elif method in ("item/started", "item/completed"):
            self._item(params.get("turnId"), params.get("item"), completed=method == "item/completed")
        elif method == "thread/tokenUsage/updated":
            usage = params.get("tokenUsage")
            if isinstance(usage, dict):
                last = usage.get("last")
                self.tokens = as_int(last.get("totalTokens"), minimum=0) if isinstance(last, dict) else None
                self.window = as_int(usage.get("modelContextWindow"), minimum=1)
                self._count_before(params.get("turnId"))
        elif method == "thread/goal/updated":
            self.goal = _goal_status(params.get("goal"))
        elif method == "thread/goal/cleared":
            self.goal = NO_GOAL
        elif method == "serverRequest/resolved":
            self.pending.pop(params.get("requestId"), None)  # type: ignore[arg-type]
        else:
            return []
        return self._counted(before)

    def _turn(self, turn: Any) -> None:
        if not isinstance(turn, dict) or not isinstance(turn.get("id"), str):
            return
        known = self.turns.get(turn["id"])
        kind = _kind_of(turn.get("items"))
        if known is None:
            known = self.turns[turn["id"]] = _Turn(turn["id"], str(turn.get("status")), kind)
        else:
            known.status = str(turn.get("status"))
            if known.kind == "unknown":
                known.kind = kind
        if known.status != RUNNING_STATUS:
            self.running -= known.compactions  # ended without completing them (interrupted, failed)

    def _item(self, turn_id: Any, item: Any, *, completed: bool) -> None:
        if not isinstance(item, dict):
            return
        kind = _kind_of([item])
        turn = self.turns.get(turn_id) if isinstance(turn_id, str) else None
        if turn is not None and turn.kind == "unknown":
            turn.kind = kind
        if kind == "compaction" and isinstance(item.get("id"), str):
            if turn is not None:
                turn.compactions.add(item["id"])
            if completed:
                self.running.discard(item["id"])
                self.completed.add(item["id"])
            elif item["id"] not in self.completed:
                self.running.add(item["id"])

    def _count_before(self, turn_id: Any) -> None:
        """The first count of a compaction turn is the size before it (the server repeats it)."""
        turn = self.turns.get(turn_id) if isinstance(turn_id, str) else None
        if turn is not None and turn.kind == "compaction" and turn.id not in self.counted_compactions:
            self.counted_compactions.add(turn.id)
            self.tokens_before_compaction = self.tokens

    def _counted(self, before: ThreadFacts) -> list[ev.DomainEvent]:
        self.revision += 1
        return self._changes(before)

    # --- output -----------------------------------------------------------------------

    @property
    def active_turn(self) -> str | None:
        running = [turn.id for turn in self.turns.values() if turn.status == RUNNING_STATUS]
        return running[-1] if running else None

    @property
    def facts(self) -> ThreadFacts:
        if self.runtime_status is None:
            busy: str | None = RUNTIME_NULL
        elif self.runtime_status != "idle":
            busy = f"runtime_{self.runtime_status}"
        elif self.active_turn is not None:
            busy = "turn_in_progress"
        elif self.pending:
            busy = "pending_request"
        else:
            busy = None
        users = [turn for turn in self.turns.values() if turn.kind == "user"]
        latest = users[-1] if users else None
        return ThreadFacts(
            runtime_status=self.runtime_status,
            busy_reason=busy,
            pending_requests=len(self.pending),
            completed_compaction_ids=frozenset(self.completed),
            running_compaction_ids=frozenset(self.running),
            boundary_fingerprint=fingerprint_of(latest.id) if latest else NO_USER_INPUT,
            interrupted=latest is not None and latest.status in STOPPED_STATUSES,
            user_turn_running=latest is not None and latest.status == RUNNING_STATUS,
            latest_user_turn_id=latest.id if latest else None,
            tokens=self.tokens,
            window=self.window,
            tokens_before_compaction=self.tokens_before_compaction,
            layout_problem=self.problem,
            goal=self.goal,
        )

    def _changes(self, before: ThreadFacts) -> list[ev.DomainEvent]:
        return diff_events(before, self.facts, self.revision)


__all__ = ["TITLE_SOURCE", "ThreadModel", "fingerprint_of"]
