"""The MCP server (``rekall mcp``): five tools over stdio, thin wrappers of ``rekall.usecases.service``.

Tool names, inputs and limits match the Node version, so agents and skills written for it
keep working. Results are structured: the SDK derives each tool's output schema from its
return type and validates every result against it. The job tools' return types are
TypedDicts built here from the ``JobStatus`` record (``rekall.states.status``; the SDK cannot
take a slotted attrs class), so the schema lists exactly the record's fields. Tools are
``async`` and blocking store work runs on a worker thread, so a slow probe never holds up
``compaction_status``. The acting tools run through :func:`rekall.surfaces.mcp_confirm.act_as_caller`,
which asks the user whose call it is when neither the request nor the thread's owner says.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal, ParamSpec, TypeVar, Union, get_args, get_type_hints

from typing_extensions import NotRequired, Required, TypedDict  # pydantic needs it on Python < 3.12

import anyio
import attrs
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from rekall import __version__
from rekall.usecases import service
from rekall.kernel.caller import Caller
from rekall.kernel.errors import InternalError, InvalidInput, RekallError, as_rekall_error, tool_error_text
from rekall.kernel.credentials import shown_key
from rekall.states.status import ALWAYS, Absent, HistoryEntry, JobStatus, json_fields, wire
from rekall.store.handoff import MAX_HANDOFF_BYTES, MAX_LIST_ITEMS
from rekall.surfaces.mcp_confirm import act_as_caller

THREAD_ID_DESCRIPTION = (
    "Current CODEX_THREAD_ID; obtain it from the shell environment (echo $CODEX_THREAD_ID). "
    "Never guess or select a different thread."
)

STATES_TEXT = (
    "States: scheduled, waiting_for_idle (your turn must end first), requesting, accepted "
    "(the thread's owner took the request; acceptance is not completion), waiting_for_resume_idle, "
    "resuming; terminal: completed (a newly observed completed contextCompaction), resumed (one "
    "continuation turn was started; this says nothing about the work it does), skipped (compacted, "
    "but the continuation was refused for lack of headroom or stale/missing telemetry), cancelled, "
    "timed_out, failed. outcomeMayBeUnknown=true means a request may have reached the owner "
    "without its effect being observed."
)

INSTRUCTIONS = (
    "rekall compacts this Codex conversation at a checkpoint and can resume it once. It serves chats of "
    "the VS Code extension and terminal sessions on the shared app-server: a plain `codex` where daemon "
    "auto-start is on (it starts the daemon and joins it; the default in Codex 0.171.0) and `codex --remote "
    "unix://`. A session that runs its own app-server (started with -c, --profile or a similar flag, with "
    "auto-start off, or `codex exec`) is out of reach: probe_compaction says what it saw and how the user "
    "checks. A thread whose goal is active is refused until the goal is paused. "
    "Order: compaction_status, then probe_compaction, then schedule_compaction (only when the user "
    "authorised compaction), then FINISH YOUR TURN, then check compaction_status later. "
    "At the milestones of a long task, save_checkpoint (it asks for no compaction): the task then survives Codex's "
    "own compactions. Pass the current CODEX_THREAD_ID; never guess a thread. Nothing is retried automatically. "
    + STATES_TEXT
)

logger = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

ThreadId = Annotated[str, Field(description=THREAD_ID_DESCRIPTION, min_length=1, max_length=200)]
Entries = Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=MAX_LIST_ITEMS)]


Summary = Annotated[str, Field(description=(
    "Task, constraints, decisions, completed work, verification and outstanding work. The whole "
    f"handoff is at most {MAX_HANDOFF_BYTES} UTF-8 bytes (compact JSON)."))]
Preserve = Annotated[Entries, Field(description=f"Facts to retain (at most {MAX_LIST_ITEMS} non-empty strings).")]
Discard = Annotated[Entries, Field(description=(
    f"History that can be summarised away (at most {MAX_LIST_ITEMS}). This never authorises deleting files."))]


class _Notes(TypedDict):
    """What a handoff and a checkpoint both say."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    summary: Summary
    preserve: Preserve
    discard: Discard


class Handoff(_Notes):
    """Guides the resumed agent. It does not alter Codex's own compaction prompt."""

    nextStep: Annotated[str, Field(description=(
        "The exact authorised next action, including where to stop. Required (may be empty only when "
        "resume is false)."))]
    resume: Annotated[bool, Field(strict=True, description="Explicit opt-in to ONE automatic continuation turn.")]


class CheckpointHandoff(_Notes):
    """The agent's own note of its task, delivered after each later compaction it did not schedule."""

    nextStep: Annotated[str, Field(description=(
        "The next step as you see it now. Delivered as your own note: it does not by itself authorise the step."))]
    resume: NotRequired[Annotated[bool, Field(strict=True, description=(
        "false or left out: a checkpoint never starts a turn (true is refused)."))]]


class CheckpointResult(TypedDict):
    """The checkpoint saved (or found unchanged), and whether a hook can deliver it."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    threadId: str
    checkpointSha256: Annotated[str, Field(description="The SHA-256 of the sealed record (its file's name).")]
    savedAt: Annotated[str, Field(description="When it was saved (the earlier time when nothing changed).")]
    bytes: int
    path: Annotated[str, Field(description="Where the sealed record is.")]
    changed: Annotated[bool, Field(description="false: it was already the thread's current checkpoint.")]
    replacedSha256: NotRequired[Annotated[str, Field(description="The checkpoint it replaced (kept in the history).")]]
    hookCanDeliver: Annotated[bool, Field(description=(
        "Whether the plugin's SessionStart hook is installed, enabled and trusted, and not blocked by "
        "allow_managed_hooks_only: only it delivers the checkpoint."))]
    hookWarning: NotRequired[Annotated[str, Field(description="Why no hook can deliver it, and what to do.")]]
    message: str


class CheckpointDelivery(TypedDict, total=False):
    """One compaction the checkpoint was claimed for (its claim's record)."""

    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]

    compaction: Required[Annotated[str, Field(description=(
        "SHA-256 of the transcript's compacted record of that compaction (the claim's key)."))]]
    route: Required[Annotated[str, Field(description="hook; foreign or unknown for a claim rekall cannot read.")]]
    at: str
    checkpointSha256: str
    compactedAt: str
    contextBytes: int
    cut: bool
    plan: bool


class CheckpointShown(TypedDict, total=False):
    """The thread's checkpoint: saved when, bytes, and each delivery with its compaction and route."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    state: Required[Annotated[str, Field(description="saved (delivered after later compactions) or cleared.")]]
    savedCount: Required[int]
    savedAt: str
    bytes: int
    sha256: str
    clearedAt: str
    deliveries: Required[list[CheckpointDelivery]]
    note: Required[str]


class ProbeResult(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]

    threadId: str
    platform: str
    connected: bool
    ownerId: str | None
    endpoint: Any
    adapter: Any
    observedVersions: Any
    runtimeStatus: str
    runtimeHint: str
    idle: bool
    busyReason: str | None
    latestUserTurnStopped: bool
    completedCompactions: int
    contextTokens: int | None
    modelContextWindow: int | None
    headroom: dict[str, Any]
    compatibility: dict[str, Any]
    extensionVersion: str | None


# --- the job status, as the tools answer it -----------------------------------------------


def _present(annotation: Any) -> Any:
    """A status field's type without ``ABSENT`` (a field not set is left out, not sent)."""
    arms = tuple(arm for arm in get_args(annotation) if arm != Literal[Absent.ABSENT])
    return Union[arms] if len(arms) > 1 else arms[0]  # noqa: UP007 - a runtime tuple of arms


def _schema_of(record: type, title: str, required: frozenset[str], types: Mapping[str, Any],
               more: Mapping[str, Any] | None = None) -> Any:
    """A TypedDict for pydantic built from an attrs status record: one key per field, its type
    and description from the record, ``required`` keys required, ``more`` keys optional, nothing else allowed."""
    hints = get_type_hints(record)
    keys = {}
    for field in json_fields(record):
        value = Annotated[types.get(field.name, _present(hints[field.name])),
                          Field(description=field.metadata["doc"])]
        keys[field.name] = Required[value] if field.name in required else NotRequired[value]
    keys.update((name, NotRequired[value]) for name, value in (more or {}).items())
    schema = TypedDict(title, keys)  # type: ignore[operator]
    schema.__doc__ = record.__doc__
    schema.__pydantic_config__ = ConfigDict(extra="forbid")
    return schema


def _names(*fields: attrs.Attribute[Any]) -> frozenset[str]:
    return frozenset(field.name for field in fields)


_S = attrs.fields(JobStatus)
HistoryEntryOut = _schema_of(HistoryEntry, "HistoryEntry", frozenset(), {})
_TYPES = {_S.history.name: list[HistoryEntryOut], _S.handoff.name: Handoff}
#: ``compaction_status``: a job, ``not_scheduled``, or the Node version's job (``writtenBy``).
StatusResult = _schema_of(JobStatus, "JobStatus", _names(_S.threadId, _S.state), _TYPES,
                          {"checkpoint": Annotated[CheckpointShown, Field(description=(
                              "The thread's standing checkpoint (save_checkpoint), when it has one."))]})
#: ``schedule_compaction``: the job scheduled, or the unfinished job that holds the thread.
ScheduleResult = _schema_of(JobStatus, "ScheduledJob", ALWAYS | _names(_S.alreadyScheduled), _TYPES)
#: ``cancel_compaction``: what was asked (or the ended job, with cancellationRequested false).
CancelResult = _schema_of(JobStatus, "CancelResult", _names(_S.threadId, _S.jobId, _S.state,
                                                             _S.cancellationRequested, _S.message), _TYPES)


@functools.cache
def _adapter(schema: Any) -> TypeAdapter[Any]:
    return TypeAdapter(schema)


def _fit(schema: Any, status: dict[str, Any]) -> dict[str, Any]:
    """``status`` as the output schema describes it. A status rekall did not derive from its
    journal (the Node version's file, one found without a journal, or a field a newer rekall
    journaled) may hold fields the schema does not describe, or values that do not fit it:
    those are left out and named in ``fieldsNotShown``."""
    try:
        _adapter(schema).validate_python(status)
        return status
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
    missing = sorted(str(e["loc"][0]) for e in errors if e["type"] == "missing" and e["loc"])
    if missing:
        raise InternalError(f"the status lacks {', '.join(missing)}, which the output schema requires")
    misfits = sorted({str(e["loc"][0]) for e in errors if e["loc"]})
    logger.warning("rekall mcp: status fields left out as the schema does not describe them: %s",
                   ", ".join(misfits))
    fitted = {k: v for k, v in status.items() if k not in misfits}
    fitted.update(wire(JobStatus(fieldsNotShown=misfits)))
    return fitted


def _tool_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Every failure inside a tool reaches the agent as ``[code] message. Next: hint``."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the boundary: nothing unexplained gets out
            error = as_rekall_error(exc)
            if isinstance(error, InternalError):
                logger.error("rekall mcp: %s in %s", error.message, fn.__name__)
            raise _RekallToolError(tool_error_text(error)) from None

    return wrapper


class _RekallToolError(ToolError):
    """A tool's own error, already in the promised form."""


_MAX_LISTED = 3


def _argument_errors(exc: ValidationError) -> RekallError:
    """Pydantic's verdict as field and rule only: its own text repeats the rejected values."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(shown_key(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg'][:1].lower()}{error['msg'][1:120]}")
    listed = "; ".join(problems[:_MAX_LISTED])
    if len(problems) > _MAX_LISTED:
        listed += f"; and {len(problems) - _MAX_LISTED} more"
    return InvalidInput(f"invalid arguments: {listed}", code="invalid_arguments",
                        hint="fix the named arguments to match the tool's input schema and call again")


class RekallServer(MCPServer):
    """MCPServer whose every tool error, argument validation included, reads ``[code] message. Next: hint``."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except MCPError:
            raise
        except ToolError as exc:
            raise ToolError(self._explain(name, exc)) from None

    def _explain(self, name: str, exc: ToolError) -> str:
        cause = exc.__cause__
        if isinstance(cause, _RekallToolError):
            return str(cause)
        if isinstance(cause, ValidationError):
            return tool_error_text(_argument_errors(cause))
        if name not in TOOL_NAMES:
            return tool_error_text(InvalidInput("there is no tool by that name", code="unknown_tool",
                                                hint=f"call one of {', '.join(TOOL_NAMES)}"))
        logger.error("rekall mcp: unexpected %s in %s", type(cause or exc).__name__, name)
        return tool_error_text(as_rekall_error(cause or exc))


def build_server() -> MCPServer:
    # WARNING: the SDK's INFO lines repeat what callers sent (tool names, error texts).
    server = RekallServer("rekall", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(
        annotations=ToolAnnotations(title="Probe compaction readiness", read_only_hint=True, open_world_hint=False),
        description=(
            "Read-only preflight. Run it after compaction_status and before schedule_compaction. It finds "
            "the thread's platform (a VS Code extension window, or the shared app-server of a terminal "
            "session: plain `codex` where daemon auto-start is on, or `codex --remote`; never guessed: both or "
            "neither is reported), reports the "
            "runtime status, context headroom (tokens, window, used fraction; unknown on the shared "
            "app-server until a worker follows the thread), the endpoint and peer check, and the "
            "compatibility checks. It never compacts and does not prove that a compaction will succeed; "
            "'layout_compatible' means only that the expected layout was found. A terminal session that runs "
            "its own app-server cannot be reached: the error says what rekall saw, the causes it cannot tell "
            "apart and how the user checks. A thread whose goal is active is refused: pause the goal first."),
    )
    @_tool_errors
    async def probe_compaction(threadId: ThreadId) -> ProbeResult:
        return await service.probe(threadId)  # type: ignore[return-value]

    @server.tool(
        annotations=ToolAnnotations(title="Schedule one compaction", read_only_hint=False, destructive_hint=True,
                                    idempotent_hint=False, open_world_hint=False),
        description=(
            "Schedules ONE compaction of this conversation, to happen after your current answer ends; call "
            "it only when the user authorised compaction, then finish your turn. The optional handoff is "
            "saved exactly, per job, and verified by SHA-256 before use; resume:true requests ONE later "
            "continuation turn that carries it, started only if compaction really completed and at most "
            "60% of the context window is then in use. A thread whose goal is active is refused (pause the "
            "goal, then schedule). The job is cancelled by new user input (a new turn, where goals cannot be "
            "told), a goal that becomes active, or a stopped turn. A second call while a job is unfinished "
            "returns that job with alreadyScheduled:true; a handoff given with such a call is not saved (handoffIgnored:true). "
            "Codex's own compaction prompt is not changed. Nothing is retried automatically: check "
            "compaction_status later. " + STATES_TEXT),
    )
    @_tool_errors
    async def schedule_compaction(threadId: ThreadId, ctx: Context, handoff: Handoff | None = None) -> ScheduleResult:
        async def schedule(caller: Caller) -> dict[str, Any]:
            return await service.schedule(threadId, dict(handoff) if handoff is not None else None, caller=caller)

        action = "compact the conversation once the agent's current answer ends (its history is summarised for good)"
        return _fit(ScheduleResult, await act_as_caller(ctx, threadId, action, schedule))

    @server.tool(
        annotations=ToolAnnotations(title="Compaction job status", read_only_hint=True, open_world_hint=False),
        description=(
            "Read-only inspection of this thread's latest compaction job. Call it first (before probe and "
            "schedule) and again after scheduling or cancelling. Returns {state:'not_scheduled'} when "
            "there is none. " + STATES_TEXT + " A job whose worker died is reported as failed with "
            "errorCode worker_lost. Missing or stale token telemetry after compaction ends in skipped "
            "with resumeSkipReason."),
    )
    @_tool_errors
    async def compaction_status(threadId: ThreadId) -> StatusResult:
        return _fit(StatusResult, await anyio.to_thread.run_sync(service.status_reply, threadId))

    @server.tool(
        annotations=ToolAnnotations(title="Cancel a compaction job", read_only_hint=False, destructive_hint=True,
                                    idempotent_hint=True, open_world_hint=False),
        description=(
            "Cancels the pending dispatches of the exact job (threadId and jobId from schedule_compaction "
            "or compaction_status). A request the thread's owner already received cannot be retracted: the "
            "result then has outcomeMayBeUnknown=true. Check compaction_status afterwards."),
    )
    @_tool_errors
    async def cancel_compaction(
        threadId: ThreadId,
        jobId: Annotated[str, Field(description="The jobId returned by schedule_compaction.", min_length=1,
                                    max_length=200)],
        ctx: Context,
    ) -> CancelResult:
        async def cancel(caller: Caller) -> dict[str, Any]:
            return await anyio.to_thread.run_sync(functools.partial(service.cancel, threadId, jobId, caller=caller))

        return _fit(CancelResult, await act_as_caller(ctx, threadId, f"cancel compaction job {jobId}", cancel))

    @server.tool(
        # It writes the thread's own checkpoint, destroys nothing (the earlier one stays in the history), the same
        # content again changes nothing, and it reaches nothing outside: Codex runs it without asking.
        annotations=ToolAnnotations(title="Save a checkpoint", read_only_hint=False, destructive_hint=False,
                                    idempotent_hint=True, open_world_hint=False),
        description=(
            "Saves a checkpoint of this thread's task: the same handoff as schedule_compaction's (summary, "
            "preserve, discard, nextStep), with resume false or left out: a checkpoint never starts a turn. It "
            "costs no compaction and asks for none. After each later compaction of this thread that no rekall job "
            "delivers for (Codex's own auto-compaction, /compact), the plugin's SessionStart hook puts it, and "
            "your latest plan, into the next model request, once per compaction. Save one at the milestones of a "
            "long task, with the task, its constraints, the decisions taken and the next step; a new one replaces "
            "the earlier (which stays in the history), and the same content again changes nothing. The reply's "
            "hookWarning says when no trusted hook can deliver it. Pass your own thread only."),
    )
    @_tool_errors
    async def save_checkpoint(threadId: ThreadId, handoff: CheckpointHandoff, ctx: Context) -> CheckpointResult:
        from rekall.usecases.checkpoint import save_checkpoint as save

        async def checkpoint(caller: Caller) -> Any:
            return await save(threadId, dict(handoff), caller=caller)

        action = "save a checkpoint of this conversation's task (delivered after its later compactions)"
        return await act_as_caller(ctx, threadId, action, checkpoint)  # type: ignore[no-any-return]

    _refuse_unknown_arguments(server)
    return server


def _refuse_unknown_arguments(server: MCPServer) -> None:
    """Every tool refuses an argument it does not take, and its input schema says so
    (``additionalProperties: false``): the SDK's argument models ignore unknown names, so a
    misspelt ``threadid`` would be dropped without a word."""
    for tool in server._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        model.model_config["extra"] = "forbid"
        model.model_rebuild(force=True)
        tool.parameters = model.model_json_schema(by_alias=True)


TOOL_NAMES = ("probe_compaction", "schedule_compaction", "compaction_status", "cancel_compaction", "save_checkpoint")
