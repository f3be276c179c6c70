"""``rekall hook session-start``: the plugin's ``SessionStart(compact)`` hook, which carries a job's
verified handoff into the first model request after the compaction the job asked for, and after
any other compaction the thread's standing checkpoint (:mod:`rekall.surfaces.checkpoint_hook`,
which names the key of its per-compaction claim).

Codex runs it (``hooks/hooks.json`` in the plugin) at the start of the first turn after any
compaction, before that turn's model request, with one JSON object on standard input
(``session_id`` is the thread, ``transcript_path``, ``cwd``, ``hook_event_name``, ``model``,
``permission_mode``, ``source: "compact"``). What it prints as
``hookSpecificOutput.additionalContext`` is in that request. It is the only way into the thread
on the VS Code extension, and it works on every Codex host, so it is the route of last resort:

**The rule.** The hook delivers the handoff of the thread's latest job when

* that job saved a handoff, asked for a compaction, and that compaction completed: the journal
  says so (``compactionCompletedAt``), or, while the completion is not journaled yet (the job is
  still ``accepted``), the transcript shows it;
* the transcript can be read and shows exactly one compaction since the job's request (its own:
  a second one, Codex's or the user's ``/compact``, means this is not the first
  ``SessionStart(compact)`` after the job's compaction; without a readable transcript one
  compaction cannot be told from the next, and nothing is delivered);
* the job was not cancelled explicitly (``rekall cancel``, ``cancel_compaction``): such a cancel
  takes the delivery claim itself, and older journals say ``reason: explicit_cancellation``;
* nothing else has delivered it or will: the job's delivery claim (:mod:`rekall.store.delivery`)
  is still free and the hook wins it. The worker claims it before it sends the continuation or
  the injection, so a continuation already on its way keeps the hook silent, and a hook that
  won keeps the worker from sending either.
* the handoff still verifies (re-read, SHA-256 against the seal, bound to the thread and job).

**The checkpoint.** When the compaction is not the one the thread's latest job asked for (no job
asked, or the transcript shows another compaction since the job's), the thread's checkpoint is
delivered instead, once per compaction. After the job's own compaction only the job's handoff goes
(by whichever route wins its claim, or none), never the checkpoint as well.

**Races.** A job still in ``waiting_for_resume_idle`` has not sent its continuation (the claim
is free), so the turn starting now is someone else's, the user's: the continuation would be
overtaken by it, and the hook delivers (the worker then finds the claim taken and sends
nothing; one that moved to ``resuming`` meanwhile ends ``completed``, ``resumeSkipped:
handoff_delivered_by_hook``). A job still in ``accepted`` (the completion not journaled yet, the user's queued
message starting the next turn at once) is delivered for only when the transcript shows the
compaction. A job in ``resuming`` or ``resumed`` gets nothing: the continuation carries it.

**Safe.** Any input that is not a ``SessionStart`` with source ``compact`` and a thread id, any
failure, any doubt: the empty output (nothing on standard output, exit 0), which Codex accepts as
"no context". Standard output holds nothing but the framed handoff. The jobs directory is found
from the environment, from the Codex home the transcript lies in, and from the directories the
store recorded (:mod:`rekall.store.jobs_dirs`), because Codex may run the hook with a short
environment. A framed handoff over Codex's hook context limit (about 2,500 tokens, beyond which
Codex keeps only a preview) is cut here instead, with the path and seal of the whole, and the
claim, and so the job, says it was cut.

It imports only the light modules (no CLI, no MCP, no lifecycle table): its cost is measured in
``bench/session_hook.py``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import zlib
from pathlib import Path

TYPE_CHECKING = False  # not typing's: the hook's start-up pays for every import
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, BinaryIO, TextIO

from rekall.kernel.jobstate import job_state_named
from rekall.surfaces.rollout import RECORD, instant

#: Codex's hook output budget (``HOOK_OUTPUT_TOKEN_LIMIT``, counted as about 4 bytes a token);
#: past it Codex keeps a head and tail preview. The hook keeps under it, with a margin.
CONTEXT_TOKEN_LIMIT = 2_500
CONTEXT_BYTE_BUDGET = CONTEXT_TOKEN_LIMIT * 4 - 600
#: Standard input is read up to this size; Codex sends a few hundred bytes.
INPUT_LIMIT = 1024 * 1024
#: A transcript larger than this is not read (then nothing is delivered: see the rule above).
TRANSCRIPT_LIMIT = 256 * 1024 * 1024
#: A rollout line that records a compaction (:data:`rekall.surfaces.rollout.RECORD`).
_COMPACTED = RECORD % b"compacted"
#: A journal line as :mod:`rekall.store.wire` writes it: ``{"crc32":"<8 hex>","record":{...}}``.
_CRC_HEAD, _RECORD_HEAD = b'{"crc32":"', b'","record":'
#: States in which the job's compaction was asked for and its completion not seen yet.
_AWAITING_COMPACTION = frozenset({"requesting", "accepted"})
#: States in which the continuation carries the handoff.
_CONTINUING = frozenset({"resuming", "resumed"})


def main(argv: Sequence[str] = (), stdin: BinaryIO | None = None, stdout: TextIO | None = None,
         env: Mapping[str, str] | None = None) -> int:
    """Run the hook: the framed handoff on ``stdout`` when the rule holds, else nothing; always 0."""
    out = sys.stdout if stdout is None else stdout
    try:
        raw = (sys.stdin.buffer if stdin is None else stdin).read(INPUT_LIMIT + 1)
        text = answer(raw, os.environ if env is None else env) if len(raw) <= INPUT_LIMIT else None
    except Exception:  # noqa: BLE001 - whatever went wrong, the user's turn goes on without the hook
        text = None
    if text:
        out.write(text + "\n")
        out.flush()
    return 0


def answer(raw: bytes, env: Mapping[str, str]) -> str | None:
    """The hook's whole standard output for Codex's input ``raw``, or ``None`` for the empty output."""
    event = _event(raw)
    if event is None:
        return None
    thread, transcript_path = event
    dirs = _jobs_dirs(env, transcript_path)
    job = _latest_job(thread, dirs)
    requested = job is not None and isinstance(job[1].get("requestedAt"), str)
    from rekall.surfaces.checkpoint_hook import checkpoint_answer, has_checkpoint

    if not requested and not has_checkpoint(thread, dirs):
        return None  # nothing to deliver: the transcript is not read
    transcript = _read_transcript(transcript_path)
    if job is not None and requested:
        since = _compactions_since(transcript, job[1]["requestedAt"])  # the transcript is scanned once
        if _requested_this_compaction(job[2], since):
            return _job_answer(thread, *job, since)  # only the job's handoff, by its route, never the checkpoint

    found = checkpoint_answer(thread, dirs, transcript, env, CONTEXT_BYTE_BUDGET)
    if found is None:
        return None
    context, detail, root, key = found
    return _claimed(root, key, context, detail)


def _job_answer(thread: str, journal: Path, fields: dict[str, Any], state: str, since: int | None) -> str | None:
    if not _eligible(fields, state, since):
        return None
    framed = _framed(journal, thread, fields, state)
    if framed is None:
        return None
    context, detail = _fitted(*framed, fields)
    from rekall.store.delivery import job_key

    # The views' seal stamps the claim file (rekall.store.views.job_stamp): no need to touch the journal.
    return _claimed(journal.parent, job_key(journal), context, detail, handoffSha256=fields.get("handoffSha256"))


def _claimed(jobs_dir: Path, key: Any, context: str, detail: dict[str, Any], **more: Any) -> str | None:
    """The hook's output for ``context`` once it won ``key``'s claim, else ``None``."""
    from rekall.store.delivery import HOOK, take

    try:
        taken = take(jobs_dir, key, HOOK, **more, contextBytes=len(context.encode()), **detail)
    except OSError:
        return None  # the claim could not be written (and was removed): nothing is delivered
    if not taken.won:
        return None  # the continuation, the injection, an earlier hook or an explicit cancel has it
    return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}},
                      ensure_ascii=False)


def _event(raw: bytes) -> tuple[str, Path | None] | None:
    """The thread and transcript of a ``SessionStart(compact)`` input, else ``None``."""
    from rekall.kernel.ids import is_uuid

    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("hook_event_name") != "SessionStart" or data.get("source") != "compact":
        return None
    thread = data.get("session_id")
    if not isinstance(thread, str) or not is_uuid(thread):
        return None
    transcript = data.get("transcript_path")
    path = Path(transcript) if isinstance(transcript, str) and "\0" not in transcript and os.path.isabs(transcript) \
        else None
    return thread.lower(), path


def _jobs_dirs(env: Mapping[str, str], transcript: Path | None) -> list[Path]:
    """Where the thread's jobs may be: the environment's jobs directory, the default one of the Codex
    home the transcript lies in (``<home>/sessions/…``), and those the store recorded."""
    from rekall.store.paths import inspect_jobs_dir, resolve_jobs_dir
    from rekall.store.jobs_dirs import known_jobs_dirs

    candidates: list[Path] = []
    try:
        candidates.append(resolve_jobs_dir(env))
    except Exception:  # noqa: BLE001 - a bad variable: the other places are still looked at
        pass
    if transcript is not None:
        for parent in transcript.parents:
            if parent.name in ("sessions", "archived_sessions"):
                candidates.append(parent.parent / "tools" / "rekall" / "jobs")
                break
    candidates.extend(known_jobs_dirs())
    found: list[Path] = []
    for path in candidates:
        if path in found:
            continue
        try:
            inspect_jobs_dir(path)
        except Exception:  # noqa: BLE001 - missing, a symlink, someone else's: not looked in
            continue
        found.append(path)
    return found


def _latest_job(thread: str, dirs: list[Path]) -> tuple[Path, dict[str, Any], str] | None:
    """The thread's newest job across ``dirs``: its journal, fields so far and state."""
    from rekall.store.paths import JobPaths

    best: tuple[str, int, Path, dict[str, Any], str] | None = None
    for root in dirs:
        paths = JobPaths(root)
        for _, job, _entry in paths.journal_entries(thread=thread):
            read = _read_journal(paths.journal(thread, job))
            if read is None:
                continue
            created, fields, state = read
            key = (created, int(fields.get("jobNumber") or 0))
            if best is None or key > best[:2]:
                best = (*key, paths.journal(thread, job), fields, state)
    return None if best is None else best[2:]


def _read_journal(path: Path) -> tuple[str, dict[str, Any], str] | None:
    """A journal's creation time, merged transition fields and the job's state (derived from both
    machines' last records as the store derives it), read without the store's record types (each line's checksum checked as :mod:`rekall.store.wire` writes it; a torn last
    line ignored). ``None`` for anything else: the hook then delivers nothing for that job."""
    from rekall.store.fsread import JOURNAL_LIMIT, read_private

    try:
        data = read_private(path, limit=JOURNAL_LIMIT)
    except OSError:
        return None
    lines = data.split(b"\n")
    complete = lines[:-1]  # what follows the last newline is a torn write, or nothing
    fields: dict[str, Any] = {}
    created, compaction, delivery, route = None, None, "pending", None
    for line in complete:
        body = line[len(_CRC_HEAD) + 8 + len(_RECORD_HEAD):-1]
        if not (line.startswith(_CRC_HEAD) and line[len(_CRC_HEAD) + 8:].startswith(_RECORD_HEAD)
                and line.endswith(b"}")):
            return None
        try:
            if int(line[len(_CRC_HEAD):len(_CRC_HEAD) + 8], 16) != zlib.crc32(body):
                return None
            record = json.loads(body)
        except ValueError:
            return None
        kind = record.get("type") if isinstance(record, dict) else None
        if kind not in ("transition", "delivery"):
            continue
        if created is None:
            created = record.get("at")
        fields.update(record.get("fields") or {})
        if kind == "transition":  # the compaction machine's (or, before the split, the job's) state
            compaction = record.get("to")
        else:
            delivery, route = record.get("to"), record.get("route")
    if not isinstance(created, str) or not isinstance(compaction, str) or not isinstance(delivery, str):
        return None
    return created, fields, job_state_named(compaction, delivery, route, fields.get("resumeSkipped"))


def _requested_this_compaction(state: str, since: int | None) -> bool:
    """The compaction this hook runs after may be the one the job (which asked for one) asked for: the
    transcript shows exactly one compaction since the request (``since``), or cannot be read, or shows
    none yet while the job still waits on its request (the transcript may lag). A job whose request
    may not have reached Codex counts too: in doubt, the checkpoint is not added to a job's compaction."""
    return since in (None, 1) or (since == 0 and state in _AWAITING_COMPACTION)


def _eligible(fields: Mapping[str, Any], state: str, since: int | None) -> bool:
    """The rule of the module doc, apart from the claim and the handoff's verification (``since``: the
    compactions the transcript shows since the job's request, ``None`` where it cannot be read)."""
    if not fields.get("handoffSha256") or state in _CONTINUING:
        return False
    if fields.get("handoffDelivery") in ("continuation", "injected"):
        return False  # an older job's record (before claims): delivered already
    if fields.get("reason") == "explicit_cancellation":
        return False  # no route delivers after an explicit cancel (a newer cancel also holds the claim)
    if since != 1:
        return False  # only a readable transcript tells this compaction from the next one
    if fields.get("compactionCompletedAt") is None:
        # Not journaled: the job is still accepted, or its worker died there (the reaper may have said
        # failed, worker_lost): the transcript shows the compaction all the same.
        return state == "accepted" or (state == "failed" and fields.get("errorCode") == "worker_lost"
                                       and fields.get("acceptedAt") is not None)
    return True


def _read_transcript(transcript: Path | None) -> bytes | None:
    """The transcript's bytes; ``None`` when there is none or it cannot be read."""
    if transcript is None:
        return None
    from rekall.store.fsread import read_private

    try:
        return read_private(transcript, limit=TRANSCRIPT_LIMIT)
    except OSError:
        return None


def _compactions_since(transcript: bytes | None, since: str) -> int | None:
    """How many compactions the transcript records at or after ``since``; ``None`` when it cannot
    be read."""
    if transcript is None:
        return None
    try:
        start = instant(since)
        found = re.finditer(_COMPACTED, transcript, re.MULTILINE)
        return sum(1 for match in found if instant(match[1].decode()) >= start)
    except ValueError:
        return None


def _framed(journal: Path, thread: str, fields: Mapping[str, Any], state: str) -> tuple[str, str] | None:
    """The job's handoff, verified again and framed as the injection frames it, and where it is saved."""
    from rekall.worker.continuation import injection_text
    from rekall.store.paths import JobPaths

    job = fields.get("jobId")
    if not isinstance(job, str):
        return None
    path = JobPaths(journal.parent).handoff(thread, job)
    record = _sealed_record(path, thread, job, fields.get("handoffSha256"))
    if record is None:
        return None
    resume, skipped = bool(fields.get("resume")), fields.get("resumeSkipped")
    if resume and not skipped and state in ("accepted", "waiting_for_resume_idle"):
        skipped = "new_user_input"  # the turn starting now is not the continuation
    elif resume and not skipped:  # the job ended before its continuation: its cancel reason, or how it ended
        skipped = fields.get("reason") if state == "cancelled" else state
    return injection_text(record, str(path), resume=resume, skipped=skipped,
                          skip_reason=fields.get("resumeSkipReason")), str(path)


def _sealed_record(path: Path, thread: str, job: str, sealed: object) -> dict[str, Any] | None:
    """The handoff record at ``path`` when its bytes hash to the SHA-256 journaled at schedule and it
    binds this thread and job, else ``None``. The file is read again; it is not validated again:
    equal hashes mean the very bytes schedule validated and sealed (the check the worker makes
    before the continuation, :func:`rekall.store.handoff.verify_sealed`, without loading the
    credential filter, which would cost the hook most of its budget)."""
    import hashlib
    import hmac

    from rekall.store.fsread import read_private

    if not isinstance(sealed, str) or not sealed:
        return None
    try:
        data = read_private(path, limit=1_000_000)
        record = json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), sealed.lower()):
        return None
    bound = isinstance(record, dict) and record.get("threadId") == thread and record.get("jobId") == job
    return record if bound and isinstance(record.get("handoff"), dict) else None


def _fitted(framed: str, handoff_path: str, fields: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``framed`` whole when it fits Codex's hook budget; else its start, cut on a line, with where the
    whole is and its seal (and what the claim records of the cut)."""
    data = framed.encode("utf-8")
    if len(data) <= CONTEXT_BYTE_BUDGET:
        return framed, {"cut": False}
    tail = (f"\n[rekall: the handoff is longer than Codex lets a hook add (about {CONTEXT_TOKEN_LIMIT:,} tokens), "
            f"so it is cut here. Read the whole handoff at {handoff_path} (SHA-256 {fields.get('handoffSha256')}) "
            "before relying on it.]")
    room = CONTEXT_BYTE_BUDGET - len(tail.encode("utf-8"))
    head = data[:room].decode("utf-8", errors="ignore")
    head = head[: head.rfind("\n")] if "\n" in head else head
    return head + tail, {"cut": True, "framedBytes": len(data), "handoffPath": handoff_path}
