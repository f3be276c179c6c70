"""Who delivers a handoff: one exclusive claim per delivery, taken through one verb, :func:`take`.

A delivery is named by a :class:`DeliveryKey`: a job's handoff after the compaction the job asked
for, or a thread's standing checkpoint after one compaction. Three routes can carry a job's
verified handoff: the continuation turn and the injection (``thread/inject_items``), both sent by
the job's worker, and the plugin's ``SessionStart(compact)`` hook, a process Codex starts at the
next turn (:mod:`rekall.surfaces.session_hook`), possibly after the job has ended and its worker is
gone. The journal has one writer, the holder of the job's lock, so the hook never writes it.
Instead every route must win the key's claim before it delivers: a claim file in the jobs
directory (:meth:`DeliveryKey.path`; the file names live in :mod:`rekall.store.paths`), created
with ``O_CREAT | O_EXCL`` (0600). Creation is atomic: exactly one creator wins, and every other
route finds the file and delivers nothing. A claim is never removed while its job exists, so no
route ever delivers a second copy. An explicit cancel takes the claim too (route ``cancel``), for
none of the routes: a hook that runs after it finds the claim taken and prints nothing.

A claim rekall did not write is not believed: a file that is not a regular, private file of this
account (a FIFO, a symlink, another account's), or whose record names another thread or key, is
read as route ``foreign``, never as a delivery, and it never blocks a reader. A claim whose write
fails (a full disk) is removed again: the claimer delivered nothing and says so.

The job's readers fold a hook's claim into the job's record (:func:`folded`): ``status``,
``explain``, ``history`` and the MCP tools then say ``handoffDelivery: hook``. The worker's own
claims agree with what it journals and add nothing. The views sealed over a job's stamp
(:mod:`rekall.store.views`) stamp its claim file too, so a claim taken (or planted) after they
were derived makes them stale, and they are derived again with the claim folded in.

This module loads nothing heavy: the hook imports it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rekall.kernel.jobstate import CONTINUATION, INJECTION  # the worker's routes, named once

TYPE_CHECKING = False  # not typing's: the hook's start-up pays for every import
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

HOOK = "hook"
#: Not a route: an explicit cancel (``rekall cancel``, ``cancel_compaction``) takes the claim so that no route
#: delivers the handoff after it.
CANCEL = "cancel"
ROUTES = (CONTINUATION, INJECTION, HOOK, CANCEL)
#: What a job's record says of a delivery claimed by each route (``handoffDelivery``).
DELIVERED_AS = {CONTINUATION: "continuation", INJECTION: "injected", HOOK: "hook", CANCEL: "not_delivered"}
#: The holder read from a claim file rekall did not write (a FIFO, a symlink, someone else's, another job's).
FOREIGN = "foreign"
#: A claim file is read up to this size; it holds a few hundred bytes.
CLAIM_LIMIT = 64 * 1024
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class DeliveryKey:
    """What one delivery is for: a job's handoff after the compaction it asked for (``job``), or a
    thread's standing checkpoint after one compaction (``compaction``: a hex digest that names that
    compaction, see :mod:`rekall.surfaces.checkpoint_hook`). Each key has one claim file, so each is
    delivered at most once."""

    __slots__ = ("thread", "job", "compaction")

    def __init__(self, thread: str, *, job: str | None = None, compaction: str | None = None) -> None:
        from rekall.kernel.ids import is_uuid

        if not is_uuid(thread) or (job is None) == (compaction is None) or (job is not None and not is_uuid(job)) \
                or (compaction is not None and not is_digest(compaction)):
            raise ValueError("a delivery key is a thread and either a job id or a compaction's hex digest")
        self.thread, self.job, self.compaction = thread.lower(), job and job.lower(), compaction

    def path(self, jobs_dir: Path) -> Path:
        from rekall.store.paths import JobPaths

        paths = JobPaths(jobs_dir)
        if self.job is not None:
            return paths.delivery(self.thread, self.job)
        assert self.compaction is not None
        return paths.compaction_delivery(self.thread, self.compaction)

    def names(self) -> dict[str, str]:
        """What the claim records of its key, and what a reader checks it against."""
        named = {"threadId": self.thread}
        if self.job is not None:
            named["jobId"] = self.job
        else:
            named["compaction"] = str(self.compaction)
        return named


def is_digest(value: object) -> bool:
    """A SHA-256 in lower-case hex: how a compaction and a checkpoint are named."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


class Taken:
    """The outcome of :func:`take`: ``won`` for exactly one caller per key, ever; otherwise the route that
    holds the claim (``unknown`` where it cannot be read, ``foreign`` where rekall did not write it, with
    ``why``), and the claim file's name."""

    __slots__ = ("won", "holder", "why", "claim")

    def __init__(self, won: bool, holder: str, claim: str, why: str | None = None) -> None:
        self.won, self.holder, self.claim, self.why = won, holder, claim, why


def now_iso() -> str:
    """UTC wall time in the journal's format (``2026-11-30T03:19:00.123Z``)."""
    seconds = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


def take(jobs_dir: Path, key: DeliveryKey, route: str, **detail: Any) -> Taken:
    """The one claim verb: win the delivery named by ``key`` for ``route``, or learn who holds it.

    The claim file is created exclusively (0600, never through a symlink), then its record (route,
    time, process, the key's names, ``detail``) written and fsynced. A caller that dies between the
    two leaves an empty claim: still held (nobody else delivers), read as route ``unknown``. A write
    that fails (a full disk) removes the file again and raises: the caller delivered nothing and
    says so, and the claim stays free."""
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)}")
    path = key.path(jobs_dir)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    except FileExistsError:
        found = holder(jobs_dir, key)
        return Taken(False, (found or {}).get("route", "unknown"), path.name, (found or {}).get("why"))
    try:
        os.write(fd, json.dumps({"route": route, "at": now_iso(), "pid": os.getpid(), **key.names(), **detail},
                                ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        os.fsync(fd)
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass  # left empty: read as held by an unknown route, never as a delivery
        raise
    finally:
        os.close(fd)
    return Taken(True, route, path.name)


def holder(jobs_dir: Path, key: DeliveryKey) -> dict[str, Any] | None:
    """The record of the claim on ``key``: ``None`` when nobody claimed it; route ``unknown`` when it
    cannot be read; route ``foreign`` (with ``why``) when rekall did not write it: not a regular file
    of this account with private modes, or a record naming another thread or key. Never blocks: a
    FIFO planted there is opened without waiting and refused."""
    path = key.path(jobs_dir)
    found = _read_own(path)
    if found is None or found.get("route") == FOREIGN:
        return found
    named = key.names()
    for name, value in named.items():
        if name in found and found[name] != value:
            return {"route": FOREIGN, "why": f"the claim {path} names {name} {str(found[name])[:80]!r}, not this "
                                             f"delivery's"}
    return found


def _read_own(path: Path) -> dict[str, Any] | None:
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_NOFOLLOW | _O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symlink; EACCES: not ours
        return {"route": FOREIGN, "why": f"the claim {path} cannot be opened as rekall writes it "
                                         f"({exc.strerror or exc})"}
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return {"route": FOREIGN, "why": f"the claim {path} is not a regular file"}
        if hasattr(os, "geteuid") and (info.st_uid != os.geteuid() or info.st_mode & 0o077):
            return {"route": FOREIGN, "why": f"the claim {path} is not a private file of this account"}
        data = os.read(fd, CLAIM_LIMIT + 1)
    except OSError:
        return {"route": "unknown"}
    finally:
        os.close(fd)
    try:
        found = json.loads(data)
    except ValueError:
        return {"route": "unknown"}
    if not isinstance(found, dict) or found.get("route") not in ROUTES:
        return {"route": "unknown"}
    return found


def job_key(journal: Path) -> DeliveryKey:
    """The delivery key of the job journaled at ``journal`` (``<thread>.<job>.journal.jsonl``)."""
    from rekall.store.paths import JOURNAL_SUFFIX

    thread, _, job = journal.name.removesuffix(JOURNAL_SUFFIX).partition(".")
    return DeliveryKey(thread, job=job)


def folded(journal: Path, seal: Any = None) -> dict[str, Any]:
    """The fields a reader adds to the job journaled at ``journal``: a hook's claim, said as the
    job's delivery, and an explicit cancel's, said as not delivered; nothing for a claim of the
    worker's own (its journal says it) or none. A claim that names another handoff than ``seal``
    (the job's ``handoffSha256``) is foreign."""
    try:
        key = job_key(journal)
    except ValueError:  # not a journal name rekall writes: it has no claim
        return {}
    found = holder(journal.parent, key)
    claimed = None if found is None else found.get("handoffSha256")
    if isinstance(seal, str) and claimed is not None and claimed != seal:
        found = {"route": FOREIGN, "why": f"the claim {key.path(journal.parent)} names another handoff than the "
                                          "job's sealed one"}
    if found is not None and found.get("route") == FOREIGN:
        return {"handoffDelivery": "not_delivered", "handoffDeliveryNote": f"a foreign delivery claim was found: "
                f"{found.get('why')}; rekall delivers nothing while it is there (remove it to let a route deliver)"}
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
    extra = folded(journal, fields.get("handoffSha256"))
    return {**fields, **extra} if extra else fields
