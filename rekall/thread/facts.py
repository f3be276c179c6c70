"""What rekall derives from a conversation state, and the rules for deriving it.

This module is the single statement of the rules. :func:`derive_facts` applies them the
obvious way, walking the whole state; the :class:`~rekall.thread.mirror.ThreadMirror`
keeps the same facts up to date incrementally and is tested against it.

The rules read every field name from a :class:`~rekall.thread.fields.FieldNames` (the v11
names by default; they are the names used below), so a protocol generation that renames
a field passes another layout and changes nothing here.

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
    (``turnId``, else ``params.clientUserMessageId``, else ``turnStartedAtMs``; the first that is a
    string or a number), its input
    and the digests of its user messages (each SHA-256 of ``{id, content}``), with cosmetic
    fields (``text_elements``, ``detail``) dropped. ``interrupted`` is true when that turn's status is ``interrupted``
    or ``failed``; ``user_turn_running`` when it is ``inProgress``.

    Unlike the Node client we take the *last* user-bearing turn rather than the one with the
    largest ``turnStartedAtMs``: a turn without a timestamp would otherwise never be latest.

Telemetry
    ``latestTokenUsageInfo.last.totalTokens`` (a non-negative integer) and
    ``latestTokenUsageInfo.modelContextWindow`` (a positive integer); else ``None``.

Goal
    Codex's goal status for the thread where the platform shows it (the shared app-server's
    ``thread/goal/get`` and ``thread/goal/updated``): a ``ThreadGoalStatus`` (``active``,
    ``paused``, ...), or ``none`` when the thread has no goal. ``None`` when it cannot be told:
    the extension's conversation state carries no goal. While a goal is ``active`` the thread
    starts turns by itself.

Layout
    Problems are short sentences; :attr:`ThreadFacts.layout_problem` joins the distinct ones
    in sorted order, or is ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs

# The facts and their constants are shared records (rekall.kernel.records); the rules here derive them.
from rekall.kernel.records import EMPTY as EMPTY
from rekall.kernel.records import NO_STATE as NO_STATE
from rekall.kernel.records import NO_USER_INPUT as NO_USER_INPUT
from rekall.kernel.records import RUNNING_STATUS as RUNNING_STATUS
from rekall.kernel.records import RUNTIME_NULL as RUNTIME_NULL
from rekall.kernel.records import STOPPED_STATUSES as STOPPED_STATUSES
from rekall.kernel.records import ThreadFacts as ThreadFacts
from rekall.thread.fields import FieldNames, V11
from rekall.thread.patches import MISSING


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



@attrs.frozen
class Problems:
    """Layout problems, one sentence each, naming the layout's fields (stable wording: they
    reach status files)."""

    runtime_not_string: str
    requests_not_array: str
    turns_not_array: str
    submissions_not_array: str
    items_not_array: str
    compaction_without_id: str
    live_compaction_without_flag: str
    history_compaction_bad_flag: str
    history_not_object: str
    islands_not_array: str
    entities_not_object: str

    @classmethod
    def of(cls, lay: FieldNames) -> Problems:
        history = f"{lay.turn_history}.{lay.history}"
        compaction = f"a {lay.compaction_type} item"
        return cls(
            runtime_not_string=f"{lay.runtime_status}.{lay.runtime_type} is not a string",
            requests_not_array=f"{lay.requests} is not an array",
            turns_not_array=f"{lay.turns} is not an array",
            submissions_not_array=f"{lay.submissions} is not an array",
            items_not_array=f"a turn's {lay.items} is not an array",
            compaction_without_id=f"{compaction} has no string {lay.item_id}",
            live_compaction_without_flag=f"{compaction} in {lay.turns} has no boolean {lay.compaction_completed}",
            history_compaction_bad_flag=(f"{compaction} in {lay.turn_history} has a non-boolean "
                                         f"{lay.compaction_completed}"),
            history_not_object=f"{history} is not an object",
            islands_not_array=f"{history}.{lay.islands} is not an array",
            entities_not_object=f"{history}.{lay.entities} is not an object",
        )


_PROBLEMS: dict[FieldNames, Problems] = {}


def problems_of(lay: FieldNames) -> Problems:
    """The problem sentences for a layout (built once per layout)."""
    found = _PROBLEMS.get(lay)
    if found is None:
        found = _PROBLEMS[lay] = Problems.of(lay)
    return found


# Problems that name no field, and the v11 sentences by name (tests and callers compare them).
STATE_NOT_OBJECT = "conversation state is not an object"
TURN_NOT_OBJECT = "a turn is not an object"
_V11 = problems_of(V11)
RUNTIME_NOT_STRING = _V11.runtime_not_string
REQUESTS_NOT_ARRAY = _V11.requests_not_array
TURNS_NOT_ARRAY = _V11.turns_not_array
COMPACTION_WITHOUT_ID = _V11.compaction_without_id
LIVE_COMPACTION_WITHOUT_FLAG = _V11.live_compaction_without_flag
HISTORY_NOT_OBJECT = _V11.history_not_object




# --- small rules, shared with the incremental mirror ------------------------------------


def as_int(value: Any, *, minimum: int) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= minimum else None


def telemetry(state: Any, lay: FieldNames = V11) -> tuple[int | None, int | None]:
    info = state.get(lay.token_usage) if isinstance(state, dict) else None
    if not isinstance(info, dict):
        return None, None
    last = info.get(lay.token_last)
    tokens = as_int(last.get(lay.total_tokens), minimum=0) if isinstance(last, dict) else None
    return tokens, as_int(info.get(lay.context_window), minimum=1)


@attrs.frozen
class RuntimeFacts:
    runtime_status: str | None
    busy_reason: str | None
    pending_requests: int
    unconfirmed_submissions: int
    problems: tuple[str, ...]


def runtime_facts(state: Any, lay: FieldNames = V11) -> RuntimeFacts:
    """Idle-related facts; reads three small top-level fields, never the turns."""
    if state is MISSING:
        return RuntimeFacts(None, "no_state", 0, 0, (NO_STATE,))
    if not isinstance(state, dict):
        return RuntimeFacts(None, "no_state", 0, 0, (STATE_NOT_OBJECT,))
    sentences = problems_of(lay)
    problems = []
    status = state.get(lay.runtime_status, MISSING)
    runtime = status.get(lay.runtime_type) if isinstance(status, dict) else None
    if not isinstance(runtime, str):
        runtime = None
        if status is not None:  # null: the thread is not loaded yet, which is a state, not a layout
            problems.append(sentences.runtime_not_string)
    requests = state.get(lay.requests)
    if not isinstance(requests, list):
        problems.append(sentences.requests_not_array)
    submissions = state.get(lay.submissions)
    if submissions is None:
        submissions = []
    elif not isinstance(submissions, list):
        problems.append(sentences.submissions_not_array)
    terminal = lay.submission_terminal
    unconfirmed = (sum(1 for s in submissions if not (isinstance(s, dict) and s.get(terminal) is True))
                   if isinstance(submissions, list) else 0)
    pending = sum(1 for r in requests if pending_request(r, lay)) if isinstance(requests, list) else 0
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


def pending_request(request: Any, lay: FieldNames = V11) -> bool:
    """A request waits for the user unless it says it is done (an answered approval)."""
    return not (isinstance(request, dict) and request.get(lay.request_completed) is True)


@attrs.frozen
class ItemFacts:
    """What one item contributes to the facts."""

    completed_id: str | None = None
    running_id: str | None = None
    problem: str | None = None
    is_user_message: bool = False


NOT_RELEVANT = ItemFacts()
USER_MESSAGE = ItemFacts(is_user_message=True)


def relevant_item_kinds(lay: FieldNames = V11) -> tuple[str, str]:
    """The item types :func:`item_facts` reads: any other object item is ``NOT_RELEVANT``."""
    return lay.user_message_type, lay.compaction_type


def item_facts(item: Any, *, in_history: bool, lay: FieldNames = V11) -> ItemFacts:
    if not isinstance(item, dict):
        return NOT_RELEVANT
    kind = item.get(lay.item_type)
    if kind == lay.user_message_type:
        return USER_MESSAGE
    if kind != lay.compaction_type:
        return NOT_RELEVANT
    sentences = problems_of(lay)
    item_id = item.get(lay.item_id)
    if not isinstance(item_id, str) or not item_id:
        return ItemFacts(problem=sentences.compaction_without_id)
    if lay.compaction_completed not in item:
        return NOT_RELEVANT if in_history else ItemFacts(problem=sentences.live_compaction_without_flag)
    completed = item[lay.compaction_completed]
    if not isinstance(completed, bool):
        return ItemFacts(problem=sentences.history_compaction_bad_flag if in_history
                         else sentences.live_compaction_without_flag)
    return ItemFacts(completed_id=item_id) if completed else ItemFacts(running_id=item_id)


def turn_items(turn: Any, lay: FieldNames = V11) -> list[Any] | None:
    """A turn's items; ``None`` when the turn or its items have the wrong type."""
    if not isinstance(turn, dict):
        return None
    items = turn.get(lay.items)
    if items is None:
        return []
    return items if isinstance(items, list) else None


def turn_problem(turn: Any, lay: FieldNames = V11) -> str | None:
    if not isinstance(turn, dict):
        return TURN_NOT_OBJECT
    return problems_of(lay).items_not_array if turn_items(turn, lay) is None else None


def turn_input(turn: Any, lay: FieldNames = V11) -> Any:
    params = turn.get(lay.turn_params) if isinstance(turn, dict) else None
    return params.get(lay.turn_input) if isinstance(params, dict) else None


def has_user_input(turn: Any, lay: FieldNames = V11) -> bool:
    value = turn_input(turn, lay)
    return isinstance(value, list) and len(value) > 0


def turn_identity(turn: dict[str, Any], lay: FieldNames = V11) -> Any:
    if _is_identity(turn.get(lay.turn_id)):
        return turn[lay.turn_id]
    params = turn.get(lay.turn_params)
    if isinstance(params, dict) and _is_identity(params.get(lay.client_message_id)):
        return params[lay.client_message_id]
    started = turn.get(lay.turn_started_at)
    return started if _is_identity(started) else None


def _is_identity(value: Any) -> bool:
    """An id is a string or a number; an object or a list in its place is not one (and a generation
    that renames fields would rename inside it, so facts would depend on the layout)."""
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


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
    import hashlib  # here, not at the top: see NO_USER_INPUT

    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def message_digest(message: dict[str, Any], lay: FieldNames = V11) -> str:
    """Digest of one user message: its id and its normalised content."""
    return _digest({"id": message.get(lay.item_id),
                    "content": normalise_input(message.get(lay.user_message_content))})


def fingerprint_of(turn: dict[str, Any], message_digests: list[str], lay: FieldNames = V11) -> str:
    """The user-boundary fingerprint of a user-bearing turn (its status plays no part).

    Messages enter through their digests, so a turn with many steering messages costs one
    short digest per message when another is appended, not a re-serialisation of them all.
    """
    return _digest({"id": turn_identity(turn, lay), "input": normalise_input(turn_input(turn, lay)),
                    "messages": message_digests})


def stopped(turn: dict[str, Any], lay: FieldNames = V11) -> bool:
    status = turn.get(lay.turn_status)
    return isinstance(status, str) and status in STOPPED_STATUSES


def running(turn: dict[str, Any], lay: FieldNames = V11) -> bool:
    return turn.get(lay.turn_status) == RUNNING_STATUS


def is_user_message(item: Any, lay: FieldNames = V11) -> bool:
    return isinstance(item, dict) and item.get(lay.item_type) == lay.user_message_type


def user_messages(turn: Any, lay: FieldNames = V11) -> list[dict[str, Any]]:
    """A turn's ``userMessage`` items, in order."""
    return [item for item in (turn_items(turn, lay) or []) if is_user_message(item, lay)]


def history_container(state: Any, lay: FieldNames = V11) -> tuple[Any, list[str]]:
    """The ``turnHistory.history`` object (or ``None``) and its layout problems.

    Read by its structure: ``turnHistory.kind`` is not consulted (which kinds exist is not
    published, and the paginated history is where every turn lives)."""
    history = state.get(lay.turn_history) if isinstance(state, dict) else None
    inner = history.get(lay.history) if isinstance(history, dict) else None
    if inner is None:
        return None, []
    sentences = problems_of(lay)
    if not isinstance(inner, dict):
        return None, [sentences.history_not_object]
    problems = []
    if not isinstance(inner.get(lay.islands), list):
        problems.append(sentences.islands_not_array)
    if not isinstance(inner.get(lay.entities), dict):
        problems.append(sentences.entities_not_object)
    return inner, problems


def island_keys(island: Any, lay: FieldNames = V11) -> Iterator[Any]:
    entries = island.get(lay.island_entries) if isinstance(island, dict) else None
    if isinstance(entries, list):
        for entry in entries:
            if isinstance(entry, dict):
                yield entry.get(lay.entry_key)


def join_problems(problems: Any) -> str | None:
    distinct = sorted(set(problems))
    return "; ".join(distinct) if distinct else None


# --- the naive derivation ---------------------------------------------------------------


def derive_facts(state: Any, lay: FieldNames = V11) -> ThreadFacts:
    """All facts, recomputed from scratch by walking the whole state."""
    runtime = runtime_facts(state, lay)
    if not isinstance(state, dict):
        return attrs.evolve(EMPTY, layout_problem=join_problems(runtime.problems))
    problems = list(runtime.problems)
    completed: set[str] = set()
    compacting: set[str] = set()
    ordered_turns: list[Any] = []

    def visit(turn: Any, in_history: bool) -> None:
        if (problem := turn_problem(turn, lay)) is not None:
            problems.append(problem)
        for item in turn_items(turn, lay) or []:
            facts = item_facts(item, in_history=in_history, lay=lay)
            if facts.problem:
                problems.append(facts.problem)
            if facts.completed_id:
                completed.add(facts.completed_id)
            if facts.running_id:
                compacting.add(facts.running_id)

    inner, history_problems = history_container(state, lay)
    problems += history_problems
    if inner is not None:
        entities = inner.get(lay.entities)
        if isinstance(entities, dict):
            for entity in entities.values():
                visit(entity, True)
            islands = inner.get(lay.islands)
            for island in islands if isinstance(islands, list) else []:
                for key in island_keys(island, lay):
                    if isinstance(key, str) and key in entities:
                        ordered_turns.append(entities[key])
    turns = state.get(lay.turns)
    if isinstance(turns, list):
        for turn in turns:
            visit(turn, False)
        ordered_turns += turns
    else:
        problems.append(problems_of(lay).turns_not_array)

    fingerprint, interrupted, turn_running, latest_id = NO_USER_INPUT, False, False, None
    for turn in reversed(ordered_turns):
        if not isinstance(turn, dict) or turn_items(turn, lay) is None:
            continue
        messages = user_messages(turn, lay)
        if has_user_input(turn, lay) or messages:
            fingerprint = fingerprint_of(turn, [message_digest(m, lay) for m in messages], lay)
            interrupted = stopped(turn, lay)
            turn_running = running(turn, lay)
            latest_id = turn_identity(turn, lay)
            break

    tokens, window = telemetry(state, lay)
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
