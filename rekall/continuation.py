"""The text of the one continuation turn rekall starts after a verified compaction."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def continuation_text(record: Mapping[str, Any], handoff_path: str) -> str:
    """Build the continuation message from a verified handoff record.

    It names the job (the marker the resumed agent and the tests look for), says that
    compaction completed, points at the saved handoff and includes its exact contents, and
    keeps the user's latest instructions and permissions above everything it says.
    """
    lines = [
        f"[Automatic continuation requested through rekall; job {record['jobId']}]",
        "Context compaction has completed. This message resumes only the previously authorized task.",
        f"Read the saved handoff at {handoff_path}. Its exact contents are also included below.",
        "Follow the latest user instructions and all existing permission boundaries. "
        "A stop instruction takes precedence.",
        "Continue with nextStep only. Do not schedule another compaction or continuation "
        "merely because of this message.",
        "The discard list concerns redundant context, not deleting files or ignoring constraints.",
        "",
        json.dumps(record["handoff"], indent=2, ensure_ascii=False),
    ]
    return "\n".join(lines)
