"""What rekall derives from a conversation state, and the rules for deriving it.

This module is the single statement of the rules. :func:`derive_facts` applies them the
obvious way, walking the whole state; the :class:`~rekall.adapters.mirror.ThreadMirror`
keeps the same facts up to date incrementally and is tested against it.

Idle
    ``threadRuntimeStatus.type == "idle"``, no pending request and no unconfirmed
    submission. A request is an element of ``requests[]`` unless it has ``completed: true``
    (an approval already answered). A submission is an element of the optional
    ``unconfirmedTurnSubmissions`` whose ``terminal`` is not ``true`` (real entries carry no
    ``terminal`` at all, and the key is deleted when empty). ``threadRuntimeStatus`` may be
    ``null`` before the thread is loaded: not idle yet (``runtime_null``), not a layout
    problem; any other ``type`` (``active``, ``notLoaded``, ``systemError``) is busy as
    ``runtime_<type>``.

Turns
    The live turns are ``turns[]``. History turns are
    ``turnHistory.history.entitiesByKey[key]``, ordered by
    ``turnHistory.history.islands[].entries[].value``, whatever ``turnHistory.kind`` says:
    with ``historyMode: "paginated"`` the live ``turns`` stay empty and every turn, the
    newest included, is in the history. A ``turnHistory`` without a ``history`` (or with
    ``history: null``) has no history turns. Items are a turn's ``items[]``.

Completed compactions
    The ids of ``contextCompaction`` items with ``completed is True``, live or history.
    History items may lack ``completed`` (reloaded public history): tolerated, never counted.

Compactions in progress
    The ids of ``contextCompaction`` items with ``completed is False``, live or history.

User boundary
    The latest user-bearing turn (non-empty ``params.input`` or a ``userMessage`` item) in
    order: history turns, then live turns. Compaction turns (empty input, no user message)
    are not user-bearing. The fingerprint is SHA-256 over canonical JSON of the turn's id
    (``turnId``, else ``params.clientUserMessageId``, else ``turnStartedAtMs``), its input
    and the digests of its user messages (each SHA-256 of ``{id, content}``), with cosmetic
    fields (``text_elements``, ``detail``) dropped. ``interrupted`` is true when that turn's status is ``interrupted``
    or ``failed``; ``user_turn_running`` when it is ``inProgress``.

    Unlike the Node client we take the *last* user-bearing turn rather than the one with the
    largest ``turnStartedAtMs``: a turn without a timestamp would otherwise never be latest.

Telemetry
    ``latestTokenUsageInfo.last.totalTokens`` (a non-negative integer) and
    ``latestTokenUsageInfo.modelContextWindow`` (a positive integer); else ``None``.

Layout
    Problems are short sentences; :attr:`ThreadFacts.layout_problem` joins the distinct ones
    in sorted order, or is ``None``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import attrs

from rekall.adapters.patches import MISSING

NO_USER_INPUT = hashlib.sha256(b"no-user-input").hexdigest()
STOPPED_STATUSES = frozenset({"interrupted", "failed"})
RUNNING_STATUS = "inProgress"
#: The busy reason while ``threadRuntimeStatus`` is ``null`` (the thread is not loaded yet).
RUNTIME_NULL = "runtime_null"

# The fields of each user input kind that carry meaning; everything else is presentation.
_SEMANTIC_INPUT_FIELDS = {
    "text": ("text",),
    "image": ("url", "fileId"),
    "localImage": ("path",),
    "audio": ("url", "fileId"),
    "localAudio": ("path",),
    "skill": ("name", "path"),
    "mention": ("name", "path"),
}
_COSMETIC_FIELDS = frozenset({"text_elements", "detail"})

# Layout problems (one sentence each, stable wording: they reach status files).
NO_STATE = "conversation state is missing"
STATE_NOT_OBJECT = "conversation state is not an object"
RUNTIME_NOT_STRING = "threadRuntimeStatus.type is not a string"
REQUESTS_NOT_ARRAY = "requests is not an array"
TURNS_NOT_ARRAY = "turns is not an array"
SUBMISSIONS_NOT_ARRAY = "unconfirmedTurnSubmissions is not an array"
TURN_NOT_OBJECT = "a turn is not an object"
ITEMS_NOT_ARRAY = "a turn's items is not an array"
COMPACTION_WITHOUT_ID = "a contextCompaction item has no string id"
LIVE_COMPACTION_WITHOUT_FLAG = "a contextCompaction item in turns has no boolean completed"
HISTORY_COMPACTION_BAD_FLAG = "a contextCompaction item in turnHistory has a non-boolean completed"
HISTORY_NOT_OBJECT = "turnHistory.history is not an object"
ISLANDS_NOT_ARRAY = "turnHistory.history.islands is not an array"
ENTITIES_NOT_OBJECT = "turnHistory.history.entitiesByKey is not an object"


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
    layout_problem: str | None = NO_STATE

    @property
    def idle(self) -> bool:
        return self.busy_reason is None


EMPTY = ThreadFacts()


# --- small rules, shared with the incremental mirror ------------------------------------


def as_int(value: Any, *, minimum: int) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= minimum else None


def telemetry(state: Any) -> tuple[int | None, int | None]:
    info = state.get("latestTokenUsageInfo") if isinstance(state, dict) else None
    if not isinstance(info, dict):
        return None, None
    last = info.get("last")
    tokens = as_int(last.get("totalTokens"), minimum=0) if isinstance(last, dict) else None
    return tokens, as_int(info.get("modelContextWindow"), minimum=1)


@attrs.frozen
class RuntimeFacts:
    runtime_status: str | None
    busy_reason: str | None
    pending_requests: int
    unconfirmed_submissions: int
    problems: tuple[str, ...]


def runtime_facts(state: Any) -> RuntimeFacts:
    """Idle-related facts; reads three small top-level fields, never the turns."""
    if state is MISSING:
        return RuntimeFacts(None, "no_state", 0, 0, (NO_STATE,))
    if not isinstance(state, dict):
        return RuntimeFacts(None, "no_state", 0, 0, (STATE_NOT_OBJECT,))
    problems = []
    status = state.get("threadRuntimeStatus", MISSING)
    runtime = status.get("type") if isinstance(status, dict) else None
    if not isinstance(runtime, str):
        runtime = None
        if status is not None:  # null: the thread is not loaded yet, which is a state, not a layout
            problems.append(RUNTIME_NOT_STRING)
    requests = state.get("requests")
    if not isinstance(requests, list):
        problems.append(REQUESTS_NOT_ARRAY)
    submissions = state.get("unconfirmedTurnSubmissions")
    if submissions is None:
        submissions = []
    elif not isinstance(submissions, list):
        problems.append(SUBMISSIONS_NOT_ARRAY)
    unconfirmed = (sum(1 for s in submissions if not (isinstance(s, dict) and s.get("terminal") is True))
                   if isinstance(submissions, list) else 0)
    pending = sum(1 for r in requests if pending_request(r)) if isinstance(requests, list) else 0
    if status is None:
        reason: str | None = RUNTIME_NULL
    elif runtime is None:
        reason = "runtime_unknown"
    elif runtime != "idle":
        reason = f"runtime_{runtime}"
    elif not isinstance(requests, list):
        reason = "requests_unreadable"
    elif pending:
        reason = "pending_requests"
    elif not isinstance(submissions, list):
        reason = "submissions_unreadable"
    elif unconfirmed:
        reason = "unconfirmed_submission"
    else:
        reason = None
    return RuntimeFacts(runtime, reason, pending, unconfirmed, tuple(problems))


def pending_request(request: Any) -> bool:
    """A request waits for the user unless it says it is done (an answered approval)."""
    return not (isinstance(request, dict) and request.get("completed") is True)


@attrs.frozen
class ItemFacts:
    """What one item contributes to the facts."""

    completed_id: str | None = None
    running_id: str | None = None
    problem: str | None = None
    is_user_message: bool = False


NOT_RELEVANT = ItemFacts()
USER_MESSAGE = ItemFacts(is_user_message=True)


def item_facts(item: Any, *, in_history: bool) -> ItemFacts:
    if not isinstance(item, dict):
        return NOT_RELEVANT
    if is_user_message(item):
        return USER_MESSAGE
    kind = item.get("type")
    if kind != "contextCompaction":
        return NOT_RELEVANT
    item_id = item.get("id")
    if not isinstance(item_id, str) or not item_id:
        return ItemFacts(problem=COMPACTION_WITHOUT_ID)
    if "completed" not in item:
        return NOT_RELEVANT if in_history else ItemFacts(problem=LIVE_COMPACTION_WITHOUT_FLAG)
    completed = item["completed"]
    if not isinstance(completed, bool):
        return ItemFacts(problem=HISTORY_COMPACTION_BAD_FLAG if in_history else LIVE_COMPACTION_WITHOUT_FLAG)
    return ItemFacts(completed_id=item_id) if completed else ItemFacts(running_id=item_id)


def turn_items(turn: Any) -> list[Any] | None:
    """A turn's items; ``None`` when the turn or its items have the wrong type."""
    if not isinstance(turn, dict):
        return None
    items = turn.get("items")
    if items is None:
        return []
    return items if isinstance(items, list) else None


def turn_problem(turn: Any) -> str | None:
    if not isinstance(turn, dict):
        return TURN_NOT_OBJECT
    return ITEMS_NOT_ARRAY if turn_items(turn) is None else None


def turn_input(turn: Any) -> Any:
    params = turn.get("params") if isinstance(turn, dict) else None
    return params.get("input") if isinstance(params, dict) else None


def has_user_input(turn: Any) -> bool:
    value = turn_input(turn)
    return isinstance(value, list) and len(value) > 0


def turn_identity(turn: dict[str, Any]) -> Any:
    if turn.get("turnId") is not None:
        return turn["turnId"]
    params = turn.get("params")
    if isinstance(params, dict) and params.get("clientUserMessageId") is not None:
        return params["clientUserMessageId"]
    return turn.get("turnStartedAtMs")


def normalise_input(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [_normalise_element(element) for element in value]


def _normalise_element(element: Any) -> Any:
    if not isinstance(element, dict):
        return element
    kind = element.get("type")
    fields = _SEMANTIC_INPUT_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        return {k: v for k, v in element.items() if k not in _COSMETIC_FIELDS}
    return {"type": element["type"], **{k: element[k] for k in fields if k in element}}


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def message_digest(message: dict[str, Any]) -> str:
    """Digest of one user message: its id and its normalised content."""
    return _digest({"id": message.get("id"), "content": normalise_input(message.get("content"))})


def fingerprint_of(turn: dict[str, Any], message_digests: list[str]) -> str:
    """The user-boundary fingerprint of a user-bearing turn (its status plays no part).

    Messages enter through their digests, so a turn with many steering messages costs one
    short digest per message when another is appended, not a re-serialisation of them all.
    """
    return _digest({"id": turn_identity(turn), "input": normalise_input(turn_input(turn)),
                    "messages": message_digests})


def stopped(turn: dict[str, Any]) -> bool:
    status = turn.get("status")
    return isinstance(status, str) and status in STOPPED_STATUSES


def running(turn: dict[str, Any]) -> bool:
    return turn.get("status") == RUNNING_STATUS


def is_user_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "userMessage"


def user_messages(turn: Any) -> list[dict[str, Any]]:
    """A turn's ``userMessage`` items, in order."""
    return [item for item in (turn_items(turn) or []) if is_user_message(item)]


def history_container(state: Any) -> tuple[Any, list[str]]:
    """The ``turnHistory.history`` object (or ``None``) and its layout problems.

    Read by its structure: ``turnHistory.kind`` is not consulted (which kinds exist is not
    published, and the paginated history is where every turn lives)."""
    history = state.get("turnHistory") if isinstance(state, dict) else None
    inner = history.get("history") if isinstance(history, dict) else None
    if inner is None:
        return None, []
    if not isinstance(inner, dict):
        return None, [HISTORY_NOT_OBJECT]
    problems = []
    if not isinstance(inner.get("islands"), list):
        problems.append(ISLANDS_NOT_ARRAY)
    if not isinstance(inner.get("entitiesByKey"), dict):
        problems.append(ENTITIES_NOT_OBJECT)
    return inner, problems


def island_keys(island: Any) -> Iterator[Any]:
    entries = island.get("entries") if isinstance(island, dict) else None
    if isinstance(entries, list):
        for entry in entries:
            if isinstance(entry, dict):
                yield entry.get("value")


def join_problems(problems: Any) -> str | None:
    distinct = sorted(set(problems))
    return "; ".join(distinct) if distinct else None


# --- the naive derivation ---------------------------------------------------------------


def derive_facts(state: Any) -> ThreadFacts:
    """All facts, recomputed from scratch by walking the whole state."""
    runtime = runtime_facts(state)
    if not isinstance(state, dict):
        return attrs.evolve(EMPTY, layout_problem=join_problems(runtime.problems))
    problems = list(runtime.problems)
    completed: set[str] = set()
    compacting: set[str] = set()
    ordered_turns: list[Any] = []

    def visit(turn: Any, in_history: bool) -> None:
        if (problem := turn_problem(turn)) is not None:
            problems.append(problem)
        for item in turn_items(turn) or []:
            facts = item_facts(item, in_history=in_history)
            if facts.problem:
                problems.append(facts.problem)
            if facts.completed_id:
                completed.add(facts.completed_id)
            if facts.running_id:
                compacting.add(facts.running_id)

    inner, history_problems = history_container(state)
    problems += history_problems
    if inner is not None:
        entities = inner.get("entitiesByKey")
        if isinstance(entities, dict):
            for entity in entities.values():
                visit(entity, True)
            islands = inner.get("islands")
            for island in islands if isinstance(islands, list) else []:
                for key in island_keys(island):
                    if isinstance(key, str) and key in entities:
                        ordered_turns.append(entities[key])
    turns = state.get("turns")
    if isinstance(turns, list):
        for turn in turns:
            visit(turn, False)
        ordered_turns += turns
    else:
        problems.append(TURNS_NOT_ARRAY)

    fingerprint, interrupted, turn_running, latest_id = NO_USER_INPUT, False, False, None
    for turn in reversed(ordered_turns):
        if not isinstance(turn, dict) or turn_items(turn) is None:
            continue
        messages = user_messages(turn)
        if has_user_input(turn) or messages:
            fingerprint = fingerprint_of(turn, [message_digest(m) for m in messages])
            interrupted = stopped(turn)
            turn_running = running(turn)
            latest_id = turn_identity(turn)
            break

    tokens, window = telemetry(state)
    return ThreadFacts(
        runtime_status=runtime.runtime_status,
        busy_reason=runtime.busy_reason,
        pending_requests=runtime.pending_requests,
        unconfirmed_submissions=runtime.unconfirmed_submissions,
        completed_compaction_ids=frozenset(completed),
        running_compaction_ids=frozenset(compacting),
        boundary_fingerprint=fingerprint,
        interrupted=interrupted,
        user_turn_running=turn_running,
        latest_user_turn_id=latest_id,
        tokens=tokens,
        window=window,
        layout_problem=join_problems(problems),
    )
