"""Finding a thread's owner: which platform serves the thread, asked of each, never guessed.

Every platform in the registry (:mod:`rekall.adapters.registry`) is asked, read-only and at once:
a VS Code extension window (its owner discovery), the shared app-server (its ``thread/loaded/list``
and ``thread/read``). Exactly one claiming the thread decides; more than one claiming it, or none,
is reported as such, with what each said, in each platform's own words. ``schedule`` records the
platform it found in the job, and the worker follows the thread on that platform only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rekall.kernel.errors import RekallError
from rekall.kernel.sandbox import CODE as SANDBOXED

if TYPE_CHECKING:
    from rekall.adapters.contract import Platform, ThreadSnapshot
    from rekall.adapters.resume import ResumeToken


class OwnerUnknown(RekallError):
    """The thread's owner cannot be found: no platform, or more than one, claims the thread, or the
    job names a platform this rekall does not know."""

    code = "owner_unknown"


def platform_named(name: str | None, env: Mapping[str, str] | None = None, *,
                   resume: ResumeToken | None = None) -> Platform:
    """The platform a job recorded (a job that names none is the extension's: see
    :data:`rekall.adapters.registry.UNNAMED`), resuming from ``resume`` when given."""
    from rekall.adapters.registry import package_named

    env = os.environ if env is None else env
    package = package_named(name)
    if package is None:
        raise OwnerUnknown(f"the job names platform {name!r}, which this rekall does not know",
                           hint="update rekall, or inspect the job with `rekall explain`")
    platform: Platform = package.open_platform(env, resume)
    return platform


def all_platforms(env: Mapping[str, str] | None = None) -> list[Platform]:
    from rekall.adapters.registry import packages

    env = os.environ if env is None else env
    return [package.open_platform(env, None) for package in packages()]


async def find_owner(thread_id: str, env: Mapping[str, str] | None = None, *,
                     request_timeout_s: float) -> tuple[Platform, ThreadSnapshot]:
    """The one platform that has ``thread_id``, with its read-only snapshot of the thread (whose
    ``owner_id`` names the owner where the platform has one)."""
    import asyncio

    from rekall.adapters.contract import ThreadSnapshot

    platforms = all_platforms(env)
    answers = await asyncio.gather(*(p.observe(thread_id, request_timeout_s=request_timeout_s) for p in platforms),
                                   return_exceptions=True)
    for answer in answers:
        if isinstance(answer, BaseException) and not isinstance(answer, RekallError):
            raise answer
    claims = [(p, a) for p, a in zip(platforms, answers, strict=True) if isinstance(a, ThreadSnapshot)]
    if len(claims) == 1:
        return claims[0]
    if claims:
        titles = [p.title for p, _ in claims]
        who = (f"both {titles[0]} and {titles[1]}" if len(titles) == 2
               else f"{', '.join(titles[:-1])} and {titles[-1]} all")
        raise OwnerUnknown(f"{who} claim thread {thread_id}; rekall will not guess which one to act through",
                           hint="close the thread in one of them, then try again")
    refused = [a for a in answers if isinstance(a, RekallError) and a.code == SANDBOXED]
    if refused:  # nothing in Codex's sandbox reaches any owner: that, not where each one is, is the news
        raise refused[0]
    said = [(p, a, p.absent(a)) for p, a in zip(platforms, answers, strict=True) if isinstance(a, RekallError)]
    absent = [note for _, _, note in said if note is not None]
    present = [(p, error) for p, error, note in said if note is None]
    if absent and len(present) == 1:
        # The others are not there at all: the one platform's own answer, with where else a thread can live.
        platform, error = present[0]
        raise platform.with_notes(error, absent) from None
    # The hint is the last platform's (the registry lists the most general last: any terminal
    # session can be served by the shared app-server).
    last, last_error, _ = said[-1]
    raise OwnerUnknown(f"no platform serves thread {thread_id}: "
                       + "; ".join(f"{p.title}: {error.message}" for p, error, _ in said),
                       hint=last_error.hint or last.serving_hint)


__all__ = ["OwnerUnknown", "all_platforms", "find_owner", "platform_named"]
