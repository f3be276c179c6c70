"""Who delivers a job's handoff after its compaction: one exclusive claim per job.

Three routes can carry the verified handoff into the thread after the compaction a job asked
for: the continuation turn and the injection (``thread/inject_items``), both sent by the job's
worker, and the plugin's ``SessionStart(compact)`` hook, a process Codex starts at the next turn
(:mod:`rekall.surfaces.session_hook`), possibly after the job has ended and its worker is gone. The journal
has one writer, the holder of the job's lock, so the hook never writes it. Instead every route
must win this claim before it delivers: ``<thread>.<job>.delivery`` (:meth:`JobPaths.delivery`),
created with ``O_CREAT | O_EXCL`` (0600) in the jobs directory. Creation is atomic: exactly one
creator wins, and every other route finds the file and delivers nothing. A claim is never
removed while its job exists, so no route ever delivers a second copy.

An explicit cancel takes the claim too (route ``cancel``), for none of the routes: a hook that
runs after it finds the claim taken and prints nothing.

The job's readers fold a hook's claim into the job's record (:func:`folded`): ``status``,
``explain``, ``history`` and the MCP tools then say ``handoffDelivery: hook``. The worker's own
claims agree with what it journals and add nothing. After winning, the hook bumps the journal's
modification time (no byte is written) so that the views sealed over the journal's stamp
(:mod:`rekall.store.views`) no longer match and are derived again, with the claim folded in.

This module loads nothing heavy: the hook imports it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

TYPE_CHECKING = False  # not typing's: the hook's start-up pays for every import
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

CONTINUATION, INJECTION, HOOK = "continuation", "injection", "hook"
#: Not a route: an explicit cancel (``rekall cancel``, ``cancel_compaction``) takes the claim so that no route
#: delivers the handoff after it.
CANCEL = "cancel"
ROUTES = (CONTINUATION, INJECTION, HOOK, CANCEL)
#: What a job's record says of a delivery claimed by each route (``handoffDelivery``).
DELIVERED_AS = {CONTINUATION: "continuation", INJECTION: "injected", HOOK: "hook", CANCEL: "not_delivered"}
#: A claim file is read up to this size; it holds a few hundred bytes.
CLAIM_LIMIT = 64 * 1024
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def claim_path(journal: Path) -> Path:
    """The claim file next to a journal (``<thread>.<job>.journal.jsonl`` → ``<thread>.<job>.delivery``)."""
    from rekall.store.paths import DELIVERY_SUFFIX, JOURNAL_SUFFIX

    return journal.with_name(journal.name.removesuffix(JOURNAL_SUFFIX) + DELIVERY_SUFFIX)


def now_iso() -> str:
    """UTC wall time in the journal's format (``2026-11-30T03:19:00.123Z``)."""
    seconds = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


def claim(path: Path, route: str, **detail: Any) -> bool:
    """Try to win the job's delivery for ``route``: ``True`` for exactly one caller, ever.

    The file is created exclusively, then its record (route, time, process, ``detail``) written
    and fsynced. A caller that dies between the two leaves an empty claim: still held (nobody
    else delivers), read as route ``unknown``."""
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, json.dumps({"route": route, "at": now_iso(), "pid": os.getpid(), **detail},
                                ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def read_claim(path: Path) -> dict[str, Any] | None:
    """The claim's record, ``None`` when nobody claimed, route ``unknown`` when it cannot be read."""
    from rekall.store.fsread import read_private

    try:
        found = json.loads(read_private(path, limit=CLAIM_LIMIT))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"route": "unknown"}
    if not isinstance(found, dict) or found.get("route") not in ROUTES:
        return {"route": "unknown"}
    return found


def folded(journal: Path) -> dict[str, Any]:
    """The fields a reader adds to the job journaled at ``journal``: a hook's claim, said as the
    job's delivery, and an explicit cancel's, said as not delivered; nothing for a claim of the
    worker's own (its journal says it) or none."""
    found = read_claim(claim_path(journal))
    if found is not None and found.get("route") == CANCEL:
        from rekall.states.evidence import WITHHELD

        return {"handoffDelivery": "not_delivered", "handoffDeliveryNote": WITHHELD}
    if found is None or found.get("route") != HOOK:
        return {}
    cut = found.get("cut") is True
    note = "handed to Codex by the plugin's SessionStart(compact) hook for the next model request"
    if cut:
        note += (f"; cut to {found.get('contextBytes')} of {found.get('framedBytes')} bytes to fit Codex's hook "
                 f"context limit, the whole handoff is at {found.get('handoffPath')}")
    return {"handoffDelivery": HOOK, "handoffDeliveryNote": note, "handoffHookAt": found.get("at"),
            "handoffCut": cut}


def fold_into(fields: Mapping[str, Any], journal: Path) -> Mapping[str, Any]:
    """``fields`` with :func:`folded` applied (the same mapping when there is nothing to fold)."""
    extra = folded(journal)
    return {**fields, **extra} if extra else fields
