"""Validation of thread and job ids.

Ids become parts of file names, so they are checked before any path is built: only the
canonical 8-4-4-4-12 hexadecimal UUID form is accepted, and it is lower-cased so that
one thread never has two spellings on disk. Errors describe a wrong id, never repeat it.
"""

from __future__ import annotations

import re

from rekall.kernel.errors import InvalidInput

#: A UUID in its canonical 8-4-4-4-12 form (match it with ``re.IGNORECASE``).
UUID_PATTERN = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UUID = re.compile(rf"\A{UUID_PATTERN}\Z", re.IGNORECASE)


def is_uuid(value: object) -> bool:
    return isinstance(value, str) and _UUID.match(value) is not None


def described(value: object) -> str:
    """What a rejected id is, without repeating it (it may be a secret pasted by mistake)."""
    if not isinstance(value, str):
        return f"a {type(value).__name__}"
    return f"a string of {len(value)} character{'' if len(value) == 1 else 's'}"


def validate_id(value: object, field: str) -> str:
    """Return ``value`` lower-cased if it is a UUID, else raise naming ``field``."""
    if not is_uuid(value):
        shown = described(value)
        hint = (
            "pass the current CODEX_THREAD_ID explicitly; never guess a thread"
            if field == "threadId"
            else "use the jobId that schedule_compaction or compaction_status returned"
        )
        raise InvalidInput(f"{field} must be a UUID like 0199a5c2-…; got {shown} that is not one", field=field,
                           hint=hint, code="invalid_id")
    return value.lower()  # type: ignore[union-attr]


def thread_id(value: object) -> str:
    return validate_id(value, "threadId")


def job_id(value: object) -> str:
    return validate_id(value, "jobId")
