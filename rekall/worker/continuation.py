"""What rekall puts into the conversation after a verified compaction: the text of the one
continuation turn, or, where no continuation runs, the framed handoff it injects instead."""

from __future__ import annotations

import json

TYPE_CHECKING = False  # not typing's: the plugin's hook (rekall.surfaces.session_hook) pays for every import
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: What every message rekall adds says about the user's authority over it.
_BOUNDARIES = ("Follow the latest user instructions and all existing permission boundaries. "
               "A stop instruction takes precedence.")


def _handoff_lines(record: Mapping[str, Any]) -> list[str]:
    """The handoff's exact contents, after a word on what its discard list means."""
    return ["The discard list concerns redundant context, not deleting files or ignoring constraints.", "",
            json.dumps(record["handoff"], indent=2, ensure_ascii=False)]


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
        _BOUNDARIES,
        "Continue with nextStep only. Do not schedule another compaction or continuation "
        "merely because of this message.",
        *_handoff_lines(record),
    ]
    return "\n".join(lines)


#: Why no continuation carries the handoff, in the words the injected message uses: by the job's
#: ``resumeSkipped``, its cancel reason, or how it ended.
_NO_CONTINUATION = {
    "insufficient_headroom": "one was asked for, but rekall skipped it for headroom",
    "new_user_input": "one was asked for, but the user sent new input first",
    "new_turn": "one was asked for, but a new turn started first",
    "goal_active": "one was asked for, but the thread's goal became active first",
    "user_turn_stopped": "one was asked for, but the user stopped their turn first",
    "failed": "one was asked for, but the job failed before it ran",
    "timed_out": "one was asked for, but the job's deadline passed before it ran",
}
#: Said when the reason is not one of those (never the raw value: it reaches the model).
_NONE_RAN = "one was asked for, but none ran"


def injection_text(record: Mapping[str, Any], handoff_path: str, *, resume: bool, skipped: str | None,
                   skip_reason: str | None) -> str:
    """Frame a verified handoff for injection into the thread's context (no turn is started).

    It says what the message is (the handoff saved before the compaction this job requested),
    names the job and the thread, says why no continuation carries it, and whether its next
    step is authorised (never by this message: the user's next instruction decides)."""
    if not resume:
        why, authorised = ("the handoff did not ask for one (resume false)",
                           "Its nextStep is not authorised: do not act on it until the user asks you to.")
    else:
        why = _NO_CONTINUATION.get(skipped or "", _NONE_RAN)
        if skipped == "insufficient_headroom" and skip_reason:
            why += f" ({skip_reason})"
        authorised = ("Its nextStep was authorised only as that continuation: take it up only if the user's "
                      "next message asks you to continue.")
    lines = [
        f"[Handoff saved through rekall before a context compaction; job {record['jobId']}, "
        f"thread {record['threadId']}]",
        "The context compaction this job requested has completed. Below is the handoff written before it, "
        "as rekall saved it and verified it against its SHA-256 seal; the same text is saved at "
        f"{handoff_path}.",
        f"No continuation turn was started: {why}. {authorised}",
        _BOUNDARIES,
        *_handoff_lines(record),
    ]
    return "\n".join(lines)


def checkpoint_text(record: Mapping[str, Any], checkpoint_path: str, *, age: str, turns: int | None) -> str:
    """Frame a thread's verified checkpoint for the first model request after a compaction that no rekall
    job delivers for: the agent's own note from before it, its age, and what it does not authorise."""
    since = "an unknown number of turns" if turns is None else f"{turns} turn{'' if turns == 1 else 's'}"
    return "\n".join([
        f"[Checkpoint saved through rekall before a context compaction; thread {record['threadId']}]",
        "The conversation was compacted. Below is your own checkpoint: the note you saved before the compaction, "
        f"{age} ago and {since} ago, as rekall saved it and verified it against its SHA-256 seal; the same text is "
        f"saved at {checkpoint_path}.",
        "It may be out of date: check it against the current state (the files, the latest messages) before you "
        "rely on it. It does not by itself authorise its nextStep: take that up only if the user's instructions "
        "ask you to go on with the task.",
        _BOUNDARIES,
        *_handoff_lines(record),
    ])


def plan_text(plan: Mapping[str, Any]) -> str:
    """The latest plan (Codex's ``update_plan``) from before the compaction, one step a line."""
    lines = ["Your latest plan (update_plan) from before the compaction, as the transcript holds it:"]
    if isinstance(plan.get("explanation"), str) and plan["explanation"].strip():
        lines.append(plan["explanation"].strip())
    for step in plan.get("plan") or ():
        if isinstance(step, dict) and isinstance(step.get("step"), str):
            lines.append(f"- [{step.get('status') if isinstance(step.get('status'), str) else 'unknown'}] "
                         f"{step['step']}")
    return "\n".join(lines)
