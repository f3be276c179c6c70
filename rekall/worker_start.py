"""The worker process's start: its arguments, its log and its first follow; then the reactor.

``rekall worker THREAD JOB [SCHEDULED]`` runs here. Told where schedule found the thread
(SCHEDULED), the worker follows it on the extension first, on a blocking socket, before it
imports the event loop and the reactor (:mod:`rekall.adapters.extension.early`): the owner sends the
thread's state while the rest of the worker loads. Everything this module imports before that
follow stays light; ``tests/test_startup_imports.py`` keeps it so.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rekall.errors import RekallError, UsageError, as_rekall_error
from rekall.owners import ScheduledOn

log = logging.getLogger("rekall.worker")


def main(argv: Sequence[str]) -> int:
    """``rekall worker THREAD JOB [SCHEDULED]``, started detached by schedule; not a verb people
    see. SCHEDULED is where schedule found the thread, as it journaled it (``ScheduledOn``). The
    arguments are read here, not by the CLI's argparse, whose import would delay the follow.
    Errors are said without a traceback: exit 2 for bad arguments or ids, 1 when the job fails."""
    try:
        if len(argv) not in (2, 3):
            raise UsageError(f"expected THREAD JOB [SCHEDULED], got {len(argv)} argument(s)",
                             hint="the worker is started by `rekall schedule`, not by hand")
        scheduled = ScheduledOn.from_argument(argv[2]) if len(argv) == 3 else None
        return run_worker(argv[0], argv[1], scheduled=scheduled)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the boundary: a clear error with a code, never a traceback
        error = as_rekall_error(exc)
        sys.stderr.write(f"rekall worker: {error.message}\n" + (f"  next: {error.hint}\n" if error.hint else ""))
        return error.exit_status


def run_worker(thread_id: str, job_id: str, env: Mapping[str, str] | None = None, *,
               scheduled: ScheduledOn | None = None) -> int:
    """Run the job's worker here: exit 0 on success, 1 otherwise."""
    from rekall.config import WorkerSettings
    from rekall.ids import job_id as valid_job, thread_id as valid_thread
    from rekall.store.paths import Layout, ensure_private_dir, resolve_jobs_dir

    env = os.environ if env is None else env
    thread_id, job_id = valid_thread(thread_id), valid_job(job_id)
    # The log's path alone, the jobs directory checked as the store checks it when it opens: the
    # store is loaded after the follow, and the follow's log lines belong in the job's log.
    jobs_dir = resolve_jobs_dir(env)
    ensure_private_dir(jobs_dir)
    configure_logging(Layout(jobs_dir).log(thread_id, job_id))
    log.info("worker %s starting for thread %s", job_id, thread_id)
    early: Any = None
    try:
        settings = WorkerSettings.from_env(env)
        early = _follow_early(thread_id, env, scheduled, settings.request_timeout_s)
        import asyncio

        from rekall import punctual
        from rekall.worker import Worker

        worker = Worker(None, thread_id, job_id, settings=settings, env=env, scheduled=scheduled, early=early)
        with asyncio.Runner(loop_factory=punctual.event_loop) as runner:
            final = runner.run(worker.run())
    except RekallError as exc:
        log.error("worker stopped: %s", exc)
        sys.stderr.write(f"rekall worker: {exc}\n")
        return 1
    finally:
        if hasattr(early, "close"):
            early.close()  # a no-op once the session took it over and closed it
    from rekall.states import SUCCESSFUL_END_STATES

    log.info("worker finished: %s", final.value)
    return 0 if final in SUCCESSFUL_END_STATES else 1


def _follow_early(thread_id: str, env: Mapping[str, str], scheduled: ScheduledOn | None,
                  request_timeout_s: float) -> Any:
    """The first follow on the extension, where the command line says the job is there; its
    error instead, to fail the job with once the worker has claimed it (never tried again)."""
    if scheduled is None or not scheduled.on_extension:
        return None
    from rekall.adapters.extension.early import follow_early

    try:
        return follow_early(thread_id, env, at_schedule=scheduled.settled, request_timeout_s=request_timeout_s)
    except Exception as exc:  # noqa: BLE001 - handled as a failed follow always was: once the job is claimed
        return exc


def configure_logging(path: os.PathLike[str] | str) -> None:
    from rekall.store.fsio import open_private_append

    fd = open_private_append(path)  # never through a symlink planted at the log's name
    handler = logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8", buffering=1))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("rekall")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
