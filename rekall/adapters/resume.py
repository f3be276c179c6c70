"""What the worker resumes a job from: where ``schedule`` found the thread, as a token.

The token names the platform (``platform``) and carries that platform's own record of where the
thread was (``settled``: opaque to everyone else; the extension keeps the protocol generation it
settled there, with the owner's client id and the router's path and socket identity; nothing
secret). ``schedule`` journals it (the status shows the record as ``generationAtSchedule``) and
passes it on the worker's command line, so that the worker can follow the thread before it loads
the store; the worker's claim checks it against the journal, which decides. A platform that can
follow before the event loop exists adds its first follow to the token (``first_follow``), and goes
on from it when the worker opens the platform.

This module imports nothing heavy: the worker reads its command line with it before its first follow
(:func:`rekall.worker.start.with_first_follow` adds it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from rekall.kernel.errors import UsageError

if TYPE_CHECKING:
    from rekall.states.status import JobStatus


class ResumeToken(NamedTuple):
    """Where schedule found a thread (see the module), and the first follow made from it."""

    platform: str | None
    #: The platform's own record, as journaled (``None``: it recorded nothing).
    settled: Mapping[str, Any] | None
    #: The worker's first follow made from this token before the event loop, or why it failed
    #: (``None``: not made). Never on the command line, never compared.
    first_follow: Any = None

    @classmethod
    def recorded(cls, status: JobStatus) -> ResumeToken:
        """What the job's status (derived from its journal) says."""
        from rekall.states.status import known

        return cls(known(status.platform), known(status.generationAtSchedule))

    def says_same_as(self, other: ResumeToken) -> bool:
        return (self.platform, self.settled) == (other.platform, other.settled)

    def to_argument(self) -> str:
        return json.dumps({"platform": self.platform, "generationAtSchedule": self.settled}, separators=(",", ":"))

    @classmethod
    def from_argument(cls, text: str) -> ResumeToken:
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

    def close(self) -> None:
        """Close the first follow's connection (a no-op once the platform took it over and closed it)."""
        if hasattr(self.first_follow, "close"):
            self.first_follow.close()


__all__ = ["ResumeToken"]
