"""The owner side of the simulator: who produces the thread, behind a small interface.

The simulated router/owner (:mod:`rekall.sim.owner`) speaks the extension's wire protocol.
What the thread *is* comes from a :class:`Backend`:

* :class:`ScriptedBackend` (here): a conversation state changed by test scripts.
* a Codex backend (``--backend codex``, another module): relays to a real
  ``codex app-server`` — follower compact → ``thread/compact/start``, start-turn →
  ``turn/start``, app-server notifications → patches.

The contract, in both directions:

``backend.thread_id``
    The thread the owner owns. Owner discovery for any other id answers ``no-client-found``.
``backend.snapshot() -> dict``
    The whole ``conversationState`` now. The owner serializes it at once.
``await backend.start(owner)`` / ``await backend.stop()``
    Lifecycle, run inside the owner's event loop. ``owner`` is an :class:`OwnerPort`.
``await backend.handle(method, params) -> result``
    A follower request addressed to the owner (``thread-follower-*``). The return value is
    the response's ``result``; raising :class:`RouterError` answers with that router error
    string (``no-handler-for-request`` for methods the backend does not know).

``OwnerPort`` (what the backend calls):

``owner.publish(patches)``
    The backend has already applied ``patches`` to its own state; the owner assigns
    ``baseRevision``/``revision`` and sends them (or a snapshot, in snapshot mode) to the
    followers. Serialized immediately, so the backend may keep mutating its state.
``owner.publish_snapshot()``
    Broadcast a fresh snapshot (from ``backend.snapshot()``) to every follower.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from typing import Any, Protocol

from rekall.adapters.patches import apply_patches


class RouterError(Exception):
    """Answer the current request with this router error string."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class OwnerPort(Protocol):
    def publish(self, patches: list[dict[str, Any]]) -> None: ...

    def publish_snapshot(self) -> None: ...


class Backend(Protocol):
    thread_id: str

    def snapshot(self) -> dict[str, Any]: ...

    async def start(self, owner: OwnerPort) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, method: str, params: dict[str, Any]) -> Any: ...


COMPACT = "thread-follower-compact-thread"
START_TURN = "thread-follower-start-turn"

#: Token counts published after a compaction, by the Node fake's scenario names.
TELEMETRY_AFTER_COMPACTION: dict[str, list[int | None]] = {
    "default": [10000],
    "missing": [None],
    "stale": [90000],
    "low": [61000],
    "exact": [60000],
    "degrades": [10000, 70000],
}


def _text_input(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def add(path: list[Any], value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


def replace(path: list[Any], value: Any) -> dict[str, Any]:
    return {"op": "replace", "path": path, "value": value}


def remove(path: list[Any]) -> dict[str, Any]:
    return {"op": "remove", "path": path}


class ScriptedBackend:
    """A thread whose every change is made by a script (a test, or ``rekall demo``).

    The initial thread matches the Node fake: an idle runtime, no requests, a completed
    user turn ``user-turn`` (input ``hello``), a turn holding the completed compaction
    ``old``, and 90000 of 100000 tokens used.

    Compaction: :meth:`handle` answers ``{ok: true}`` at once (after ``compact_ack_delay_s``),
    then starts a compaction turn (empty input, a ``contextCompaction`` item with
    ``completed: false``, runtime active). After ``compaction_delay_s`` the item becomes
    ``completed: true``, the tokens drop to the first value of ``telemetry_after`` (a
    scenario name from :data:`TELEMETRY_AFTER_COMPACTION` or a list; ``None`` removes the
    telemetry), the turn completes and the runtime goes idle. Further values follow every
    ``telemetry_step_s``.

    Start-turn: validates nothing (tests inspect the recorded params), answers
    ``start_turn_reply`` (default a started turn ``resumed-turn``), adds the user turn and
    marks the runtime active; after ``turn_duration_s`` (``None``: never) the turn completes.
    """

    def __init__(
        self,
        thread_id: str | None = None,
        *,
        runtime: str = "idle",
        tokens: int | None = 90000,
        window: int | None = 100000,
        compaction_delay_s: float = 0.05,
        compact_ack_delay_s: float = 0.0,
        telemetry_after: str | list[int | None] = "default",
        telemetry_step_s: float = 0.2,
        turn_duration_s: float | None = 0.05,
        start_turn_reply: Any = None,
        history_turns: int = 0,
    ) -> None:
        self.thread_id = thread_id or str(uuid.uuid4())
        self.compaction_delay_s = compaction_delay_s
        self.compact_ack_delay_s = compact_ack_delay_s
        self.telemetry_after = telemetry_after
        self.telemetry_step_s = telemetry_step_s
        self.turn_duration_s = turn_duration_s
        self.start_turn_reply = start_turn_reply
        self._owner: OwnerPort | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ids = itertools.count(1)
        self._clock = itertools.count(1000, 100)  # turnStartedAtMs, increasing
        self.state: dict[str, Any] = {
            "id": self.thread_id,
            "threadRuntimeStatus": {"type": runtime},
            "requests": [],
            "unconfirmedTurnSubmissions": [],
            "latestTokenUsageInfo": None,
            "turns": [
                {"turnId": "user-turn", "turnStartedAtMs": 100, "status": "completed",
                 "params": {"input": _text_input("hello")}, "items": []},
                {"turnId": "old-compaction-turn", "turnStartedAtMs": 200, "status": "completed",
                 "params": {"input": []}, "items": [{"type": "contextCompaction", "id": "old", "completed": True}]},
            ],
        }
        if tokens is not None or window is not None:
            self.state["latestTokenUsageInfo"] = _usage(tokens, window)
        if history_turns:
            self.state["turnHistory"] = _canonical_history(history_turns)

    # -- the Backend contract ------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return self.state

    async def start(self, owner: OwnerPort) -> None:
        self._owner = owner

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        if method == COMPACT:
            if self.compact_ack_delay_s:
                await asyncio.sleep(self.compact_ack_delay_s)
            self._begin_compaction()
            return {"ok": True}
        if method == START_TURN:
            return self._begin_requested_turn(params)
        raise RouterError("no-handler-for-request")

    # -- scripting: every method makes one change and publishes it -----------------------

    def change(self, patches: list[dict[str, Any]]) -> None:
        """Apply raw patches to the state and publish them."""
        self.state = apply_patches(self.state, copy.deepcopy(patches))
        if self._owner is not None:
            self._owner.publish(patches)

    def set_runtime(self, runtime: str) -> None:
        self.change([replace(["threadRuntimeStatus"], {"type": runtime})])

    def user_turn(self, text: str = "next task", *, turn_id: str | None = None, status: str = "inProgress",
                  started_at_ms: int | None = None, active: bool | None = None) -> str:
        """Append a user turn; by default it is in progress and the runtime is active."""
        turn_id = turn_id or f"turn-{next(self._ids)}"
        turn = {"turnId": turn_id, "turnStartedAtMs": started_at_ms if started_at_ms is not None else next(self._clock),
                "status": status, "params": {"input": _text_input(text)}, "items": []}
        patches = [add(["turns", "-"], turn)]
        running = status == "inProgress" if active is None else active
        patches.append(replace(["threadRuntimeStatus"], {"type": "active" if running else "idle"}))
        self.change(patches)
        return turn_id

    def complete_turn(self, status: str = "completed", *, idle: bool = True) -> None:
        """Finish the latest turn (``interrupted`` or ``failed`` for a stopped turn)."""
        index = len(self.state["turns"]) - 1
        patches = [replace(["turns", index, "status"], status)]
        if idle:
            patches.append(replace(["threadRuntimeStatus"], {"type": "idle"}))
        self.change(patches)

    def stop_turn(self, status: str = "interrupted") -> None:
        self.complete_turn(status)

    def steer(self, text: str) -> str:
        """Mid-turn steering: a ``userMessage`` item added to the latest turn."""
        item_id = f"msg-{next(self._ids)}"
        index = len(self.state["turns"]) - 1
        self.change([add(["turns", index, "items", "-"],
                         {"type": "userMessage", "id": item_id, "content": _text_input(text)})])
        return item_id

    def agent_message(self, text: str = "working") -> None:
        """Progress that is not user input (must not move the user boundary)."""
        index = len(self.state["turns"]) - 1
        self.change([add(["turns", index, "items", "-"],
                         {"type": "agentMessage", "id": f"agent-{next(self._ids)}", "text": text})])

    def cosmetic_edit(self) -> None:
        """Add ``text_elements`` to the latest user input (must not move the boundary either)."""
        for index in range(len(self.state["turns"]) - 1, -1, -1):
            if self.state["turns"][index]["params"]["input"]:
                self.change([add(["turns", index, "params", "input", 0, "text_elements"], [])])
                return

    def add_request(self, request_id: str | None = None, method: str = "item/commandExecution/requestApproval") -> str:
        request_id = request_id or f"req-{next(self._ids)}"
        self.change([add(["requests", "-"], {"id": request_id, "method": method, "params": {}})])
        return request_id

    def resolve_request(self, request_id: str) -> None:
        index = next(i for i, r in enumerate(self.state["requests"]) if r["id"] == request_id)
        self.change([remove(["requests", index])])

    def add_unconfirmed_submission(self, submission_id: str | None = None) -> str:
        submission_id = submission_id or f"sub-{next(self._ids)}"
        self.change([add(["unconfirmedTurnSubmissions", "-"], {"id": submission_id, "terminal": False})])
        return submission_id

    def confirm_submission(self, submission_id: str) -> None:
        index = next(i for i, s in enumerate(self.state["unconfirmedTurnSubmissions"]) if s["id"] == submission_id)
        self.change([replace(["unconfirmedTurnSubmissions", index, "terminal"], True)])

    def set_telemetry(self, tokens: int | None, window: int | None = 100000) -> None:
        """``tokens=None`` removes the telemetry altogether (the "missing" scenario)."""
        value = None if tokens is None else _usage(tokens, window)
        self.change([replace(["latestTokenUsageInfo"], value)])

    def page_in_history(self, count: int = 1) -> None:
        """Older turns appear at the front of the canonical history (paging)."""
        if "turnHistory" not in self.state:
            self.change([add(["turnHistory"], _canonical_history(0))])
        patches = []
        for _ in range(count):
            key = f"older-{next(self._ids)}"
            patches.append(add(["turnHistory", "history", "entitiesByKey", key], _history_turn(key, 1)))
            patches.append(add(["turnHistory", "history", "islands", 0, "entries", 0], {"value": key}))
        self.change(patches)

    # -- compaction and the requested turn -----------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _begin_compaction(self) -> None:
        compaction_id = f"compaction-{next(self._ids)}"
        turn = {"turnId": f"compaction-turn-{compaction_id}", "turnStartedAtMs": next(self._clock),
                "status": "inProgress", "params": {"input": []},
                "items": [{"type": "contextCompaction", "id": compaction_id, "completed": False}]}
        self.change([add(["turns", "-"], turn), replace(["threadRuntimeStatus"], {"type": "active"})])
        self._spawn(self._finish_compaction(len(self.state["turns"]) - 1))

    async def _finish_compaction(self, index: int) -> None:
        await asyncio.sleep(self.compaction_delay_s)
        values = (TELEMETRY_AFTER_COMPACTION[self.telemetry_after] if isinstance(self.telemetry_after, str)
                  else list(self.telemetry_after))
        window = self._window()
        first = values[0] if values else None
        self.change([
            replace(["turns", index, "items", 0, "completed"], True),
            replace(["latestTokenUsageInfo"], None if first is None else _usage(first, window)),
            replace(["turns", index, "status"], "completed"),
            replace(["threadRuntimeStatus"], {"type": "idle"}),
        ])
        for value in values[1:]:
            await asyncio.sleep(self.telemetry_step_s)
            self.set_telemetry(value, window)

    def _window(self) -> int | None:
        info = self.state.get("latestTokenUsageInfo")
        return info.get("modelContextWindow", 100000) if isinstance(info, dict) else 100000

    def _begin_requested_turn(self, params: dict[str, Any]) -> Any:
        request = params.get("turnStart", {}).get("request", {}) if isinstance(params.get("turnStart"), dict) else {}
        turn_id = f"resumed-turn-{next(self._ids)}" if self.start_turn_reply is None else "resumed-turn"
        reply = self.start_turn_reply or {"result": {"turn": {"id": turn_id, "status": "inProgress"}}}
        turn = {"turnId": turn_id, "turnStartedAtMs": next(self._clock), "status": "inProgress",
                "params": {"input": copy.deepcopy(request.get("input", [])),
                           "clientUserMessageId": request.get("clientUserMessageId")},
                "items": []}
        self.change([add(["turns", "-"], turn), replace(["threadRuntimeStatus"], {"type": "active"})])
        if self.turn_duration_s is not None:
            self._spawn(self._finish_requested_turn(len(self.state["turns"]) - 1))
        return reply

    async def _finish_requested_turn(self, index: int) -> None:
        await asyncio.sleep(self.turn_duration_s or 0)
        self.complete_turn()


def _usage(tokens: int | None, window: int | None) -> dict[str, Any]:
    last = {"totalTokens": tokens, "inputTokens": tokens, "outputTokens": 0}
    return {"total": dict(last), "last": last, "modelContextWindow": window}


def _history_turn(key: str, started_at_ms: int) -> dict[str, Any]:
    return {"turnId": key, "turnStartedAtMs": started_at_ms, "status": "completed",
            "params": {"input": _text_input(f"older question {key}")},
            "items": [{"type": "userMessage", "id": f"{key}-msg", "content": _text_input(f"older question {key}")},
                      {"type": "contextCompaction", "id": f"{key}-compaction"}]}  # reloaded: no `completed`


def _canonical_history(count: int) -> dict[str, Any]:
    keys = [f"history-{i}" for i in range(count)]
    return {"kind": "canonical",
            "history": {"islands": [{"entries": [{"value": k} for k in keys]}],
                        "entitiesByKey": {k: _history_turn(k, 10 + i) for i, k in enumerate(keys)}}}
