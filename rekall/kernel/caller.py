"""Which thread an MCP tool call comes from, so that an agent acts only on its own thread.

Codex (0.171.0) sends, with every ``tools/call``, a ``_meta`` naming the calling thread twice:
``threadId`` and ``x-codex-turn-metadata.thread_id``. Codex writes them, not the model, so a
prompt-injected agent can name another thread in its arguments but not in them. The acting
tools (``schedule_compaction``, ``cancel_compaction``, ``save_checkpoint``) go ahead only for the thread the
request says it comes from; the read-only tools may read any thread.

A request that names no thread, or names two, or one that is no thread id, does not say
whose call it is. Then the owner's view may: ``schedule_compaction`` goes ahead when the named
thread has a turn in progress that is calling ``schedule_compaction`` right now (an
``mcpToolCall`` item still ``inProgress``: this very call, unless another agent calls it on that
thread at the same moment; the extension's relayed state shows the item, the shared
app-server's read-only listing of a turn in progress does not). Without either, rekall does not
guess: the MCP server asks the user to confirm the thread where Codex can show the question
(``rekall.surfaces.mcp_confirm``), and refuses to act otherwise (the README says how to act then).
``cancel_compaction`` and ``save_checkpoint`` read no owner, so they need the request's word or the user's.
The CLI is the person at the terminal, not an agent's call: it passes no caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from rekall.kernel.errors import RekallError
from rekall.kernel.ids import is_uuid

#: Where Codex writes the calling thread in a tool call's ``_meta``, in the order they are read.
THREAD_FIELDS = ("threadId", "x-codex-turn-metadata.thread_id")
#: The command a person runs instead, per acting tool.
COMMANDS = {"schedule_compaction": "rekall schedule THREAD", "cancel_compaction": "rekall cancel JOB",
            "save_checkpoint": "rekall checkpoint THREAD --handoff FILE"}


class NotCallersThread(RekallError):
    """The call names a thread other than the one it comes from."""

    code = "not_callers_thread"


class CallerUnknown(RekallError):
    """The call does not say which thread it comes from."""

    code = "caller_unknown"


@attrs.frozen
class Caller:
    """The thread a tool call comes from (``None``: the request does not say), and why not."""

    thread_id: str | None
    #: Why the thread is not known (a sentence), when ``thread_id`` is ``None``.
    unknown_because: str = ""

    @classmethod
    def confirmed_by_user(cls, thread_id: str) -> Caller:
        """A caller the user confirmed when asked (the request and the owner's view did not say)."""
        return cls(thread_id)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None) -> Caller:
        """The calling thread as a request's ``_meta`` names it (both of Codex's fields agreeing)."""
        meta = meta or {}
        turn = meta.get("x-codex-turn-metadata")
        said = [meta.get("threadId"), turn.get("thread_id") if isinstance(turn, Mapping) else None]
        given = [value for value in said if value is not None]
        if not given:
            return cls(None, "the request's _meta names no thread (neither " + " nor ".join(THREAD_FIELDS) + ")")
        if not all(is_uuid(value) for value in given):
            return cls(None, "the request's _meta names its thread in a form that is not a thread id")
        if len({value.lower() for value in given}) > 1:
            return cls(None, "the request's _meta names two different threads in " + " and ".join(THREAD_FIELDS))
        return cls(given[0].lower())

    @property
    def needs_owners_view(self) -> bool:
        """The request does not name the calling thread: only the owner's view can."""
        return self.thread_id is None

    def require(self, thread_id: str, tool: str, calls_in_progress: frozenset[str] | None = None) -> None:
        """Refuse unless ``thread_id`` (validated) is the caller's own thread: as the request names it,
        else as the owner shows it (``calls_in_progress``: the tools its turn in progress is calling)."""
        if self.thread_id is None:
            if calls_in_progress is not None and tool in calls_in_progress:
                return
            shown = "" if calls_in_progress is None else f" and its owner shows no turn in progress calling {tool},"
            raise CallerUnknown(f"{tool} acts only on the calling agent's own thread, and {self.unknown_because},"
                                f"{shown} so rekall cannot tell whether thread {thread_id} is the caller's; nothing "
                                "was done",
                                hint=f"ask the user to run `{COMMANDS[tool]}` in a terminal, or use a Codex "
                                     "release that sends its thread with each tool call (0.171.0 does)")
        if self.thread_id != thread_id:
            raise NotCallersThread(f"{tool} names thread {thread_id}, but this call comes from thread "
                                   f"{self.thread_id}; an agent acts only on its own thread, so nothing was done",
                                   hint="pass your own CODEX_THREAD_ID; another thread's compaction is its "
                                        "user's decision")


def calls_in_progress(turns: Any) -> frozenset[str]:
    """The MCP tools a turn in progress among ``turns`` is calling right now (its ``mcpToolCall``
    items whose ``status`` is still ``inProgress``). Anything of another shape counts for nothing."""
    if not isinstance(turns, Iterable):
        return frozenset()
    return frozenset(item["tool"] for turn in turns if isinstance(turn, Mapping) and turn.get("status") == IN_PROGRESS
                     for item in _items(turn) if item.get("type") == "mcpToolCall"
                     and item.get("status") == IN_PROGRESS and isinstance(item.get("tool"), str))


IN_PROGRESS = "inProgress"


def _items(turn: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = turn.get("items")
    return [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []
