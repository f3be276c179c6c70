"""A worker that still exists past its deadline: stopped (``SIGSTOP``, a debugger) or running late.

A live worker ends its own job at its deadline (``timed_out``). A stopped one cannot: it runs
nothing until it is continued, so the job would read as healthy forever. Readers (``status``)
and ``doctor`` say so from the deadline the worker journaled when it took the job
(``workerDeadlineAt``; older workers did not record one, and nothing is said for them). A short
grace keeps a healthy worker's own ``timed_out`` from being raced.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rekall.states.status import JobStatus, known, read, wire
from rekall.store.processes import Liveness, process_stopped

if TYPE_CHECKING:
    from rekall.store.parts import StoreParts
    from rekall.store.replay import Replay

#: How long past its deadline a running worker may take to journal ``timed_out`` before it is late.
GRACE_S = 10.0


def overdue_since(fields: dict[str, Any], now: datetime) -> datetime | None:
    """The deadline the worker journaled, if it has passed (with the grace); else ``None``."""
    at = known(read(fields).workerDeadlineAt)
    if not isinstance(at, str):
        return None
    try:
        deadline = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return None
    return deadline if now - deadline > timedelta(seconds=GRACE_S) else None


def worker_problem(pid: int, deadline: datetime, stopped: bool | None) -> str:
    """The sentence for a worker past its deadline at ``deadline``."""
    passed = deadline.strftime("%Y-%m-%d %H:%M:%S UTC")
    if stopped:
        return (f"the worker (pid {pid}) is stopped (SIGSTOP, job control or a debugger) and its deadline passed at "
                f"{passed}: it cannot end the job. `kill -CONT {pid}` lets it record timed_out at once; "
                f"`kill {pid}` ends it, and the next `rekall status` records the job as worker_lost")
    return (f"the worker (pid {pid}) still runs past its deadline ({passed}) without ending the job; look at its "
            f"log, or `kill {pid}`: the next `rekall status` then records the job as worker_lost")


def overdue_worker(store: StoreParts, job: Replay) -> dict[str, Any]:
    """``workerProblem`` for a job whose live worker is past its deadline; ``{}`` otherwise."""
    if job.state.terminal:
        return {}
    fields = job.view.fields
    deadline = overdue_since(fields, store.clock.now().wall)
    pid = known(read(fields).pid)
    if deadline is None or not isinstance(pid, int) or store.lock_liveness(job.thread_id) is not Liveness.ALIVE:
        return {}
    return wire(JobStatus(workerProblem=worker_problem(pid, deadline, process_stopped(pid))))
