"""A thread's standing checkpoint: the agent's own handoff, delivered after every compaction of the
thread that no rekall job delivers for (:mod:`rekall.surfaces.checkpoint_hook`).

A checkpoint is a handoff (the same five keys, limits and credential rules,
:func:`rekall.store.handoff.validate_handoff`) whose ``resume`` is absent or false: it never starts
a turn. Its files, in the jobs directory (names in :mod:`rekall.store.paths`):

* ``<thread>.checkpoint.<sha256>.json``: each record ``{version, kind: "checkpoint", threadId,
  handoff}`` saved, pretty JSON, named by the SHA-256 of its bytes (its seal) and bound to its
  thread. Immutable: saving the same content again names the same file.
* ``<thread>.checkpoints.jsonl``: the history, one JSON line appended per save
  (``{event: "saved", at, sha256, bytes}``) or ``--clear`` (``{event: "cleared", at}``). Its last
  line says the current checkpoint; the earlier records stay, so a replaced checkpoint is still in
  the history. A torn last line (a crash while appending) is ignored and the next line starts on a
  line of its own.
* ``<thread>.compaction-<digest>.delivery``: the claim of each compaction it was delivered after
  (:mod:`rekall.store.delivery`): the claim belongs to the compaction, not to the checkpoint.

Reading loads nothing heavy (the hook reads here); saving loads the credential filter.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TYPE_CHECKING = False  # not typing's: the hook's start-up pays for every import
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from rekall.store.fsio import FileOps

RECORD_VERSION = 1
KIND = "checkpoint"
#: The history is read up to this size (a line is under 200 bytes).
LOG_LIMIT = 4 * 1024 * 1024
#: A record is read up to this size (a handoff is at most 32,000 bytes of compact JSON).
RECORD_LIMIT = 1_000_000
SAVED, CLEARED = "saved", "cleared"

#: What every view of a checkpoint says of when it is delivered.
DELIVERY_NOTE = ("delivered by the plugin's trusted SessionStart(compact) hook after each compaction that no rekall "
                 "job delivers for, once per compaction, and only where the hook can read the thread's transcript "
                 "(without it one compaction cannot be told from the next, and nothing is delivered)")
RESUME_REFUSED = ("handoff.resume is true, but a checkpoint never starts a turn: it is delivered after the next "
                  "compaction as a note, and nothing continues by itself")


def checkpoint_handoff(value: Any) -> dict[str, Any]:
    """A normalised copy of a valid checkpoint handoff (``resume`` absent or false, stored as false), or
    ``InvalidInput`` naming the field at fault."""
    from collections.abc import Mapping

    from rekall.kernel.errors import InvalidInput
    from rekall.store.handoff import validate_handoff

    if isinstance(value, Mapping) and "resume" in value and value["resume"] is not False:
        if value["resume"] is True:
            raise InvalidInput(RESUME_REFUSED, field="handoff.resume", code="invalid_handoff",
                               hint="set resume to false or leave it out; to compact now and continue once, "
                                    "use schedule_compaction")
        raise InvalidInput("handoff.resume must be false or absent in a checkpoint", field="handoff.resume",
                           code="invalid_handoff", hint="set resume to false or leave it out")
    filled = {**value, "resume": False} if isinstance(value, Mapping) else value
    try:
        return validate_handoff(filled)
    except InvalidInput as exc:  # the handoff's own words, with the checkpoint's next step
        exc.hint = (exc.hint or "").replace("schedule again", "save the checkpoint again")
        raise


def record_bytes(thread: str, handoff: Mapping[str, Any]) -> bytes:
    record = {"version": RECORD_VERSION, "kind": KIND, "threadId": thread, "handoff": dict(handoff)}
    return json.dumps(record, indent=2, ensure_ascii=False).encode("utf-8")


def history(root: Path, thread: str) -> list[dict[str, Any]]:
    """The thread's checkpoint history, oldest first: each complete line that reads as an event."""
    from rekall.store.delivery import is_digest
    from rekall.store.fsread import read_private
    from rekall.store.paths import JobPaths

    try:
        data = read_private(JobPaths(root).checkpoint_log(thread), limit=LOG_LIMIT)
    except FileNotFoundError:
        return []
    events = []
    for line in data.split(b"\n")[:-1]:  # what follows the last newline is a torn write, or nothing
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("at"), str) and (
                event.get("event") == CLEARED or (event.get("event") == SAVED and is_digest(event.get("sha256")))):
            events.append(event)
    return events


def current(root: Path, thread: str) -> dict[str, Any] | None:
    """The thread's checkpoint as its last history event says it (``None``: none saved, or cleared)."""
    events = history(root, thread)
    return events[-1] if events and events[-1]["event"] == SAVED else None


def sealed_record(root: Path, thread: str, sha256: str) -> tuple[dict[str, Any], Path] | None:
    """The record sealed as ``sha256`` and where it is, when its bytes still hash to it and it binds
    ``thread``; else ``None``. Its content is not validated again: equal hashes mean the very bytes
    :func:`save` validated (the check the hook can afford without the credential filter)."""
    import hashlib
    import hmac

    from rekall.store.fsread import read_private
    from rekall.store.paths import JobPaths

    path = JobPaths(root).checkpoint(thread, sha256)
    try:
        data = read_private(path, limit=RECORD_LIMIT)
        record = json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), sha256):
        return None
    bound = isinstance(record, dict) and record.get("version") == RECORD_VERSION and record.get("kind") == KIND \
        and record.get("threadId") == thread and isinstance(record.get("handoff"), dict)
    return (record, path) if bound else None


def save(root: Path, thread: str, handoff: Mapping[str, Any], fs: FileOps) -> dict[str, Any]:
    """Seal ``handoff`` (validated by :func:`checkpoint_handoff`) as the thread's checkpoint.

    The same content as the current checkpoint changes nothing (``changed: false``, its own time).
    Otherwise the record is written (complete or not at all), then the history line appended and
    synced: a crash between the two leaves the earlier checkpoint current."""
    from rekall.store.delivery import now_iso
    from rekall.store.handoff import sha256_hex
    from rekall.store.paths import JobPaths

    data = record_bytes(thread, handoff)
    digest = sha256_hex(data)
    path = JobPaths(root).checkpoint(thread, digest)
    now = current(root, thread)
    if now is not None and now["sha256"] == digest and sealed_record(root, thread, digest) is not None:
        return {"changed": False, "sha256": digest, "savedAt": now["at"], "bytes": len(data), "path": str(path)}
    if sealed_record(root, thread, digest) is None:  # absent, or not the bytes it is named for: written whole
        fs.atomic_replace(path, data)
    at = now_iso()
    _append(root, thread, {"event": SAVED, "at": at, "sha256": digest, "bytes": len(data)}, fs)
    return {"changed": True, "sha256": digest, "savedAt": at, "bytes": len(data), "path": str(path),
            "replaced": None if now is None else now["sha256"]}


def clear(root: Path, thread: str, fs: FileOps) -> dict[str, Any]:
    """End the thread's checkpoint: no compaction delivers it any more (its history stays)."""
    from rekall.store.delivery import now_iso

    now = current(root, thread)
    if now is None:
        return {"cleared": False}
    at = now_iso()
    _append(root, thread, {"event": CLEARED, "at": at}, fs)
    return {"cleared": True, "clearedAt": at, "sha256": now["sha256"]}


def _append(root: Path, thread: str, event: dict[str, Any], fs: FileOps) -> None:
    from rekall.store.fsread import O_BINARY, O_CLOEXEC, O_NOFOLLOW
    from rekall.store.paths import JobPaths

    line = json.dumps(event, separators=(",", ":")).encode("utf-8") + b"\n"
    fd = os.open(JobPaths(root).checkpoint_log(thread),
                 os.O_RDWR | os.O_CREAT | os.O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_BINARY, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # after a torn line: this one starts on its own
        fs.write_all(fd, line)
        fs.fsync(fd)
    finally:
        os.close(fd)


def deliveries(root: Path, thread: str) -> list[dict[str, Any]]:
    """Each compaction the thread's checkpoint was claimed for, with its claim's record (route, time,
    the checkpoint's seal, the bytes given), oldest first."""
    from rekall.store.delivery import DeliveryKey, holder
    from rekall.store.paths import DELIVERY_SUFFIX, JobPaths

    found = []
    for path in JobPaths(root).checkpoint_files(thread):
        name = path.name
        if not name.endswith(DELIVERY_SUFFIX) or ".compaction-" not in name:
            continue
        digest = name.removesuffix(DELIVERY_SUFFIX).rpartition(".compaction-")[2]
        claim = holder(root, DeliveryKey(thread, compaction=digest)) or {"route": "unknown"}
        found.append({"compaction": digest, **{k: v for k, v in claim.items() if k not in ("threadId", "pid")}})
    return sorted(found, key=lambda claim: str(claim.get("at")))


def summary(root: Path, thread: str) -> dict[str, Any] | None:
    """What status, explain, history and ``compaction_status`` say of the thread's checkpoint:
    ``None`` when it never had one."""
    events = history(root, thread)
    if not events:
        return None
    last = events[-1]
    shown: dict[str, Any] = {"state": last["event"], "savedCount": sum(e["event"] == SAVED for e in events)}
    saved = next((e for e in reversed(events) if e["event"] == SAVED), None)
    if saved is not None:
        shown.update(savedAt=saved["at"], bytes=saved.get("bytes"), sha256=saved["sha256"])
    if last["event"] == CLEARED:
        shown["clearedAt"] = last["at"]
    shown["deliveries"] = deliveries(root, thread)
    shown["note"] = DELIVERY_NOTE
    return shown


def remove(root: Path, thread: str, *, dry_run: bool) -> dict[str, Any]:
    """Remove (or list) every checkpoint file of the thread: the history goes last, so an interrupted
    removal leaves a history that still names what it saved, never records without one."""
    from rekall.store.fsio import remove_files
    from rekall.store.paths import JobPaths

    paths = JobPaths(root)
    files = sorted(paths.checkpoint_files(thread), key=lambda p: p == paths.checkpoint_log(thread))
    names, size = remove_files(files, dry_run=dry_run)
    return {"threadId": thread, "files": names, "bytes": size}
