"""What the plugin's hooks read of Codex's rollout (the conversation's transcript): its records, and
their times. Shared by the job's branch (:mod:`rekall.surfaces.session_hook`) and the checkpoint's
(:mod:`rekall.surfaces.checkpoint_hook`). It loads nothing: the hook's start-up pays for every import.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the hook's start-up pays for every import
if TYPE_CHECKING:
    from typing import Any

#: A rollout line that records one item of type ``%s`` (``RolloutItem::Compacted`` is ``compacted``), at the
#: start of its line, so that a record quoted inside another line never matches. Codex 0.171 writes an
#: ``ordinal`` between the time and the type; plain number fields there are allowed. Compiled when a
#: transcript is read (each compiled pattern costs the hook's start-up).
RECORD = rb'^\{"timestamp":"([0-9T:.+Z-]{10,40})",(?:"[a-z_]{1,40}":-?[0-9]{1,20},){0,8}"type":"%s"'


def instant(text: str) -> Any:
    """An ISO 8601 UTC time as rekall and Codex write it (``…Z``), comparable with another."""
    from datetime import datetime, timezone

    found = datetime.fromisoformat(text.removesuffix("Z") + ("+00:00" if text.endswith("Z") else ""))
    return found if found.tzinfo else found.replace(tzinfo=timezone.utc)
