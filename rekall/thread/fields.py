"""The field names the thread model reads, as one record.

The rules in :mod:`rekall.thread.facts` (and their incremental twin in
:mod:`rekall.thread.index`) never spell a field name: they read it from a :class:`FieldNames`.
A protocol generation that renames a field (say ``turnHistory`` or ``requests``) gives its
adapter a layout with the new name (``V11._replace(requests="pendingRequests")``) and
leaves the rules alone. A generation that changes the *meaning* of the state, not its
names, needs new rules, and the hypothesis test of index against rules.

The shapes of user input elements (``text``, ``image`` ...) are the app-server's
``UserInput`` and live with the fingerprint rules in :mod:`rekall.thread.facts`.

A ``NamedTuple``, as are the other records the worker builds before its first follow
(:mod:`rekall.adapters.extension.first_follow`): importing attrs and building its classes was the largest
part of that path.
"""

from __future__ import annotations

from typing import NamedTuple


class FieldNames(NamedTuple):
    """Where each fact lives in the conversation state. Defaults are the v11 names."""

    # Idle: the runtime status object and its type, pending requests, in-flight submissions.
    runtime_status: str = "threadRuntimeStatus"
    runtime_type: str = "type"
    requests: str = "requests"
    request_completed: str = "completed"
    submissions: str = "unconfirmedTurnSubmissions"
    submission_terminal: str = "terminal"
    # Turns: the live array and the paginated history.
    turns: str = "turns"
    turn_history: str = "turnHistory"
    history: str = "history"
    entities: str = "entitiesByKey"
    islands: str = "islands"
    island_entries: str = "entries"
    entry_key: str = "value"
    # One turn: its identity, input, status and items.
    turn_id: str = "turnId"
    turn_params: str = "params"
    turn_input: str = "input"
    client_message_id: str = "clientUserMessageId"
    turn_started_at: str = "turnStartedAtMs"
    turn_status: str = "status"
    items: str = "items"
    # One item: its type, id, and what the two relevant kinds carry.
    item_type: str = "type"
    item_id: str = "id"
    compaction_type: str = "contextCompaction"
    compaction_completed: str = "completed"
    user_message_type: str = "userMessage"
    user_message_content: str = "content"
    # Telemetry.
    token_usage: str = "latestTokenUsageInfo"
    token_last: str = "last"
    total_tokens: str = "totalTokens"
    context_window: str = "modelContextWindow"


#: The layout of ``thread-stream-state-changed`` v11.
V11 = FieldNames()
