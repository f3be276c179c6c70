"""The job status: every field a status can hold, defined once, in the record ``JobStatus``.

The status file, ``rekall status --json`` and the MCP tools all carry the same JSON object;
its field names are the record's attribute names (camelCase, as the Node version wrote them).
A field appears only once the step that sets it has happened: an attribute that is not set
holds ``ABSENT`` and is left out of the JSON (``null`` is a value: "known to be unknown").

Derived from the record, so nothing else spells the list:
- the fields the store owns and a caller's ``extra`` may not set (``RESERVED``, ``ANCHORS``);
- the fields ``rekall status`` shows a person, with their labels (``SHOWN``);
- the metrics a ``history`` entry keeps (``METRICS``);
- the MCP tools' output schema (``rekall.surfaces.mcp_server`` builds it from the annotations).

This module is on the read path of ``rekall status`` and ``compaction_status``: it imports
attrs and nothing else, and converts with plain dict comprehensions (no converter library).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

import attrs


class Absent(enum.Enum):
    """Not set: the field is left out of the JSON."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = Absent.ABSENT
T = TypeVar("T")
#: A field that may be left out: its value, or ``ABSENT``.
Maybe = Union[T, Literal[Absent.ABSENT]]

# Who sets a field (``by``): the meaning of the reserved names and the scheduling anchors.
STORE = "store"  # the store, when it creates a job or derives its status from the journal
ANCHOR = "anchor"  # the scheduler, through ``create_job(extra=...)``: what the thread showed at scheduling
LIFECYCLE = "lifecycle"  # a transition's effect (``rekall.states.table``)
READER = "reader"  # a reader, about the status itself (a rebuilt file, a lost worker, another version)
ANSWER = "answer"  # the answer of one call (schedule, cancel, the MCP server), never the status file


class _Record:
    """Equality and repr by the JSON fields: cheaper to define than attrs' generated methods
    for some sixty fields, which every start of ``rekall status`` would pay for."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and wire(self) == wire(other)  # type: ignore[arg-type]

    __hash__ = None  # type: ignore[assignment]  # values may be lists (history)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({wire(self)!r})"  # type: ignore[arg-type]


def _field(doc: str, *, by: str, label: str | None = None, always: bool = False) -> Any:
    """One status field. ``always``: present in every status derived from a journal."""
    return attrs.field(default=ABSENT, metadata={"doc": doc, "by": by, "label": label, "always": always})


@attrs.frozen(kw_only=True, eq=False, repr=False)
class HistoryEntry(_Record):
    """One earlier job of the thread, as the status's ``history`` summarises it (oldest first)."""

    jobId: Maybe[str] = _field("The earlier job's id.", by=STORE)
    jobNumber: Maybe[int] = _field("Its number on this thread (1 for the first job).", by=STORE)
    status: Maybe[str] = _field("How it ended (the same as state).", by=STORE)
    state: Maybe[str] = _field("How it ended.", by=STORE)
    createdAt: Maybe[str | None] = _field("When it was scheduled (ISO 8601, UTC).", by=STORE)
    endedAt: Maybe[str | None] = _field("When it ended, whatever the ending.", by=STORE, label="ended")
    #: The Node version's name for ``endedAt`` (its history entries carry this one instead).
    completedAt: Maybe[str | None] = _field("When it ended (history written by the Node version).", by=READER)
    contextTokensBefore: Maybe[int | None] = _field("Tokens in use before the compaction.", by=STORE)
    contextTokensAfter: Maybe[int | None] = _field("Tokens in use after the compaction.", by=STORE)
    tokensReclaimed: Maybe[int | None] = _field("contextTokensBefore - contextTokensAfter.", by=STORE)
    reclaimedFraction: Maybe[float | None] = _field("tokensReclaimed / contextTokensBefore.", by=STORE)
    compactionDurationMs: Maybe[int | float | None] = _field("From the request to the completion.", by=STORE)
    resumeDelayMs: Maybe[int | float | None] = _field("From the compaction to the continuation turn.", by=STORE)
    errorCode: Maybe[str | None] = _field("Its stable error code, if it failed.", by=STORE)
    outcomeMayBeUnknown: Maybe[bool | None] = _field("A request may have had an unobserved effect.", by=STORE)
    resumeSkipped: Maybe[str] = _field("insufficient_headroom, new_user_input, user_turn_stopped or "
                                       "handoff_delivered_by_hook when its continuation was skipped.", by=STORE)
    handoffDelivery: Maybe[str] = _field("How its handoff reached the model after the compaction (see the job's "
                                         "handoffDelivery).", by=STORE)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class JobStatus(_Record):
    """The thread's latest job. The handoff text is never stored here (only its path and hash)."""

    # --- the job, from its first journal record ---
    jobId: Maybe[str] = _field("The job's id (a UUID).", by=STORE, label="job", always=True)
    threadId: Maybe[str] = _field("The Codex thread (conversation) id.", by=STORE, always=True)
    status: Maybe[str] = _field("The job's state (the Node version's name for it).", by=STORE, always=True)
    state: Maybe[str] = _field("The job's state, or not_scheduled when the thread has no job.", by=STORE,
                               always=True)
    createdAt: Maybe[str] = _field("When the job was scheduled (ISO 8601, UTC).", by=STORE, label="created",
                                   always=True)
    jobNumber: Maybe[int] = _field("The job's number on this thread (1 for the first).", by=STORE,
                                   label="job number", always=True)
    userFingerprint: Maybe[str | None] = _field("The latest user turn when scheduled (a digest).", by=STORE,
                                                always=True)
    resume: Maybe[bool] = _field("One continuation turn was asked for.", by=STORE, label="resume requested",
                                 always=True)
    errorCode: Maybe[str | None] = _field("A stable error code when the job failed or timed out.", by=STORE,
                                          label="error code", always=True)
    outcomeMayBeUnknown: Maybe[bool] = _field(
        "A request may have reached the thread's owner without its effect being observed.", by=STORE, always=True)
    handoffPath: Maybe[str] = _field("Where the sealed handoff record is saved.", by=STORE)
    handoffSha256: Maybe[str] = _field("SHA-256 of the handoff record, verified before use.", by=STORE)
    contextTokensAtSchedule: Maybe[int | None] = _field("Tokens in use when scheduled.", by=ANCHOR)
    modelContextWindowAtSchedule: Maybe[int | None] = _field("The context window when scheduled.", by=ANCHOR)
    ownerIdAtSchedule: Maybe[str | None] = _field("The thread's owner window when scheduled.", by=ANCHOR)
    platform: Maybe[str] = _field("Where the thread lives: extension-ipc (a VS Code window) or app-server "
                                  "(the shared Codex app-server); jobs scheduled before it was recorded ran on "
                                  "extension-ipc.", by=ANCHOR)
    generationAtSchedule: Maybe[dict[str, Any] | None] = _field(
        "The IPC protocol generation the scheduler settled, with its evidence (generation, ownerId, router, "
        "socket, how); the worker reuses it only for the same owner on the same router.", by=ANCHOR)
    # --- set by the lifecycle's transitions ---
    pid: Maybe[int] = _field("The worker's process id.", by=LIFECYCLE)
    workerStartedAt: Maybe[str] = _field("When the worker took the job.", by=LIFECYCLE)
    workerDeadlineAt: Maybe[str | None] = _field("When the worker's deadline passes (not said by older workers).",
                                                 by=LIFECYCLE)
    requestedAt: Maybe[str] = _field("When the compaction was requested.", by=LIFECYCLE,
                                     label="compaction requested")
    contextTokensBefore: Maybe[int | None] = _field(
        "Tokens in use before the compaction: the count when it was requested, replaced at completion by "
        "the owner's own count from before it where the platform reports one (the shared app-server).",
        by=LIFECYCLE, label="tokens before")
    modelContextWindowBefore: Maybe[int | None] = _field("The context window when requested.", by=LIFECYCLE)
    acceptedAt: Maybe[str] = _field("When the owner accepted the request (not completion).", by=LIFECYCLE,
                                    label="accepted")
    ownerId: Maybe[str | None] = _field("The owner that accepted the request.", by=LIFECYCLE)
    compactionId: Maybe[str] = _field("The completed contextCompaction item.", by=LIFECYCLE)
    compactionCompletedAt: Maybe[str] = _field("When the completed compaction was observed.", by=LIFECYCLE,
                                               label="compaction completed")
    contextTokensAfter: Maybe[int | None] = _field("Tokens in use after the compaction.", by=LIFECYCLE,
                                                   label="tokens after")
    modelContextWindowAfter: Maybe[int | None] = _field("The context window after the compaction.",
                                                        by=LIFECYCLE)
    tokensReclaimed: Maybe[int | None] = _field("contextTokensBefore - contextTokensAfter.", by=LIFECYCLE)
    reclaimedFraction: Maybe[float | None] = _field("tokensReclaimed / contextTokensBefore.", by=LIFECYCLE,
                                                    label="reclaimed")
    compactionDurationMs: Maybe[int | float | None] = _field("From the request to the completion.",
                                                             by=LIFECYCLE, label="compaction took (ms)")
    contextWindowUsedFraction: Maybe[float | None] = _field("The window used after the compaction.",
                                                            by=LIFECYCLE, label="window used after")
    completedAt: Maybe[str] = _field("When the job ended with a known outcome.", by=LIFECYCLE)
    resumeSkipped: Maybe[str] = _field("insufficient_headroom, new_user_input, user_turn_stopped or "
                                       "handoff_delivered_by_hook when the continuation was skipped.",
                                       by=LIFECYCLE)
    resumeSkipReason: Maybe[str | None] = _field("Why the continuation was skipped.",
                                                 by=LIFECYCLE, label="resume skipped because")
    resumeCheckContextTokens: Maybe[int | None] = _field("Tokens at the check before resuming.", by=LIFECYCLE)
    resumeCheckModelContextWindow: Maybe[int | None] = _field("The window at the check before resuming.",
                                                              by=LIFECYCLE)
    resumeCheckWindowUsedFraction: Maybe[float | None] = _field("The window used at the check before resuming.",
                                                                by=LIFECYCLE)
    resumeRequestedAt: Maybe[str] = _field("When the continuation turn was requested.", by=LIFECYCLE)
    resumeTurnId: Maybe[str] = _field("The continuation turn the owner started.", by=LIFECYCLE,
                                      label="continuation turn")
    resumedAt: Maybe[str] = _field("When the continuation turn started.", by=LIFECYCLE)
    resumeDelayMs: Maybe[int | float | None] = _field("From the compaction to the continuation turn.",
                                                      by=LIFECYCLE, label="resume delay (ms)")
    handoffDelivery: Maybe[str] = _field(
        "How the saved handoff reached the model after the compaction: continuation (inside the continuation "
        "turn), injected (added to the thread's context, no turn started), hook (handed to Codex by the plugin's "
        "SessionStart(compact) hook for the next model request), not_delivered (handoffDeliveryNote says why, "
        "naming the platform's limit), or unknown (an injection whose answer was lost; never sent again).",
        by=LIFECYCLE, label="handoff delivered")
    handoffDeliveryNote: Maybe[str] = _field("Why the handoff was not delivered, or how its delivery ended.",
                                             by=LIFECYCLE, label="handoff delivery")
    handoffInjectedAt: Maybe[str] = _field("When the platform acknowledged the handoff's injection.",
                                           by=LIFECYCLE)
    # Folded in by the job's readers from its delivery claim (rekall.store.delivery), never journaled.
    handoffHookAt: Maybe[str] = _field("When the plugin's SessionStart(compact) hook handed the handoff to Codex.",
                                       by=READER)
    handoffCut: Maybe[bool] = _field("The hook cut the handoff to fit Codex's hook context limit "
                                     "(handoffDeliveryNote says where the whole is).", by=READER,
                                     label="handoff cut")
    injectedBytes: Maybe[int] = _field("The size of the injected message's text (UTF-8 bytes).", by=LIFECYCLE)
    injectDelayMs: Maybe[int | float | None] = _field(
        "From the compaction's completion to the injection's acknowledgement.", by=LIFECYCLE,
        label="injected after (ms)")
    reason: Maybe[str] = _field("Why the job was cancelled.", by=LIFECYCLE, label="cancel reason")
    cancelledAt: Maybe[str] = _field("When the job was cancelled.", by=LIFECYCLE)
    error: Maybe[str] = _field("What went wrong, for people.", by=LIFECYCLE, label="error")
    failedAt: Maybe[str] = _field("When the job failed.", by=LIFECYCLE)
    timedOutAt: Maybe[str] = _field("When the worker's deadline passed.", by=LIFECYCLE)
    # --- the status as derived from the journal ---
    updatedAt: Maybe[str] = _field("When the latest transition was journaled.", by=STORE, always=True)
    journalSeq: Maybe[int] = _field("The latest journal record's sequence number.", by=STORE, always=True)
    journalPath: Maybe[str] = _field("The job's journal (the truth this status is derived from).", by=STORE,
                                     always=True)
    logPath: Maybe[str] = _field("The worker's log.", by=STORE, always=True)
    history: Maybe[list[HistoryEntry]] = _field("The thread's earlier ended jobs, oldest first (at most 20).",
                                                by=STORE, always=True)
    # --- said by a reader about this status ---
    statusFileProblem: Maybe[str] = _field("The status file was missing, stale or unreadable (and rebuilt), "
                                           "or no journal backs it.", by=READER)
    lastJournaledState: Maybe[str] = _field("A lost worker could not be journaled: its last state.", by=READER)
    workerProblem: Maybe[str] = _field("The job's worker still exists past its deadline (stopped, or running "
                                       "late): what it is doing and what to do.", by=READER, label="worker")
    journalUnwritable: Maybe[str] = _field("Why the journal could not take the worker_lost record.", by=READER)
    jobsDir: Maybe[str] = _field("The jobs directory holding the job, when it is not the usual one.", by=READER)
    writtenBy: Maybe[str] = _field("node when the Node version of rekall wrote this status.", by=READER)
    # --- the answer of one call ---
    alreadyScheduled: Maybe[bool] = _field("schedule: an unfinished job already held the thread; it is this "
                                           "job.", by=ANSWER)
    handoffIgnored: Maybe[bool] = _field("schedule: the handoff given was not saved (the unfinished job keeps "
                                         "its own).", by=ANSWER)
    handoff: Maybe[dict[str, Any]] = _field("schedule: the handoff as saved.", by=ANSWER)
    cancellationRequested: Maybe[bool] = _field("cancel: the cancel marker was written.", by=ANSWER)
    message: Maybe[str] = _field("What to do next.", by=ANSWER, label="note")
    fieldsNotShown: Maybe[list[str]] = _field(
        "Fields of a status rekall did not derive (the Node version's file, or one found without a journal) "
        "that are left out because the schema does not describe them or their value does not fit it.",
        by=ANSWER)
    # --- not a status field: how the record was read ---
    #: The JSON object this record was read from (:func:`read`), when it was: :func:`wire` gives back
    #: the fields the record does not have (a Node-written file), after its own, so that nothing
    #: found is dropped when the record is written back or shown.
    as_read: Mapping[str, Any] | None = attrs.field(default=None, metadata={"json": False})


# --- reading and writing the JSON ----------------------------------------------------------


def json_fields(cls: type) -> tuple[attrs.Attribute[Any], ...]:
    """A record's fields that its JSON holds (``JobStatus.as_read`` is not one), in its order."""
    return tuple(a for a in attrs.fields(cls) if a.metadata.get("json", True))


STATUS_FIELDS: tuple[attrs.Attribute[Any], ...] = json_fields(JobStatus)
NAMES: frozenset[str] = frozenset(a.name for a in STATUS_FIELDS)
#: Each record's field names, in its order (the order of the JSON).
_ORDER: dict[type, tuple[str, ...]] = {cls: tuple(a.name for a in json_fields(cls))
                                       for cls in (JobStatus, HistoryEntry)}


def known(value: Maybe[T]) -> T | None:
    """The value, or ``None`` when the field is not set."""
    return None if value is ABSENT else value


def read(fields: Mapping[str, Any]) -> JobStatus:
    """The record of a status's JSON fields. Values are taken as they are (no conversion);
    fields the record does not have are kept in ``as_read`` (see :func:`wire`, :func:`unknown`)."""
    return JobStatus(**{k: v for k, v in fields.items() if k in NAMES}, as_read=dict(fields))


def unknown(fields: Mapping[str, Any]) -> list[str]:
    """The names in ``fields`` that are not status fields."""
    return [k for k in fields if k not in NAMES]


def wire(record: JobStatus | HistoryEntry) -> dict[str, Any]:
    """The JSON fields of a record, in the record's order, without those not set."""
    # A comprehension over the names, not ``attrs.asdict``: kept light, this runs on every transition.
    fields = {name: value for name in _ORDER[type(record)] if (value := getattr(record, name)) is not ABSENT}
    found = record.as_read if isinstance(record, JobStatus) else None
    if found:  # read from JSON: the fields the record does not have (a Node-written file) follow, as found
        fields.update((name, value) for name, value in found.items() if name not in NAMES)
    return fields


def ended_at(fields: Mapping[str, Any]) -> str | None:
    """When the job ended, whatever the ending (``completedAt`` is read too: older status files
    used it for every ending)."""
    s = read(fields)
    for value in (s.completedAt, s.resumedAt, s.failedAt, s.cancelledAt, s.timedOutAt):
        if value is not ABSENT and value:
            return value
    return None


# --- derived lists ---------------------------------------------------------------------------

#: Status fields the store owns; a caller's ``extra`` may not set them.
RESERVED: frozenset[str] = frozenset(a.name for a in STATUS_FIELDS if a.metadata["by"] == STORE)
#: The fields a scheduler may add through ``extra``: what the thread showed when it was scheduled.
ANCHORS: frozenset[str] = frozenset(a.name for a in STATUS_FIELDS if a.metadata["by"] == ANCHOR)
#: Present in every status derived from a journal (the MCP schema's required fields of a job).
ALWAYS: frozenset[str] = frozenset(a.name for a in STATUS_FIELDS if a.metadata["always"])
#: Set by the lifecycle's transitions.
TRANSITION_FIELDS: frozenset[str] = frozenset(a.name for a in STATUS_FIELDS if a.metadata["by"] == LIFECYCLE)

_S, _H = attrs.fields(JobStatus), attrs.fields(HistoryEntry)
#: What ``history`` keeps of each earlier job's metrics (the same names in both records).
METRICS: tuple[str, ...] = tuple(a.name for a in (
    _H.contextTokensBefore, _H.contextTokensAfter, _H.tokensReclaimed, _H.reclaimedFraction,
    _H.compactionDurationMs, _H.resumeDelayMs))
#: What ``rekall status`` shows a person, in reading order: ``(field, label)``. ``endedAt`` is
#: computed from the ending's own time (see ``rekall.store.replay.ended_at``).
SHOWN: tuple[tuple[str, str], ...] = tuple((a.name, a.metadata["label"]) for a in (
    _S.jobId, _S.jobNumber, _S.resume, _S.createdAt, _S.requestedAt, _S.acceptedAt, _S.compactionCompletedAt,
    _H.endedAt, _S.contextTokensBefore, _S.contextTokensAfter, _S.reclaimedFraction, _S.compactionDurationMs,
    _S.contextWindowUsedFraction, _S.resumeSkipReason, _S.resumeTurnId, _S.resumeDelayMs, _S.handoffDelivery,
    _S.handoffDeliveryNote, _S.handoffCut, _S.injectDelayMs, _S.reason, _S.workerProblem, _S.errorCode, _S.error, _S.message))
