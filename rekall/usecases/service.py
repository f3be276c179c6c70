"""The use cases shared by the CLI and the MCP tools: probe, schedule, status, cancel.

Each function validates its input first (a clear error naming the field), then does its
work through the store and the adapter. Results are plain JSON-able dicts with the
camelCase field names of the status file, so the CLI, the MCP tools and scripts all see
the same shape.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from rekall.kernel.caller import Caller
from rekall.kernel.settings import REQUEST_TIMEOUT_S, check_settings
from rekall.kernel.errors import RekallError
from rekall.kernel.ids import job_id as valid_job_id, thread_id as valid_thread_id
from rekall.states.status import ABSENT, JobStatus, wire
from rekall.store import JobStore

if TYPE_CHECKING:
    from rekall.adapters.contract import Platform
    from rekall.kernel.records import ThreadFacts

SCHEDULED_MESSAGE = (
    "Queued once. Finish your turn now: rekall waits for the thread to be idle, asks the thread's owner "
    "to compact, and confirms completion (acceptance is not completion). Keep this handoff in your "
    "summary; the saved copy is verified and reintroduced on continuation. Check compaction_status later; "
    "nothing is retried automatically."
)
HANDOFF_IGNORED_MESSAGE = (
    "A job is already scheduled for this thread and not finished, so this new handoff was NOT saved; the "
    "unfinished job keeps the handoff it was scheduled with. Wait for it to end (or cancel it), then schedule again."
)
CANCEL_MESSAGE = "Stops pending dispatches. Requests already sent cannot be retracted; check status."


class Refused(RekallError):
    """rekall declined to act because acting would be unsafe or pointless."""

    code = "refused"


class SpawnFailed(RekallError):
    """The job was created but its worker could not be started; the job is failed, the lock released."""

    code = "spawn_failed"


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


#: What probe and schedule load on first use, beyond each platform's modules: their imports wait until
#: then, so that status and the CLI start without them.
ACTING_MODULES = ("rekall.adapters.owners", "rekall.adapters.resume", "rekall.usecases.spawn", "psutil", "cattrs",
                  "cattrs.gen")


def load_acting_modules() -> None:
    """Load what probe and schedule load on first use, doing nothing else: for a server that loads it
    ahead of an agent's first acting call (``rekall.surfaces.mcp_light``'s warm-up)."""
    from importlib import import_module

    for name in ACTING_MODULES:
        import_module(name)
    from rekall.adapters.owners import all_platforms

    all_platforms(os.environ)  # opening a platform loads its modules, and reads and sends nothing


# --- probe -----------------------------------------------------------------------------


def public_schema_report(platform: Platform) -> dict[str, Any]:
    """The public app-server schema check of the binary behind ``platform`` (its own report)."""
    return platform.compatibility()


def headroom_now(tokens: int | None, window: int | None) -> dict[str, Any]:
    used = tokens / window if tokens is not None and window else None
    return {"contextTokens": tokens, "modelContextWindow": window,
            "usedFraction": None if used is None else round(used, 4)}


async def probe(thread_id: str, *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read-only preflight: reach the owner, read the thread, check compatibility. Never compacts."""
    import asyncio  # here, not at the top: `status` and `cancel` start without the event loop's imports

    from rekall.adapters.owners import find_owner
    from rekall.kernel.records import RUNTIME_NULL
    from rekall.states.rules import SYSTEM_ERROR_WAY_OUT

    env = _env(env)
    check_settings(env)
    thread_id = valid_thread_id(thread_id)
    try:
        platform, seen = await find_owner(thread_id, env, request_timeout_s=REQUEST_TIMEOUT_S.read(env))
    except RekallError as exc:
        raise _read_only(exc) from None
    mirror = seen.facts
    refuse_active_goal(thread_id, mirror)
    result: dict[str, Any] = {
        "threadId": thread_id,
        "platform": platform.name,
        "connected": True,
        "ownerId": seen.owner_id,
        **seen.details,
        "runtimeStatus": mirror.runtime_status or ("null" if mirror.busy_reason == RUNTIME_NULL else "unknown"),
        "idle": mirror.idle,
        "busyReason": mirror.busy_reason,
        "latestUserTurnStopped": mirror.interrupted,
        "completedCompactions": len(mirror.completed_compaction_ids),
        "compactionsInProgress": len(mirror.running_compaction_ids),
        "contextTokens": mirror.tokens,
        "modelContextWindow": mirror.window,
        "headroom": headroom_now(mirror.tokens, mirror.window),
    }
    if mirror.runtime_status == "systemError":
        result["runtimeHint"] = f"rekall compacts only once the thread is idle. {SYSTEM_ERROR_WAY_OUT}."
    runtime: dict[str, Any] = {"completionField": "completed",
                               "completedCompactionItems": len(mirror.completed_compaction_ids)}
    if mirror.layout_problem:
        runtime.update(status="incompatible", problem=mirror.layout_problem)
    else:  # layout_compatible: the layout is there, but no item has shown its completion flag yet
        runtime["status"] = "compatible" if mirror.completed_compaction_ids else "layout_compatible"
    try:
        schema = await asyncio.to_thread(public_schema_report, platform)  # a subprocess: off the loop
    except RekallError as exc:
        schema = {"status": "error", **exc.to_dict()}
    result["compatibility"] = {"runtime": runtime, "publicSchema": schema}
    result["extensionVersion"] = schema.get("extensionVersion")
    return _camel_keys(result)


def refuse_active_goal(thread_id: str, facts: ThreadFacts) -> None:
    """While its goal is active, Codex starts the thread's turns by itself: it would not stay idle for
    a compaction, and a continuation would run beside the goal's own turns."""
    if facts.goal_active:
        raise Refused(f"thread {thread_id} has an active goal: Codex starts its turns by itself, so it will not "
                      "stay idle for a compaction; no job was created", code="goal_active",
                      hint="pause the goal (`/goal pause` in the session), then schedule; resume the goal "
                           "(`/goal resume`) once the job has ended")


def _read_only(exc: RekallError) -> RekallError:
    """The probe's failure without "outcome unknown": it only reads, so nothing can have changed."""
    if "; outcome unknown" not in exc.message:
        return exc
    return RekallError(exc.message.replace("; outcome unknown", "") + "; the probe only reads, so nothing changed",
                       code=exc.code, hint="check that the thread's VS Code window is open and responsive, "
                                           "then probe again")


def _camel_keys(value: Any) -> Any:
    """One key style in what rekall prints: records from attrs classes arrive snake_case."""
    if isinstance(value, Mapping):
        return {_camel(str(k)): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel_keys(v) for v in value]
    return value


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# --- schedule --------------------------------------------------------------------------

Spawn = Callable[..., int]


async def schedule(
    thread_id: str,
    handoff: Any = None,
    *,
    env: Mapping[str, str] | None = None,
    spawn: Spawn | None = None,
    caller: Caller | None = None,
) -> dict[str, Any]:
    """Queue one compaction (and, with ``handoff.resume``, one continuation) for ``thread_id``.

    ``caller``: the thread an agent's call comes from (:mod:`rekall.kernel.caller`); anything but that
    thread is refused before anything is read, written or sent (when only the owner's view can
    say, after that read-only look and before anything is written). ``None``: a person's command."""
    import asyncio

    from rekall.adapters.owners import find_owner
    from rekall.adapters.resume import ResumeToken
    from rekall.store import process_start_time, validate_handoff

    env = _env(env)
    check_settings(env)  # a bad setting would kill the worker after "Queued"
    thread_id = valid_thread_id(thread_id)
    if handoff is not None:
        handoff = validate_handoff(handoff)
    if caller is not None and not caller.needs_owners_view:
        caller.require(thread_id, "schedule_compaction")  # before anything is read
    # The folders are checked now but created only for a job: a schedule refused below (a
    # mistyped CODEX_HOME finds no owner) leaves no jobs directory behind for doctor to praise.
    await asyncio.to_thread(JobStore.open_reader, env)

    platform, seen = await find_owner(thread_id, env, request_timeout_s=REQUEST_TIMEOUT_S.read(env))
    if caller is not None and caller.needs_owners_view:
        caller.require(thread_id, "schedule_compaction", seen.calls_in_progress)
    mirror = seen.facts
    refuse_active_goal(thread_id, mirror)
    if mirror.layout_problem:
        raise Refused(f"unsupported {platform.name} thread layout: {mirror.layout_problem}",
                      hint="run probe_compaction and check extension compatibility")
    if mirror.interrupted:
        raise Refused("the latest user turn was stopped or failed; no compaction scheduled",
                      hint="ask the user how to continue before scheduling")
    if mirror.running_compaction_ids:
        running = ", ".join(sorted(mirror.running_compaction_ids))
        raise Refused(f"the thread shows a compaction in progress ({running}); another now would compact it "
                      "twice", hint="wait until probe_compaction shows none in progress, then schedule again")
    fingerprint = mirror.boundary_fingerprint
    anchor = wire(JobStatus(contextTokensAtSchedule=mirror.tokens, modelContextWindowAtSchedule=mirror.window,
                            ownerIdAtSchedule=seen.owner_id, platform=platform.name,
                            generationAtSchedule=ABSENT if seen.settled is None else seen.settled))
    # The schema check runs a subprocess and the store's guard may wait for another process:
    # both run on worker threads, so that an MCP server answers other calls meanwhile.
    schema = await asyncio.to_thread(public_schema_report, platform)
    if schema.get("status") not in ("compatible", "not_checked"):
        raise Refused("the installed Codex app-server schema is not compatible with rekall",
                      hint="run `rekall doctor` for the failing checks")
    if "refusal" in schema:  # not checked, and not a release rekall was measured with
        raise Refused(schema["refusal"]["message"], hint=schema["refusal"]["hint"])

    store = await asyncio.to_thread(JobStore.open, env)
    created = await asyncio.to_thread(store.create_job, thread_id, handoff=handoff, user_fingerprint=fingerprint,
                                      extra=anchor)
    if created.already_scheduled:
        answer = attrs.evolve(created.status, alreadyScheduled=True)
        if handoff is not None:  # never dropped silently: the unfinished job keeps its own handoff
            answer = attrs.evolve(answer, handoffIgnored=True, message=HANDOFF_IGNORED_MESSAGE)
        return wire(answer)
    try:
        # What was just journaled goes on the worker's command line too: it follows the thread
        # before it loads the store, and its claim checks this against the journal.
        pid = (spawn or _spawn_default)(thread_id, created.job_id,
                                        log_path=store.log_path(thread_id, created.job_id), env=env,
                                        scheduled=ResumeToken.recorded(created.status))
    except OSError as exc:  # e.g. no interpreter, a symlink at the log's name, no resources
        cause = f"the worker could not be started: {exc.strerror or exc}"
        store.fail_unstarted(thread_id, created.job_id, cause)
        raise SpawnFailed(f"job {created.job_id} failed: {cause}; its lock was released",
                          hint=f"fix the cause, then schedule again; `rekall explain {created.job_id}` "
                               "shows the job") from None
    # False when the worker already finished and released the lock: nothing left to name.
    await asyncio.to_thread(store.set_lock_holder, thread_id, created.job_id, pid, process_start_time(pid))
    return wire(attrs.evolve(created.status, pid=pid, alreadyScheduled=False, message=SCHEDULED_MESSAGE,
                             handoff=ABSENT if handoff is None else handoff))


def _spawn_default(thread_id: str, job_id: str, **kwargs: Any) -> int:
    from rekall.usecases.spawn import spawn_worker

    return spawn_worker(thread_id, job_id, **kwargs)


# --- status and cancel -----------------------------------------------------------------


def status_reply(thread_id: str, *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The thread's latest job; a job whose worker died is reported as ``worker_lost``."""
    thread_id = valid_thread_id(thread_id)
    store = JobStore.open_reader(_env(env))
    store.reap_if_dead(thread_id)
    return with_checkpoint(wire(_or_node_job(store, store.read_status(thread_id))), store)


def with_checkpoint(status: dict[str, Any], store: JobStore) -> dict[str, Any]:
    """``status`` with the thread's checkpoint (``checkpoint``: saved when, bytes, each delivery), if it has one."""
    from rekall.store.checkpoint import summary

    shown = summary(store.root, str(status["threadId"]))
    return status if shown is None else {**status, "checkpoint": shown}


def _or_node_job(store: JobStore, status: JobStatus) -> JobStatus:
    """Without a rekall job, the thread's job in the Node version's directory, if any (marked)."""
    if status.state != "not_scheduled":
        return status
    return store.node_status(str(status.threadId)) or status


def status_reply_with_trail(thread_id: str, *,
                            env: Mapping[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The status plus every state the job has passed through, from one read of its journal."""
    thread_id = valid_thread_id(thread_id)
    store = JobStore.open_reader(_env(env))
    store.reap_if_dead(thread_id)
    job = store.latest(thread_id)
    if job is None:
        return wire(store.read_status(thread_id)), ["not_scheduled"]
    return wire(store.status_of(job)), job.states_taken


async def thread_title(thread_id: str, *, env: Mapping[str, str] | None = None) -> str | None:
    """How people know the thread (its title, else its first words) as its owner shows them, read-only;
    ``None`` when no owner is found or it shows neither."""
    from rekall.adapters.owners import find_owner

    env = _env(env)
    try:
        _, seen = await find_owner(valid_thread_id(thread_id), env, request_timeout_s=REQUEST_TIMEOUT_S.read(env))
    except RekallError:
        return None
    return seen.title


def cancel(thread_id: str, job_id: str, *, env: Mapping[str, str] | None = None,
           caller: Caller | None = None) -> dict[str, Any]:
    """Ask the job's worker to stop before its next dispatch (``caller`` as for :func:`schedule`)."""
    thread_id, job_id = valid_thread_id(thread_id), valid_job_id(job_id)
    if caller is not None:
        caller.require(thread_id, "cancel_compaction")
    store = JobStore.open_reader(_env(env))  # the marker goes next to an existing job, never into a new folder
    store.reap_if_dead(thread_id)
    current = store.read_status(thread_id)
    if current.jobId != job_id:
        raise RekallError(f"job {job_id} is not the current job of thread {thread_id}",
                          code="job_identity_mismatch", hint="inspect the thread with compaction_status")
    from rekall.states import TERMINAL_STATES, JobState
    from rekall.states.rules import outcome_may_be_unknown

    state = JobState(current.state)
    if state in TERMINAL_STATES:
        return wire(attrs.evolve(current, cancellationRequested=False,
                                 message=f"the job already ended as {state.value}; nothing to cancel"))
    asked = store.request_cancel(thread_id, job_id)
    if state is not JobState.SCHEDULED:
        # Past `scheduled` the worker has its handler installed; before that it finds the
        # marker itself when it starts.
        _signal_worker(store, thread_id, job_id)
    # A request sent before the worker stops cannot be retracted: the outcome rule says whether one may be out.
    # What became of the handoff is said once, in handoffDelivery and handoffDeliveryNote.
    return wire(JobStatus(threadId=thread_id, jobId=job_id, state=state.value, cancellationRequested=True,
                          outcomeMayBeUnknown=outcome_may_be_unknown(state, {}), handoffDelivery=asked.handoffDelivery,
                          handoffDeliveryNote=asked.handoffDeliveryNote, message=CANCEL_MESSAGE))


def _signal_worker(store: JobStore, thread_id: str, job_id: str) -> None:
    """Wake the worker at once; it also finds the marker on its own within a second."""
    if sys.platform == "win32":
        return
    holder = store.lock_holder(thread_id)
    if holder is None or holder.job_id != job_id or not store.is_holder_alive(holder):
        return
    try:
        os.kill(holder.pid, signal.SIGUSR1)
    except OSError:
        pass  # gone meanwhile: status will report it
