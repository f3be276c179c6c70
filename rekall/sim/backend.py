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
``owner.publish_snapshot(jump=False)``
    Broadcast a fresh snapshot (from ``backend.snapshot()``) to every follower; with
    ``jump`` the revision first skips one, as the real owner's unsolicited snapshots do.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from typing import Any, Protocol

from rekall.thread.patches import apply_patches


class RouterError(Exception):
    """Answer the current request with this router error string."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class OwnerPort(Protocol):
    def publish(self, patches: list[dict[str, Any]]) -> None: ...

    def publish_snapshot(self, *, jump: bool = False) -> None: ...


class Backend(Protocol):
    thread_id: str

    def snapshot(self) -> dict[str, Any]: ...

    async def start(self, owner: OwnerPort) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, method: str, params: dict[str, Any]) -> Any: ...


COMPACT = "thread-follower-compact-thread"
#: The state is written with v11 names; a build that names a field otherwise declares it
#: (:attr:`rekall.sim.protocol.Build.renames`) and the owner publishes the build's names.
TOKEN_USAGE = "latestTokenUsageInfo"
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

    Shapes of the real extension (``extension-generations.md`` §3), one option each:

    ``history_mode="paginated"``
        Every turn lives in ``turnHistory.history.entitiesByKey``, ordered by the
        ``{key, value}`` entries of ``turnHistory.history.islands``; the live ``turns`` stay
        empty. ``history_kind`` is the ``turnHistory.kind`` written (not ``canonical`` by
        default: which kinds exist is not published).
    ``runtime=None`` / ``"notLoaded"`` / ``"systemError"``
        The initial ``threadRuntimeStatus`` (``None`` is ``null``: the thread is not loaded
        yet); :meth:`load_thread` makes it idle.
    ``answered_requests=N``
        ``N`` approvals already answered, left in ``requests[]`` with ``completed: true``;
        :meth:`answer_request` answers one in place the same way.
    ``system_error_after_turn=True``
        When a turn ends (a compaction turn too), the runtime goes to ``systemError`` (and
        stays) instead of idle.
    ``real_submissions=True``
        ``unconfirmedTurnSubmissions`` as the real bridges show it: absent when empty,
        entries ``{requestId, method, stage, clientUserMessageId}`` without a ``terminal``
        flag, each removed when confirmed (and the key deleted with the last).
    ``snapshots_at_turn_boundaries=True``
        An unsolicited snapshot at every turn start and end (the owner's revision jumps).
    ``replace_root_at_turn_end=True``
        A turn's end is published as one root replace (``path: []``) of the whole state.
    """

    def __init__(
        self,
        thread_id: str | None = None,
        *,
        runtime: str | None = "idle",
        tokens: int | None = 90000,
        window: int | None = 100000,
        compaction_delay_s: float = 0.05,
        compact_ack_delay_s: float = 0.0,
        telemetry_after: str | list[int | None] = "default",
        telemetry_step_s: float = 0.2,
        turn_duration_s: float | None = 0.05,
        start_turn_reply: Any = None,
        history_turns: int = 0,
        history_mode: str = "live",
        history_kind: str = "paginated",
        answered_requests: int = 0,
        system_error_after_turn: bool = False,
        real_submissions: bool = False,
        snapshots_at_turn_boundaries: bool = False,
        replace_root_at_turn_end: bool = False,
    ) -> None:
        if history_mode not in ("live", "paginated"):
            raise ValueError(f"history_mode must be 'live' or 'paginated', got {history_mode!r}")
        self.thread_id = thread_id or str(uuid.uuid4())
        self.compaction_delay_s = compaction_delay_s
        self.compact_ack_delay_s = compact_ack_delay_s
        self.telemetry_after = telemetry_after
        self.telemetry_step_s = telemetry_step_s
        self.turn_duration_s = turn_duration_s
        self.start_turn_reply = start_turn_reply
        self.paginated = history_mode == "paginated"
        self.system_error_after_turn = system_error_after_turn
        self.real_submissions = real_submissions
        self.snapshots_at_turn_boundaries = snapshots_at_turn_boundaries
        self.replace_root_at_turn_end = replace_root_at_turn_end
        self._owner: OwnerPort | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ids = itertools.count(1)
        self._clock = itertools.count(1000, 100)  # turnStartedAtMs, increasing
        turns = [
            {"turnId": "user-turn", "turnStartedAtMs": 100, "status": "completed",
             "params": {"input": _text_input("hello")}, "items": []},
            {"turnId": "old-compaction-turn", "turnStartedAtMs": 200, "status": "completed",
             "params": {"input": []}, "items": [{"type": "contextCompaction", "id": "old", "completed": True}]},
        ]
        self.state: dict[str, Any] = {
            "id": self.thread_id,
            "threadRuntimeStatus": _runtime(runtime),
            "requests": [_request(f"answered-{i}", completed=True) for i in range(answered_requests)],
            "unconfirmedTurnSubmissions": [],
            TOKEN_USAGE: None,
            "turns": turns,
        }
        if real_submissions:
            del self.state["unconfirmedTurnSubmissions"]
        if tokens is not None or window is not None:
            self.state[TOKEN_USAGE] = _usage(tokens, window)
        if history_turns or self.paginated:
            self.state["turnHistory"] = _history(history_turns, history_kind if self.paginated else "canonical")
        if self.paginated:
            self.state["historyMode"] = "paginated"
            self.state["turns"] = []
            for turn in turns:
                self._store_turn(self.state, turn)

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

    # -- where turns live ----------------------------------------------------------------

    def turns(self) -> list[dict[str, Any]]:
        """Every turn in order, wherever it lives (live ``turns``, or the paginated history)."""
        if not self.paginated:
            return list(self.state["turns"])
        history = self.state["turnHistory"]["history"]
        return [history["entitiesByKey"][entry["value"]]
                for island in history["islands"] for entry in island["entries"]]

    def _turn_path(self, index: int) -> list[Any]:
        """The patch path of the turn at ``index`` (negative counts from the end)."""
        if not self.paginated:
            return ["turns", index % len(self.state["turns"])]
        return ["turnHistory", "history", "entitiesByKey", self.turns()[index]["turnId"]]

    def _add_turn(self, turn: dict[str, Any]) -> list[dict[str, Any]]:
        """Patches that append ``turn`` (paginated: an entity and its entry in the newest island)."""
        if not self.paginated:
            return [add(["turns", "-"], turn)]
        history = ["turnHistory", "history"]
        island = len(self.state["turnHistory"]["history"]["islands"]) - 1
        return [add([*history, "entitiesByKey", turn["turnId"]], turn),
                add([*history, "islands", island, "entries", "-"], {"key": f"entry-{turn['turnId']}",
                                                                   "value": turn["turnId"]})]

    @staticmethod
    def _store_turn(state: dict[str, Any], turn: dict[str, Any]) -> None:
        history = state["turnHistory"]["history"]
        history["entitiesByKey"][turn["turnId"]] = turn
        history["islands"][-1]["entries"].append({"key": f"entry-{turn['turnId']}", "value": turn["turnId"]})

    # -- scripting: every method makes one change and publishes it -----------------------

    def change(self, patches: list[dict[str, Any]]) -> None:
        """Apply raw patches to the state and publish them."""
        self.state = apply_patches(self.state, copy.deepcopy(patches))
        if self._owner is not None:
            self._owner.publish(patches)

    def _turn_boundary(self, patches: list[dict[str, Any]], *, end: bool) -> None:
        """Publish a turn's start or end the way the options say the owner does it."""
        if end and self.replace_root_at_turn_end:
            after = apply_patches(copy.deepcopy(self.state), copy.deepcopy(patches))
            patches = [replace([], after)]
        self.change(patches)
        if self.snapshots_at_turn_boundaries and self._owner is not None:
            self._owner.publish_snapshot(jump=True)

    def set_runtime(self, runtime: str | None) -> None:
        """``None`` publishes ``threadRuntimeStatus: null``."""
        self.change([replace(["threadRuntimeStatus"], _runtime(runtime))])

    def load_thread(self) -> None:
        """The owner finished loading the thread: the runtime becomes idle."""
        self.set_runtime("idle")

    def user_turn(self, text: str = "next task", *, turn_id: str | None = None, status: str = "inProgress",
                  started_at_ms: int | None = None, active: bool | None = None) -> str:
        """Append a user turn; by default it is in progress and the runtime is active."""
        turn_id = turn_id or f"turn-{next(self._ids)}"
        turn = {"turnId": turn_id, "turnStartedAtMs": started_at_ms if started_at_ms is not None else next(self._clock),
                "status": status, "params": {"input": _text_input(text)}, "items": []}
        patches = self._add_turn(turn)
        running = status == "inProgress" if active is None else active
        patches.append(replace(["threadRuntimeStatus"], _runtime("active" if running else "idle")))
        self._turn_boundary(patches, end=False)
        return turn_id

    def complete_turn(self, status: str = "completed", *, idle: bool = True) -> None:
        """Finish the latest turn (``interrupted`` or ``failed`` for a stopped turn).

        With ``system_error_after_turn`` the runtime goes to ``systemError`` instead of idle."""
        patches = [replace([*self._turn_path(-1), "status"], status)]
        if idle:
            patches.append(self._runtime_after_turn())
        self._turn_boundary(patches, end=True)

    def _runtime_after_turn(self) -> dict[str, Any]:
        return replace(["threadRuntimeStatus"], _runtime("systemError" if self.system_error_after_turn else "idle"))

    def stop_turn(self, status: str = "interrupted") -> None:
        self.complete_turn(status)

    def steer(self, text: str) -> str:
        """Mid-turn steering: a ``userMessage`` item added to the latest turn."""
        item_id = f"msg-{next(self._ids)}"
        self.change([add([*self._turn_path(-1), "items", "-"],
                         {"type": "userMessage", "id": item_id, "content": _text_input(text)})])
        return item_id

    def agent_message(self, text: str = "working") -> None:
        """Progress that is not user input (must not move the user boundary)."""
        self.change([add([*self._turn_path(-1), "items", "-"],
                         {"type": "agentMessage", "id": f"agent-{next(self._ids)}", "text": text})])

    def mcp_tool_call(self, tool: str, *, server: str = "rekall", status: str = "inProgress") -> str:
        """The agent calls an MCP tool: an ``mcpToolCall`` item in the latest turn (``inProgress``
        while the call runs, as the engine shows it)."""
        item_id = f"call-{next(self._ids)}"
        self.change([add([*self._turn_path(-1), "items", "-"],
                         {"type": "mcpToolCall", "id": item_id, "server": server, "tool": tool, "status": status})])
        return item_id

    def cosmetic_edit(self) -> None:
        """Add ``text_elements`` to the latest user input (must not move the boundary either)."""
        turns = self.turns()
        for index in range(len(turns) - 1, -1, -1):
            if turns[index]["params"]["input"]:
                self.change([add([*self._turn_path(index), "params", "input", 0, "text_elements"], [])])
                return

    def add_request(self, request_id: str | None = None, method: str = "item/commandExecution/requestApproval") -> str:
        request_id = request_id or f"req-{next(self._ids)}"
        self.change([add(["requests", "-"], _request(request_id, method=method))])
        return request_id

    def resolve_request(self, request_id: str) -> None:
        """The request goes away (removed from ``requests[]``)."""
        self.change([remove(["requests", self._request_index(request_id)])])

    def answer_request(self, request_id: str) -> None:
        """The request is answered in place: it stays in ``requests[]`` with ``completed: true``."""
        self.change([replace(["requests", self._request_index(request_id), "completed"], True)])

    def _request_index(self, request_id: str) -> int:
        return next(i for i, r in enumerate(self.state["requests"]) if r["id"] == request_id)

    def add_unconfirmed_submission(self, submission_id: str | None = None) -> str:
        submission_id = submission_id or f"sub-{next(self._ids)}"
        if not self.real_submissions:
            self.change([add(["unconfirmedTurnSubmissions", "-"], {"id": submission_id, "terminal": False})])
            return submission_id
        entry = {"requestId": submission_id, "method": START_TURN, "stage": "outcome-unknown",
                 "clientUserMessageId": f"message-{submission_id}"}
        if "unconfirmedTurnSubmissions" in self.state:
            self.change([add(["unconfirmedTurnSubmissions", "-"], entry)])
        else:
            self.change([add(["unconfirmedTurnSubmissions"], [entry])])
        return submission_id

    def confirm_submission(self, submission_id: str) -> None:
        if not self.real_submissions:
            index = next(i for i, s in enumerate(self.state["unconfirmedTurnSubmissions"]) if s["id"] == submission_id)
            self.change([replace(["unconfirmedTurnSubmissions", index, "terminal"], True)])
            return
        entries = self.state["unconfirmedTurnSubmissions"]
        if len(entries) == 1:
            self.change([remove(["unconfirmedTurnSubmissions"])])  # the key goes with the last entry
            return
        index = next(i for i, s in enumerate(entries) if s["requestId"] == submission_id)
        self.change([remove(["unconfirmedTurnSubmissions", index])])

    def set_telemetry(self, tokens: int | None, window: int | None = 100000) -> None:
        """``tokens=None`` removes the telemetry altogether (the "missing" scenario)."""
        value = None if tokens is None else _usage(tokens, window)
        self.change([replace([TOKEN_USAGE], value)])

    def page_in_history(self, count: int = 1) -> None:
        """Older turns appear at the front of the history (paging)."""
        if "turnHistory" not in self.state:
            self.change([add(["turnHistory"], _history(0, "canonical"))])
        patches = []
        for _ in range(count):
            key = f"older-{next(self._ids)}"
            patches.append(add(["turnHistory", "history", "entitiesByKey", key], _history_turn(key, 1)))
            patches.append(add(["turnHistory", "history", "islands", 0, "entries", 0], {"key": f"entry-{key}",
                                                                                       "value": key}))
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
        self._turn_boundary([*self._add_turn(turn), replace(["threadRuntimeStatus"], _runtime("active"))], end=False)
        self._spawn(self._finish_compaction(self._turn_path(-1)))

    async def _finish_compaction(self, path: list[Any]) -> None:
        await asyncio.sleep(self.compaction_delay_s)
        values = (TELEMETRY_AFTER_COMPACTION[self.telemetry_after] if isinstance(self.telemetry_after, str)
                  else list(self.telemetry_after))
        window = self._window()
        first = values[0] if values else None
        self._turn_boundary([
            replace([*path, "items", 0, "completed"], True),
            replace([TOKEN_USAGE], None if first is None else _usage(first, window)),
            replace([*path, "status"], "completed"),
            self._runtime_after_turn(),
        ], end=True)
        for value in values[1:]:
            await asyncio.sleep(self.telemetry_step_s)
            self.set_telemetry(value, window)

    def _window(self) -> int | None:
        info = self.state.get(TOKEN_USAGE)
        return info.get("modelContextWindow", 100000) if isinstance(info, dict) else 100000

    def _begin_requested_turn(self, params: dict[str, Any]) -> Any:
        # 26.9xx: turnStart.request; 26.721: turnStartParams (the owner checked its own build's shape).
        turn_start = params.get("turnStart")
        request = (turn_start.get("request", {}) if isinstance(turn_start, dict)
                   else params.get("turnStartParams") if isinstance(params.get("turnStartParams"), dict) else {})
        turn_id = f"resumed-turn-{next(self._ids)}" if self.start_turn_reply is None else "resumed-turn"
        reply = self.start_turn_reply or {"result": {"turn": {"id": turn_id, "status": "inProgress"}}}
        turn = {"turnId": turn_id, "turnStartedAtMs": next(self._clock), "status": "inProgress",
                "params": {"input": copy.deepcopy(request.get("input", [])),
                           "clientUserMessageId": request.get("clientUserMessageId")},
                "items": []}
        self._turn_boundary([*self._add_turn(turn), replace(["threadRuntimeStatus"], _runtime("active"))], end=False)
        if self.turn_duration_s is not None:
            self._spawn(self._finish_requested_turn())
        return reply

    async def _finish_requested_turn(self) -> None:
        await asyncio.sleep(self.turn_duration_s or 0)
        self.complete_turn()


def _runtime(runtime: str | None) -> dict[str, Any] | None:
    """A ``threadRuntimeStatus`` as the extension writes it (``None`` is ``null``)."""
    return None if runtime is None else {"type": runtime, "activeFlags": []}


def _request(request_id: str, *, method: str = "item/commandExecution/requestApproval",
             completed: bool = False) -> dict[str, Any]:
    return {"id": request_id, "method": method, "params": {}, "completed": completed}


def _usage(tokens: int | None, window: int | None) -> dict[str, Any]:
    last = {"totalTokens": tokens, "inputTokens": tokens, "outputTokens": 0}
    return {"total": dict(last), "last": last, "modelContextWindow": window}


def _history_turn(key: str, started_at_ms: int) -> dict[str, Any]:
    return {"turnId": key, "turnStartedAtMs": started_at_ms, "status": "completed",
            "params": {"input": _text_input(f"older question {key}")},
            "items": [{"type": "userMessage", "id": f"{key}-msg", "content": _text_input(f"older question {key}")},
                      {"type": "contextCompaction", "id": f"{key}-compaction"}]}  # reloaded: no `completed`


def _history(count: int, kind: str) -> dict[str, Any]:
    """A ``turnHistory`` with ``count`` reloaded older turns, in one island."""
    keys = [f"history-{i}" for i in range(count)]
    return {"kind": kind,
            "history": {"islands": [{"id": "island-0", "entries": [{"key": f"entry-{k}", "value": k} for k in keys],
                                     "olderBoundary": None, "newerBoundary": None}],
                        "entitiesByKey": {k: _history_turn(k, 10 + i) for i, k in enumerate(keys)},
                        "generation": 1, "isComplete": False}}
