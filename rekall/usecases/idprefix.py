"""Short ids for people: any unique prefix of at least 8 characters names a job or thread.

``rekall history`` shows the first 8 characters of each id; the CLI accepts them (or any
longer prefix) wherever it looks up a job or thread that the store already holds. A prefix
is resolved only against the store's journals, never guessed: one that matches nothing is
unknown, and one that matches several ids is refused with the candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rekall.kernel.errors import InvalidInput
from rekall.kernel.ids import described, is_uuid
from rekall.store import JobStore, UnknownJob

MIN_PREFIX = 8
_SHAPE = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"  # a prefix must be the start of this shape


def _is_prefix(value: str) -> bool:
    return len(value) <= len(_SHAPE) and all(
        c == "-" if shape == "-" else c in "0123456789abcdef" for c, shape in zip(value, _SHAPE))
_SHOWN = 5


def _checked(text: str, field: str) -> str:
    value = text.lower()
    if len(value) < MIN_PREFIX or not _is_prefix(value):
        raise InvalidInput(f"{field} must be a UUID or a unique prefix of at least {MIN_PREFIX} characters of one; "
                           f"got {described(text)} that is neither", field=field, code="invalid_id",
                           hint="copy the id from `rekall history` or `rekall status`")
    return value


def _one(prefix: str, field: str, noun: str, candidates: Iterable[str], store: JobStore) -> str:
    matches = sorted({c for c in candidates if c.startswith(prefix)})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UnknownJob(f"no {noun} id starts with {prefix} in {store.root}",
                         hint="list jobs with `rekall history`; check REKALL_JOBS_DIR")
    listed = ", ".join(matches[:_SHOWN]) + (f" and {len(matches) - _SHOWN} more" if len(matches) > _SHOWN else "")
    raise InvalidInput(f"{field} prefix {prefix} is ambiguous: it matches {listed}", field=field,
                       code="ambiguous_id", hint="give more characters of the id")


# Each resolver checks the text before it opens the store, so that bad input creates nothing.


def resolve_thread(text: str, open_store: Callable[[], JobStore] = JobStore.open_reader) -> str:
    """A full thread id as given, or the one thread of the store whose id starts with ``text``."""
    if is_uuid(text):
        return text.lower()
    prefix = _checked(text, "threadId")
    store = open_store()
    return _one(prefix, "threadId", "thread", (thread for thread, _ in store.all_jobs()), store)


def resolve_job(text: str, open_store: Callable[[], JobStore] = JobStore.open_reader) -> tuple[str | None, str]:
    """``(thread, job)`` of the job ``text`` names; a full job id the store does not hold comes back
    with thread ``None`` (the caller reports it)."""
    if is_uuid(text):
        job = text.lower()
        prefix = None
    else:
        prefix = job = _checked(text, "jobId")
    store = open_store()
    pairs = store.all_jobs()
    if prefix is not None:
        job = _one(prefix, "jobId", "job", (j for _, j in pairs), store)
    return next((pair for pair in pairs if pair[1] == job), (None, job))


def resolve_job_or_thread(text: str, open_store: Callable[[], JobStore] = JobStore.open_reader) -> str:
    """For ``explain``: the full job or thread id that ``text`` (an id or a unique prefix) names."""
    if is_uuid(text):
        return text.lower()
    prefix = _checked(text, "jobId")
    store = open_store()
    pairs = store.all_jobs()
    return _one(prefix, "jobId", "job or thread", [j for _, j in pairs] + [t for t, _ in pairs], store)
