"""The handoff: what the agent wants kept across the compaction, checked and sealed.

Validation follows the Node version exactly (five keys, all required; at most 32,000 UTF-8
bytes of compact JSON; lists of at most 40 non-empty strings; ``resume`` a real boolean;
``nextStep`` non-blank when resuming) and adds two rules: text holding terminal controls,
bidirectional or zero-width characters (:mod:`rekall.kernel.characters`) is refused naming the field
and the character's class, and values that look like credentials (:mod:`rekall.kernel.credentials`) are
refused, naming the field (and entry), the kind of secret and where it starts, but never echoing it.

The saved record ``{version: 1, threadId, jobId, handoff}`` is pretty JSON (2-space indent,
no trailing newline, as the Node version writes, and readable by the agent that is pointed
at it). Its SHA-256 is kept in the status; verification re-reads the exact bytes, and hashes and
validates them unless they are the very bytes an earlier verification hashed and validated
(:func:`verify_sealed`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rekall.kernel import safejson
from rekall.kernel.errors import InvalidInput
from rekall.store.errors import HandoffChanged
from rekall.store.fsread import STREAM_WAIT_S, ReadTimedOut, TooLarge, read_fd_limited, read_limited, read_private

HANDOFF_KEYS = ("summary", "preserve", "discard", "nextStep", "resume")
MAX_HANDOFF_BYTES = 32_000
MAX_LIST_ITEMS = 40
RECORD_VERSION = 1
#: A handoff file larger than this is not read at all (validation would refuse it anyway).
_MAX_FILE_BYTES = 1_000_000

_FIX = "fix the handoff and schedule again"


def _invalid(message: str, field: str, hint: str = _FIX) -> InvalidInput:
    return InvalidInput(message, field=field, hint=hint, code="invalid_handoff")


def _nonblank(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _strings(value: Mapping[str, Any]) -> list[tuple[str, str]]:
    out = [(f"handoff.{key}", value[key]) for key in ("summary", "nextStep")]
    for key in ("preserve", "discard"):
        out.extend((f"handoff.{key}[{i}]", item) for i, item in enumerate(value[key]))
    return out


def validate_handoff(value: Any) -> dict[str, Any]:
    """A normalised copy of a valid handoff, or ``InvalidInput`` naming the field at fault."""
    # Here, not at the top: reading jobs (status, history) never loads the secret detector.
    from rekall.kernel.characters import unsafe_character
    from rekall.kernel.credentials import find_credential, shown_key

    if not isinstance(value, Mapping):
        raise _invalid("handoff must be an object with summary, preserve, discard, nextStep and resume",
                       "handoff")
    unknown = sorted(shown_key(k) for k in value if k not in HANDOFF_KEYS)
    if unknown:
        raise _invalid(f"unknown handoff field {unknown[0]}; allowed: {', '.join(HANDOFF_KEYS)}",
                       f"handoff.{unknown[0]}")
    missing = [k for k in HANDOFF_KEYS if k not in value]
    if missing:
        raise _invalid(f"handoff.{missing[0]} is required", f"handoff.{missing[0]}")
    if not _nonblank(value["summary"]):
        raise _invalid("handoff.summary is required: a non-empty string", "handoff.summary")
    for key in ("preserve", "discard"):
        items = value[key]
        if not (isinstance(items, list) and len(items) <= MAX_LIST_ITEMS and all(_nonblank(i) for i in items)):
            raise _invalid(f"handoff.{key} must be an array of at most {MAX_LIST_ITEMS} non-empty strings",
                           f"handoff.{key}")
    if not isinstance(value["resume"], bool):
        raise _invalid("handoff.resume must be explicitly true or false", "handoff.resume")
    next_step = value["nextStep"]
    if not isinstance(next_step, str) or (value["resume"] and not next_step.strip()):
        raise _invalid("handoff.nextStep must be a string, and non-blank when resume is true "
                       "(a nextStep is required for automatic continuation)", "handoff.nextStep")
    normalised = {"summary": value["summary"], "preserve": list(value["preserve"]),
                  "discard": list(value["discard"]), "nextStep": next_step, "resume": value["resume"]}
    for field, text in _strings(normalised):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise _invalid(f"{field} is not valid Unicode text (it holds a lone surrogate)", field) from None
        unsafe = unsafe_character(text)
        if unsafe is not None:
            raise _invalid(f"{field} holds {unsafe}; control, escape, bidirectional and zero-width characters "
                           "are not kept in a handoff", field,
                           hint="remove the character (write plain text) and schedule again")
    size = len(json.dumps(dict(value), ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_HANDOFF_BYTES:
        raise _invalid(f"handoff is {size} UTF-8 bytes of compact JSON; at most {MAX_HANDOFF_BYTES} are allowed",
                       "handoff", hint="shorten the summary or the lists and schedule again")
    # Each text alone, then each two neighbouring entries joined (a secret split across them).
    texts = [(field, field, (text,)) for field, text in _strings(normalised)]
    for key in ("preserve", "discard"):
        items = normalised[key]
        texts.extend((f"handoff.{key}[{i}]", f"handoff.{key}[{i}] and [{i + 1}] joined",
                      (items[i] + items[i + 1], f"{items[i]} {items[i + 1]}")) for i in range(len(items) - 1))
    for field, where, forms in texts:
        found = next((found for form in forms if (found := find_credential(form)) is not None), None)
        if found is not None:
            at = f"character {found.character}" + (" once normalised" if found.normalised else "")
            raise _invalid(f"{where} looks like it contains {found.kind} at {at}; secrets must not go into a handoff",
                           field, hint="remove the secret (refer to where it is stored instead) and schedule again")
    return normalised


# --- the sealed record ---------------------------------------------------------------------


def record_bytes(thread_id: str, job_id: str, handoff: Mapping[str, Any]) -> bytes:
    record = {"version": RECORD_VERSION, "threadId": thread_id, "jobId": job_id, "handoff": dict(handoff)}
    return json.dumps(record, indent=2, ensure_ascii=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Verified(NamedTuple):
    """A saved handoff record that passed verification, the SHA-256 of the exact bytes it was
    read and validated from, those bytes, and the file they were read from."""

    record: dict[str, Any]
    sha256: str
    data: bytes
    path: Path


def verify_sealed(path: Path, thread_id: str, job_id: str, expected_sha256: str | None,
                  validated: Verified | None = None) -> Verified:
    """The record at ``path`` if its bytes still hash to ``expected_sha256`` and it binds this
    job, with the hash of the bytes it checked.

    The file is read every time (it may have changed). When it holds, byte for byte, the bytes
    ``validated`` was read from at this path, and those hashed to ``expected_sha256``, its
    record is returned without hashing or validating them again (equal bytes have the equal
    hash: comparing them is the same check, and cheaper just before the continuation is sent);
    any other bytes get the full check."""
    if not expected_sha256:
        raise HandoffChanged(f"job {job_id} has no saved handoff to verify",
                             hint="a continuation needs a handoff; schedule again with one")
    try:
        data = read_private(path, limit=_MAX_FILE_BYTES)
    except OSError as exc:
        raise HandoffChanged(f"the saved handoff {path} cannot be read: {exc.strerror or exc}",
                             hint="the continuation is cancelled; schedule again") from exc
    expected = expected_sha256.lower()
    if (validated is not None and data == validated.data and path == validated.path
            and hmac.compare_digest(validated.sha256, expected)):
        return validated
    digest = sha256_hex(data)
    if not hmac.compare_digest(digest, expected):
        raise HandoffChanged(f"the saved handoff {path} changed after it was saved (SHA-256 differs)",
                             hint="the continuation is cancelled; schedule again with a fresh handoff")
    try:
        record = json.loads(data.decode("utf-8"))
        ok = (isinstance(record, dict) and record.get("version") == RECORD_VERSION
              and record.get("threadId") == thread_id and record.get("jobId") == job_id)
        if ok:
            record["handoff"] = validate_handoff(record.get("handoff"))
    except (UnicodeDecodeError, json.JSONDecodeError, InvalidInput):
        ok = False
    if not ok:
        raise HandoffChanged(f"the saved handoff {path} does not authorise this job (version, thread or job "
                             "differs, or its content is invalid)", hint="the continuation is cancelled")
    return Verified(record, digest, data, path)


def read_handoff_file(path: str | Path, *, wait_s: float = STREAM_WAIT_S) -> dict[str, Any]:
    """The JSON object in ``path`` (for ``--handoff FILE``; ``-`` is standard input), with errors
    naming the problem.

    At most ``_MAX_FILE_BYTES + 1`` bytes are read, whatever size the file reports (``/dev/zero``
    reports 0; :func:`read_limited`); a FIFO, pipe or terminal must deliver them and close within
    ``wait_s``; nesting is bounded before decoding, and a key repeated in an object is refused.
    """
    field = "--handoff"
    where = "the handoff on standard input" if str(path) == "-" else f"the handoff file {path}"
    try:
        data = read_fd_limited(0, "-", limit=_MAX_FILE_BYTES, wait_s=wait_s) if str(path) == "-" \
            else read_limited(path, limit=_MAX_FILE_BYTES, wait_s=wait_s)
    except TooLarge:
        data = None
    except ReadTimedOut as exc:
        raise InvalidInput(f"{where} did not arrive: nothing wrote it and closed it within {exc.wait_s:g} s",
                           field=field, hint="write the handoff and close the stream (`rekall schedule --handoff - "
                                             "< handoff.json`), or pass a regular file") from exc
    except OSError as exc:
        raise InvalidInput(f"cannot read the handoff file {path}: {exc.strerror or exc}", field=field,
                           hint="pass the path of an existing JSON file, or - for standard input") from exc
    if data is None:
        raise InvalidInput(f"{where} is larger than {_MAX_FILE_BYTES} bytes", field=field,
                           hint=f"a handoff holds at most {MAX_HANDOFF_BYTES} bytes of JSON")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{where} is not UTF-8 (byte {exc.start} is invalid)", field=field,
                           hint="save the file as UTF-8 and try again") from exc
    try:
        value = safejson.loads(text)
    except safejson.TooDeep as exc:
        raise InvalidInput(f"{where} is {exc}", field=field,
                           hint="a handoff is an object of strings and lists of strings") from exc
    except safejson.DuplicateKey as exc:
        raise InvalidInput(f"{where} has {exc}", field=field,
                           hint="keep one of the values: JSON readers disagree on which one a repeated key means") \
            from exc
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{where} is not JSON: {safejson.decode_error_text(exc)}",
                           field=field, hint="fix the JSON (an object with the five handoff keys)") from exc
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} holds JSON {_json_kind(value)}, not an object", field=field,
                           hint="write an object with summary, preserve, discard, nextStep and resume, "
                                "or leave out --handoff to schedule without one")
    return value


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {list: "an array", str: "a string"}.get(type(value), "a number")
