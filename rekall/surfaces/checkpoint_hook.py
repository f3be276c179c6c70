"""The ``SessionStart(compact)`` hook's second branch: a thread's standing checkpoint
(:mod:`rekall.store.checkpoint`), after a compaction that no rekall job delivers for.

:mod:`rekall.surfaces.session_hook` calls :func:`checkpoint_answer` only when the compaction is not
the one the thread's latest job asked for (after that one only the job's handoff goes, by its route).
Then, when the thread has a current checkpoint whose record still verifies, it is framed (its age by
time and by turns since it was saved, the agent's own note, to be checked against the current state,
not an authorisation of its ``nextStep``) with the latest plan the transcript holds, and claimed.

**The compaction's key.** Codex's hook input names no compaction, so the transcript does: the key
is the SHA-256 (hex) of the bytes of the transcript's LAST ``compacted`` record line (without its
newline), the record Codex writes for the compaction this hook runs after. Each compaction writes
its own record (its time, its replacement history), so the next compaction has another key and
delivers again, and the same compaction's hook, run twice, finds its claim taken. Without a readable
transcript (or one with no ``compacted`` record) one compaction cannot be told from the next, and
no checkpoint is delivered.

**Cut.** Over Codex's hook budget the plan is cut first (it comes last), then the checkpoint as a
job's handoff is, with the path and seal of the whole.
"""

from __future__ import annotations

import json
import re

from rekall.surfaces.rollout import RECORD as _RECORD, instant

TYPE_CHECKING = False  # not typing's: the hook's start-up pays for every import
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path
    from typing import Any

_PLAN_CALL = b'"name":"update_plan"'
#: :data:`rekall.kernel.settings.CHECKPOINT_PLAN`'s variable, read here before that module is loaded.
PLAN_VARIABLE = "REKALL_CHECKPOINT_PLAN"
#: The record of a turn that ended (Codex's ``task_complete`` event; a compaction's own turn included).
_TURN_ENDED = b'event_msg","payload":\\{"type":"task_complete'


def checkpoint_answer(thread: str, dirs: list[Path], transcript: bytes | None, env: Mapping[str, str],
                      budget: int) -> tuple[str, dict[str, Any], Path, Any] | None:
    """The framed checkpoint for this compaction, what its claim records, the jobs directory it is in,
    and the claim's key; ``None`` when there is none to deliver."""
    import hashlib

    from rekall.store.checkpoint import current, sealed_record
    from rekall.store.delivery import DeliveryKey

    if transcript is None:
        return None  # one compaction cannot be told from the next: no checkpoint
    last = next(_backwards(transcript, b"compacted", b'"type":"compacted"'), None)
    if last is None:
        return None
    start, end, compacted_at = last
    saved = [(entry["at"], root, entry) for root in dirs if (entry := current(root, thread)) is not None]
    if not saved:
        return None
    _, root, entry = max(saved, key=lambda found: found[0])
    sealed = sealed_record(root, thread, entry["sha256"])
    if sealed is None:
        return None
    record, path = sealed
    from rekall.worker.continuation import checkpoint_text

    framed = checkpoint_text(record, str(path), age=_age(entry["at"]),
                             turns=_turns_since(transcript, entry["at"]))
    plan = _latest_plan(transcript) if _plan_wanted(env) else None
    context, detail = _fitted(framed, plan, str(path), entry["sha256"], budget)
    detail.update(checkpointSha256=entry["sha256"], compactedAt=compacted_at, plan=plan is not None)
    return context, detail, root, DeliveryKey(thread, compaction=hashlib.sha256(transcript[start:end]).hexdigest())


def has_checkpoint(thread: str, dirs: list[Path]) -> bool:
    """Whether any of ``dirs`` holds a checkpoint history for ``thread`` (cheap: one ``stat`` each)."""
    import os

    from rekall.store.paths import JobPaths

    return any(os.path.lexists(JobPaths(root).checkpoint_log(thread)) for root in dirs)


def _plan_wanted(env: Mapping[str, str]) -> bool:
    if not env.get(PLAN_VARIABLE):
        return True  # unset or empty: the default, without loading the settings (and typing) into the hook
    from rekall.kernel.settings import CHECKPOINT_PLAN

    try:
        return CHECKPOINT_PLAN.read(env)
    except Exception:  # noqa: BLE001 - a bad value: the checkpoint goes, without the plan
        return False


def _backwards(transcript: bytes, kind: bytes, needle: bytes) -> Iterator[tuple[int, int, str]]:
    """Each record of ``kind`` (what :data:`_RECORD` takes), last first: its line's start and end and
    its time. ``needle``: bytes each such line holds. Read from the end, so that a long rollout costs
    only the part after the records looked for."""
    pattern = re.compile(_RECORD % kind, re.MULTILINE)
    at = len(transcript)
    while (at := transcript.rfind(needle, 0, at)) >= 0:
        start = transcript.rfind(b"\n", 0, at) + 1
        found = pattern.match(transcript, start)
        if found:
            end = transcript.find(b"\n", start)
            yield start, len(transcript) if end < 0 else end, found[1].decode()
        at = start


def _turns_since(transcript: bytes, since: str) -> int | None:
    """How many turns ended after ``since`` (``None``: it cannot be told)."""
    try:
        start, turns = instant(since), 0
        for _, _, at in _backwards(transcript, _TURN_ENDED, b'"type":"task_complete"'):
            if instant(at) <= start:
                break
            turns += 1
        return turns
    except ValueError:
        return None


def _latest_plan(transcript: bytes) -> dict[str, Any] | None:
    """The arguments of the transcript's last ``update_plan`` call (a ``response_item`` record)."""
    at = len(transcript)
    while (at := transcript.rfind(_PLAN_CALL, 0, at)) >= 0:
        start = transcript.rfind(b"\n", 0, at) + 1
        end = transcript.find(b"\n", at)
        try:
            record = json.loads(transcript[start:] if end < 0 else transcript[start:end])
            payload = record["payload"]
            if record.get("type") == "response_item" and payload.get("type") == "function_call" \
                    and payload.get("name") == "update_plan":
                plan = json.loads(payload["arguments"])
                return plan if isinstance(plan, dict) and isinstance(plan.get("plan"), list) else None
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # quoted inside another record, or not Codex's shape: look further back
    return None


def _age(saved_at: str) -> str:
    """How long ago ``saved_at`` was, in words (``unknown`` for a time that does not parse)."""
    from datetime import datetime, timezone

    try:
        seconds = int((datetime.now(timezone.utc) - instant(saved_at)).total_seconds())
    except ValueError:
        return "an unknown time"
    if seconds < 60:
        return f"{max(seconds, 0)} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86_400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86_400} days"


def _fitted(framed: str, plan: Mapping[str, Any] | None, path: str, seal: str,
            budget: int) -> tuple[str, dict[str, Any]]:
    """The checkpoint and the plan within ``budget`` bytes: the plan cut first, then the checkpoint."""
    from rekall.worker.continuation import plan_text

    shown_plan = "\n\n" + plan_text(plan) if plan else ""
    whole = framed + shown_plan
    data = whole.encode("utf-8")
    if len(data) <= budget:
        return whole, {"cut": False}
    plan_note = "\n[rekall: the plan is cut here, to fit what Codex lets a hook add.]"
    room = budget - len(framed.encode("utf-8")) - len(plan_note.encode("utf-8"))
    if plan and room > 0:
        return framed + _head(shown_plan, room) + plan_note, {"cut": True, "framedBytes": len(data),
                                                                   "checkpointPath": path}
    tail = (f"\n[rekall: the checkpoint is longer than Codex lets a hook add, so it is cut here"
            f"{' and the plan left out' if plan else ''}. Read the whole checkpoint at {path} (SHA-256 {seal}) "
            "before relying on it.]")
    return _head(framed, budget - len(tail.encode("utf-8"))) + tail, {"cut": True, "framedBytes": len(data),
                                                                       "checkpointPath": path}


def _head(text: str, room: int) -> str:
    """The start of ``text`` within ``room`` bytes, cut at a line's end."""
    head = text.encode("utf-8")[:max(room, 0)].decode("utf-8", errors="ignore")
    return head[: head.rfind("\n")] if "\n" in head else head
