"""Which platform serves a thread: asked of each, never guessed.

Two platforms can hold a Codex thread: a VS Code extension window (its owner discovery) and the
shared app-server (its ``thread/loaded/list`` and ``thread/read``). Both are asked, read-only and
at once. Exactly one claiming the thread decides; both claiming it, or neither, is reported as
such, with what each said. ``schedule`` records the platform it found in the job, and the worker
follows the thread on that platform only.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from rekall.errors import RekallError, UsageError

if TYPE_CHECKING:
    from rekall.platform import Platform, ThreadSnapshot
    from rekall.states.status import JobStatus

EXTENSION = "extension-ipc"
APP_SERVER = "app-server"


class OwnerUnknown(RekallError):
    """No platform, or more than one, claims the thread."""

    code = "owner_unknown"


def platform_named(name: str | None, env: Mapping[str, str] | None = None, *, settled: Any = None,
                   early: Any = None) -> Platform:
    """The platform a job recorded. Jobs scheduled before platforms were recorded are the extension's:
    it was the only one. ``settled``: the job's record of the protocol generation schedule settled
    (the extension reuses it for the same owner on the same router; see ``choice.Settled``).
    ``early``: the worker's first follow on the extension (``rekall.adapters.extension.early``), or its error."""
    env = os.environ if env is None else env
    if name in (None, EXTENSION):
        from rekall.adapters.extension.choice import Settled
        from rekall.adapters.extension.platform import ExtensionIpc

        return ExtensionIpc(env, settled=Settled.from_json(settled), early=early)
    if name == APP_SERVER:
        from rekall.adapters.app_server.platform import SharedAppServerPlatform

        return SharedAppServerPlatform(env)
    raise OwnerUnknown(f"the job names platform {name!r}, which this rekall does not know",
                       hint="update rekall, or inspect the job with `rekall explain`")


class ScheduledOn(NamedTuple):
    """Where ``schedule`` found the thread, as the job's journal records it: the platform's name
    (``platform``) and the protocol generation it settled (``generationAtSchedule``, a
    ``choice.Settled`` record: a generation name, the owner's client id, the router's path and
    socket identity, the reason; nothing secret). ``schedule`` passes it on the worker's command
    line so that the worker can follow the thread before it loads the store; the worker's claim
    checks it against the journal, which decides."""

    platform: str | None
    settled: Mapping[str, Any] | None

    @classmethod
    def recorded(cls, status: JobStatus) -> ScheduledOn:
        """What the job's status (derived from its journal) says."""
        from rekall.states.status import known

        return cls(known(status.platform), known(status.generationAtSchedule))

    def to_argument(self) -> str:
        return json.dumps({"platform": self.platform, "generationAtSchedule": self.settled}, separators=(",", ":"))

    @classmethod
    def from_argument(cls, text: str) -> ScheduledOn:
        """The worker's third argument, as :meth:`to_argument` wrote it; a clear usage error otherwise."""
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not (isinstance(data, dict) and data.keys() == {"platform", "generationAtSchedule"}
                and (data["platform"] is None or isinstance(data["platform"], str))
                and (data["generationAtSchedule"] is None or isinstance(data["generationAtSchedule"], dict))):
            raise UsageError(f"SCHEDULED must be the JSON object schedule writes, with platform and "
                             f"generationAtSchedule; got {text[:80]!r}",
                             hint="the worker is started by `rekall schedule`, not by hand")
        return cls(data["platform"], data["generationAtSchedule"])

    @property
    def on_extension(self) -> bool:
        return self.platform in (None, EXTENSION)

    def platform_for(self, env: Mapping[str, str] | None = None, *, early: Any = None) -> Platform:
        return platform_named(self.platform, env, settled=self.settled, early=early)


def all_platforms(env: Mapping[str, str] | None = None) -> list[Platform]:
    return [platform_named(EXTENSION, env), platform_named(APP_SERVER, env)]


async def find_owner(thread_id: str, env: Mapping[str, str] | None = None, *,
                     request_timeout_s: float) -> tuple[Platform, ThreadSnapshot]:
    """The one platform that has ``thread_id``, with its read-only snapshot of the thread."""
    import asyncio

    from rekall.adapters.app_server.platform import SERVABLE_SESSION
    from rekall.platform import ThreadSnapshot
    from rekall.transports.base import EndpointMissing

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
        raise OwnerUnknown(f"both the VS Code extension and the shared app-server claim thread {thread_id}; "
                           "rekall will not guess which one to act through",
                           hint="close the thread in one of them, then try again")
    ext_error, app_error = answers
    assert isinstance(ext_error, RekallError) and isinstance(app_error, RekallError)
    if isinstance(app_error, EndpointMissing):
        # No shared app-server at all: the extension's own answer, plus where else a thread can live.
        said = copy.copy(ext_error)  # same type and code: callers handle it as before
        said.message = f"{ext_error.message}; no shared app-server is running either"
        said.hint = f"{ext_error.hint or 'see the message'}; for a terminal session: {SERVABLE_SESSION}"
        said.args = (said.message,)
        raise said from None
    raise OwnerUnknown(f"no platform serves thread {thread_id}: the VS Code extension: {ext_error.message}; "
                       f"the shared app-server: {app_error.message}",
                       hint=app_error.hint or SERVABLE_SESSION)


__all__ = ["APP_SERVER", "EXTENSION", "OwnerUnknown", "ScheduledOn", "all_platforms", "find_owner", "platform_named"]
