"""``rekall prune``: remove the files of old, ended jobs. Nothing is ever removed otherwise.

A job is removed when it has ended (a terminal state in its journal) and it matches every
rule given: ``older_than`` (its end is at least that long ago) and ``keep`` (it is not
among the thread's ``keep`` newest jobs). Never removed: an unfinished job, a job named by
a lock (a dead worker's lock is recorded and cleared first, so what remains may be live),
a journal that cannot be read, or anything outside rekall's own jobs directory.

A thread's standing checkpoint (:mod:`rekall.store.checkpoint`) is removed, all its files, when its
last save or clear is at least ``older_than`` ago.

A job's files go log, cancel marker, handoff, then journal last, so an interrupted prune
leaves, at worst, a journal without its handoff: still a complete record of the job. A
thread's status file goes too once none of its jobs remains.
"""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from rekall.kernel.errors import InvalidInput, StoreError
from rekall.store.fsio import remove_files
from rekall.store.jobstore import JobStore
from rekall.store.replay import Replay, ended_at

log = logging.getLogger("rekall.store")


def check_rules(older_than_days: Any, keep: Any) -> tuple[timedelta | None, int | None]:
    """The validated rules; at least one is required, so that a bare ``prune`` removes nothing by surprise."""
    if older_than_days is None and keep is None:
        raise InvalidInput("prune needs --older-than DAYS, --keep N, or both", field="--older-than",
                           hint="for example `rekall prune --older-than 30 --dry-run` to see what would go")
    age = None
    if older_than_days is not None:
        try:
            days = float(older_than_days)
        except (TypeError, ValueError):
            days = math.nan
        if not math.isfinite(days) or days < 0:
            raise InvalidInput(f"--older-than must be a number of days, 0 or more; got {older_than_days!r:.40}",
                               field="--older-than", hint="for example --older-than 30")
        age = timedelta(days=days)
    count = None
    if keep is not None:
        try:
            count = int(str(keep), 10)
        except ValueError:
            count = -1
        if count < 0:
            raise InvalidInput(f"--keep must be a whole number, 0 or more; got {keep!r:.40}", field="--keep",
                               hint="for example --keep 5 (the newest five jobs of each thread stay)")
    return age, count


def prune(store: JobStore, *, older_than: timedelta | None, keep: int | None, dry_run: bool) -> dict[str, Any]:
    """Remove (or with ``dry_run`` only list) the jobs the rules select; returns what it did."""
    now = store.clock.now().wall
    if not dry_run:
        store.reap_all()  # a dead worker's job becomes ended and its lock goes before we judge
    by_thread: dict[str, list[Replay]] = defaultdict(list)
    skipped: list[dict[str, Any]] = []
    for thread, job in store.all_jobs():
        try:
            by_thread[thread].append(store.load(thread, job))
        except StoreError as exc:
            skipped.append({"threadId": thread, "jobId": job, "reason": f"unreadable journal: {exc.message}"})
    chosen = []
    for thread, jobs in sorted(by_thread.items()):
        jobs.sort(key=lambda j: (j.job_number, j.created_at))
        try:
            holder = store.lock_holder(thread)
        except StoreError as exc:
            skipped.append({"threadId": thread, "jobId": None, "reason": f"unreadable lock: {exc.message}"})
            continue
        newest = {j.job_id for j in jobs[len(jobs) - keep:]} if keep else set()
        for job in jobs:
            if not job.state.terminal or (holder is not None and holder.job_id == job.job_id):
                continue  # never an unfinished job or one a lock names
            ended = ended_at(job.view.fields)
            if older_than is not None and (ended is None or now - datetime.fromisoformat(ended) < older_than):
                continue
            if keep is not None and job.job_id in newest:
                continue
            chosen.append((job, ended))
    if dry_run or not chosen:
        removed = [_remove(store, job, ended, dry_run=True) for job, ended in chosen]
    else:
        with store.guarded():  # a scheduler numbering the thread's jobs never sees half a prune
            removed = [_remove(store, job, ended, dry_run=False) for job, ended in chosen]
            for thread in sorted({job.thread_id for job, _ in chosen}):
                if not store.paths.journals(thread=thread):
                    _unlink(store.paths.status_file(thread))
            if removed:
                store.fs.fsync_dir(store.root)
    kept = sum(len(jobs) for jobs in by_thread.values()) - len(removed)
    checkpoints = _prune_checkpoints(store, older_than, now, dry_run)
    return {"dryRun": dry_run, "jobsDir": str(store.root), "prunedJobs": len(removed),
            "freedBytes": sum(r["bytes"] for r in removed + checkpoints), "keptJobs": kept, "pruned": removed,
            "prunedCheckpoints": checkpoints, "skipped": skipped}


def _prune_checkpoints(store: JobStore, older_than: timedelta | None, now: datetime,
                       dry_run: bool) -> list[dict[str, Any]]:
    """Each thread's checkpoint (its history, records and claims) whose last save or clear is at
    least ``older_than`` ago; none without that rule (``--keep`` counts jobs)."""
    from rekall.store.checkpoint import history, remove

    if older_than is None:
        return []
    removed = []
    for thread in store.paths.checkpoint_threads():
        events = history(store.root, thread)
        last = events[-1]["at"] if events else None
        if last is not None and now - datetime.fromisoformat(last.replace("Z", "+00:00")) >= older_than:
            removed.append({**remove(store.root, thread, dry_run=dry_run), "lastEventAt": last})
    return removed


def _remove(store: JobStore, job: Replay, ended: str | None, dry_run: bool) -> dict[str, Any]:
    paths, thread, job_id = store.paths, job.thread_id, job.job_id
    files, size = remove_files([
        paths.log(thread, job_id), paths.cancel(thread, job_id), paths.handoff(thread, job_id),
        paths.journal(thread, job_id),  # the journal then: it is the record of the job
        paths.delivery(thread, job_id)], dry_run=dry_run)  # its claim after it: no hook delivers for it meanwhile
    return {"threadId": thread, "jobId": job_id, "state": job.state.value, "endedAt": ended, "files": files,
            "bytes": size}


def _unlink(path: os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
