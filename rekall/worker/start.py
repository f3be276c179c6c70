"""The worker process's start: its arguments, its log and its first follow; then the reactor.

``rekall worker THREAD JOB [SCHEDULED]`` runs here. Told where schedule found the thread
(SCHEDULED, a :class:`~rekall.adapters.resume.ResumeToken`), the worker follows it first where its
platform can do so before the event loop and the reactor are imported (the extension, on a
blocking socket: :mod:`rekall.adapters.extension.first_follow`): the owner sends the thread's state while
the rest of the worker loads. Everything this module imports before that
follow stays light; ``tests/test_startup_imports.py`` keeps it so.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence

from rekall.kernel.errors import RekallError, UsageError, as_rekall_error
from rekall.adapters.resume import ResumeToken

log = logging.getLogger("rekall.worker")


def main(argv: Sequence[str]) -> int:
    """``rekall worker THREAD JOB [SCHEDULED]``, started detached by schedule; not a verb people
    see. SCHEDULED is where schedule found the thread, as it journaled it (``ResumeToken``). The
    arguments are read here, not by the CLI's argparse, whose import would delay the follow.
    Errors are said without a traceback: exit 2 for bad arguments or ids, 1 when the job fails."""
    try:
        if len(argv) not in (2, 3):
            raise UsageError(f"expected THREAD JOB [SCHEDULED], got {len(argv)} argument(s)",
                             hint="the worker is started by `rekall schedule`, not by hand")
        scheduled = ResumeToken.from_argument(argv[2]) if len(argv) == 3 else None
        return run_worker(argv[0], argv[1], scheduled=scheduled)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the boundary: a clear error with a code, never a traceback
        error = as_rekall_error(exc)
        sys.stderr.write(f"rekall worker: {error.message}\n" + (f"  next: {error.hint}\n" if error.hint else ""))
        return error.exit_status


def run_worker(thread_id: str, job_id: str, env: Mapping[str, str] | None = None, *,
               scheduled: ResumeToken | None = None) -> int:
    """Run the job's worker here: exit 0 on success, 1 otherwise."""
    from rekall.kernel.settings import WorkerSettings
    from rekall.kernel.ids import job_id as valid_job, thread_id as valid_thread
    from rekall.store.paths import JobPaths, ensure_private_dir, resolve_jobs_dir

    env = os.environ if env is None else env
    thread_id, job_id = valid_thread(thread_id), valid_job(job_id)
    # The log's path alone, the jobs directory checked as the store checks it when it opens: the
    # store is loaded after the follow, and the follow's log lines belong in the job's log.
    jobs_dir = resolve_jobs_dir(env)
    ensure_private_dir(jobs_dir)
    configure_logging(JobPaths(jobs_dir).log(thread_id, job_id))
    log.info("worker %s starting for thread %s", job_id, thread_id)
    try:
        settings = WorkerSettings.from_env(env)
        if scheduled is not None:
            scheduled = with_first_follow(scheduled, thread_id, env, settings.request_timeout_s)
        import asyncio

        from rekall.worker import timers
        from rekall.worker.reactor import Worker

        worker = Worker(None, thread_id, job_id, settings=settings, env=env, scheduled=scheduled)
        with asyncio.Runner(loop_factory=timers.event_loop) as runner:
            final = runner.run(worker.run())
    except RekallError as exc:
        log.error("worker stopped: %s", exc)
        sys.stderr.write(f"rekall worker: {exc}\n")
        return 1
    finally:
        if scheduled is not None:
            scheduled.close()  # a no-op once the platform took its first follow over and closed it
    from rekall.states import SUCCESSFUL_END_STATES

    log.info("worker finished: %s", final.value)
    return 0 if final in SUCCESSFUL_END_STATES else 1


def with_first_follow(scheduled: ResumeToken, thread_id: str, env: Mapping[str, str],
                   request_timeout_s: float) -> ResumeToken:
    """The token with its platform's first follow made now, where the platform makes one before
    the event loop (:mod:`rekall.adapters.registry`); its error instead, to fail the job with once
    the worker has claimed it (never tried again)."""
    from rekall.adapters.registry import package_named

    follow = getattr(package_named(scheduled.platform), "follow_first", None)
    if follow is None:
        return scheduled
    try:
        made = follow(thread_id, env, scheduled, request_timeout_s=request_timeout_s)
    except Exception as exc:  # noqa: BLE001 - handled as a failed follow always was: once the job is claimed
        made = exc
    return scheduled._replace(first_follow=made)


def configure_logging(path: os.PathLike[str] | str) -> None:
    from rekall.store.fsio import open_private_append

    fd = open_private_append(path)  # never through a symlink planted at the log's name
    handler = logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8", buffering=1))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("rekall")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
