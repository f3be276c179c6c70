"""Saving and clearing a thread's standing checkpoint (``save_checkpoint``, ``rekall checkpoint``).

A checkpoint costs no compaction: it is sealed now (:mod:`rekall.store.checkpoint`) and the plugin's
``SessionStart(compact)`` hook delivers it after each later compaction of the thread that no rekall
job delivers for. Only a trusted hook can do that, so the reply says whether one can
(:mod:`rekall.usecases.hook_doctor`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from rekall.kernel.caller import Caller
from rekall.kernel.ids import thread_id as valid_thread_id

SAVED_MESSAGE = ("Checkpoint saved; no compaction was requested and nothing else changed. After each later "
                 "compaction of this thread that no rekall job delivers for (Codex's own auto-compaction, /compact), "
                 "the plugin's SessionStart hook puts it into the next model request, once per compaction. Save a "
                 "new one at the next milestone: it replaces this one.")
UNCHANGED_MESSAGE = "This checkpoint is already the thread's current one: nothing changed."
CLEARED_MESSAGE = "Checkpoint cleared: no later compaction delivers it. Its history stays until `rekall prune`."
NOTHING_TO_CLEAR = "The thread has no current checkpoint: nothing changed."


async def save_checkpoint(thread_id: str, handoff: Any, *, env: Mapping[str, str] | None = None,
                          caller: Caller | None = None) -> dict[str, Any]:
    """Seal ``handoff`` as ``thread_id``'s checkpoint (``caller``: the agent's thread, which must be it;
    ``None``: a person's command)."""
    from rekall.store.jobstore import JobStore
    from rekall.store.checkpoint import checkpoint_handoff, save

    env = os.environ if env is None else env
    thread_id = valid_thread_id(thread_id)
    if caller is not None:
        caller.require(thread_id, "save_checkpoint")  # before anything is read or written
    handoff = checkpoint_handoff(handoff)
    store = await asyncio.to_thread(JobStore.open, env)
    saved = await asyncio.to_thread(save, store.root, thread_id, handoff, store.fs)
    reply = {"threadId": thread_id, "checkpointSha256": saved["sha256"], "savedAt": saved["savedAt"],
             "bytes": saved["bytes"], "path": saved["path"], "changed": saved["changed"],
             "message": SAVED_MESSAGE if saved["changed"] else UNCHANGED_MESSAGE}
    if saved.get("replaced"):
        reply["replacedSha256"] = saved["replaced"]
    return {**reply, **await delivery_readiness(env)}


def clear_checkpoint(thread_id: str, *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """End ``thread_id``'s checkpoint (a person's command: ``rekall checkpoint THREAD --clear``)."""
    from rekall.store.jobstore import JobStore
    from rekall.store.checkpoint import clear

    thread_id = valid_thread_id(thread_id)
    store = JobStore.open_reader(os.environ if env is None else env)
    if not store.root.is_dir():
        return {"threadId": thread_id, "cleared": False, "message": NOTHING_TO_CLEAR}
    done = clear(store.root, thread_id, store.fs)
    return {"threadId": thread_id, **done, "message": CLEARED_MESSAGE if done["cleared"] else NOTHING_TO_CLEAR}


async def delivery_readiness(env: Mapping[str, str]) -> dict[str, Any]:
    """``hookCanDeliver`` and, when it cannot (or cannot be told), ``hookWarning`` saying why: the
    hook's rows as ``rekall doctor`` shows them, and a managed-hooks-only requirement."""
    from rekall.usecases.hook_doctor import hook_rows, managed_hooks_only

    rows = await hook_rows(env)
    problems = [f"{row.detail}; next: {row.hint}" if row.hint else row.detail for row in rows if row.level != "GREEN"]
    managed = managed_hooks_only()
    if managed is not None:
        problems.append(managed)
    if not problems:
        return {"hookCanDeliver": True}
    return {"hookCanDeliver": False,
            "hookWarning": "No trusted rekall hook can deliver this checkpoint after Codex's own compactions, so "
                           "it is saved but nothing will deliver it: " + " | ".join(problems)}
