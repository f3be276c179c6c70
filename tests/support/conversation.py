"""One app-server thread seen as the extension's ``conversationState``, with patches.

The VS Code extension owns a thread in its own ``codex app-server`` and tells followers about
it over the IPC router: a ``conversationState`` snapshot, then patches. This module does that
translation for one thread, sans-I/O: feed it every app-server notification and server request
(:meth:`ConversationProjection.apply`) and it returns the patches that bring a follower's copy
up to date, while keeping its own copy (:attr:`state`) for snapshots.

How each app-server message maps onto the state (the fields rekall's mirror reads):

================================  =============================================================
``thread/status/changed``         ``threadRuntimeStatus`` replaced (``{type, activeFlags?}``)
``turn/started``                  a turn appended to ``turns``: ``turnId``, ``turnStartedAtMs``,
                                  ``status``, ``params.input`` (what the relay sent), ``items``
``turn/completed``                that turn's ``status`` replaced
``item/started``                  the item appended to its turn; a ``contextCompaction`` item
                                  gets the extension's private ``completed: false``
``item/completed``                the item replaced; ``contextCompaction`` gets ``completed: true``
``thread/tokenUsage/updated``     ``latestTokenUsageInfo`` replaced (``{total, last,
                                  modelContextWindow}``)
server request for the thread     ``{method, id, params}`` appended to ``requests``
``serverRequest/resolved``        that entry removed from ``requests``
``thread/name/updated``           ``title`` replaced
================================  =============================================================

Messages for other threads, deltas and everything else produce no patch. An item for a turn
that was never started here is dropped and counted in :attr:`dropped` rather than guessed into
some turn. Patches use the extension's format: ``{op, path, value}`` with ``path`` an array.
"""

from __future__ import annotations

import copy
from typing import Any

from rekall.thread.patches import apply_patches
from tests.support.appserver import Message, ServerRequest

Patch = dict[str, Any]


def _add(path: list[Any], value: Any) -> Patch:
    return {"op": "add", "path": path, "value": value}


def _replace(path: list[Any], value: Any) -> Patch:
    return {"op": "replace", "path": path, "value": value}


def _remove(path: list[Any]) -> Patch:
    return {"op": "remove", "path": path}


def _with_private_flag(item: dict[str, Any], completed: bool) -> dict[str, Any]:
    if item.get("type") == "contextCompaction":
        return {**item, "completed": completed}
    return item


class ConversationProjection:
    """The ``conversationState`` of one thread, kept current from app-server messages."""

    def __init__(self, thread: dict[str, Any], *, model: str | None = None) -> None:
        self.thread_id: str = thread["id"]
        self.state: dict[str, Any] = {
            "id": self.thread_id,
            "title": thread.get("name"),
            "cwd": thread.get("cwd"),
            "latestModel": model,
            "resumeState": "resumed",
            "threadRuntimeStatus": thread.get("status") or {"type": "notLoaded"},
            "requests": [],
            "unconfirmedTurnSubmissions": [],
            "latestTokenUsageInfo": None,
            "turns": [],
        }
        self._turn_params: dict[str, dict[str, Any]] = {}
        #: Messages for this thread that referred to a turn never started here.
        self.dropped = 0

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.state)

    def apply(self, message: Message) -> list[Patch]:
        """Update the state from one app-server message; return the patches that did it."""
        if message.params.get("threadId") != self.thread_id:
            return []
        patches = self._patches_for(message)
        if patches:
            self.state = apply_patches(self.state, copy.deepcopy(patches))
        return patches

    def note_turn_params(self, turn_id: str, params: dict[str, Any]) -> list[Patch]:
        """Record the ``turn/start`` params the relay sent, once the server named the turn.

        The ``turn/started`` notification may come before or after the ``turn/start`` reply,
        so the params are attached to whichever comes second.
        """
        index = self._turn_index(turn_id)
        if index is None:
            self._turn_params[turn_id] = params
            return []
        patches = [_replace(["turns", index, "params"], params)]
        self.state = apply_patches(self.state, copy.deepcopy(patches))
        return patches

    # --- the mapping --------------------------------------------------------------------

    def _turn_index(self, turn_id: Any) -> int | None:
        for index in range(len(self.state["turns"]) - 1, -1, -1):
            if self.state["turns"][index].get("turnId") == turn_id:
                return index
        return None

    def _patches_for(self, message: Message) -> list[Patch]:
        params = message.params
        if isinstance(message, ServerRequest):
            return [_add(["requests", "-"], {"method": message.method, "id": message.id, "params": params})]
        method = message.method
        if method == "thread/status/changed":
            return [_replace(["threadRuntimeStatus"], params["status"])]
        if method == "thread/tokenUsage/updated":
            return [_replace(["latestTokenUsageInfo"], params["tokenUsage"])]
        if method == "thread/name/updated":
            return [_replace(["title"], params.get("threadName"))]
        if method == "serverRequest/resolved":
            for index, request in enumerate(self.state["requests"]):
                if request.get("id") == params.get("requestId"):
                    return [_remove(["requests", index])]
            return []
        if method == "turn/started":
            turn = params["turn"]
            started_at = turn.get("startedAt")
            record = {
                "turnId": turn["id"],
                "turnStartedAtMs": started_at * 1000 if isinstance(started_at, int) else None,
                "status": turn.get("status", "inProgress"),
                "params": self._turn_params.pop(turn["id"], {"input": []}),
                "items": [],
            }
            return [_add(["turns", "-"], record)]
        if method == "turn/completed":
            index = self._turn_index(params["turn"]["id"])
            if index is None:
                self.dropped += 1
                return []
            return [_replace(["turns", index, "status"], params["turn"].get("status"))]
        if method in ("item/started", "item/completed"):
            return self._item_patches(method, params)
        return []

    def _item_patches(self, method: str, params: dict[str, Any]) -> list[Patch]:
        index = self._turn_index(params.get("turnId"))
        if index is None:
            self.dropped += 1
            return []
        item = _with_private_flag(params["item"], completed=method == "item/completed")
        items = self.state["turns"][index]["items"]
        for position, existing in enumerate(items):
            if existing.get("id") == item.get("id"):
                return [_replace(["turns", index, "items", position], item)]
        return [_add(["turns", index, "items", "-"], item)]
