"""The Codex releases rekall supports on the shared app-server: a declared range, from measurements.

From :data:`OLDEST` to :data:`NEWEST` every stable npm release of ``@openai/codex`` passes the
platform's schema checks, and the three CI tests (oldest, middle, newest) pass whole jobs on their
real daemon (``bench/codex_releases.py``; docs/app-server.md has the table). Below :data:`OLDEST`
(measured when the range was chosen) the daemon needs the standalone installer (0.151 to 0.155)
or serves ``thread/turns/list`` only behind the experimental API (0.150 and older). The server's
own version decides, right after ``initialize`` and before any thread request:

* older than :data:`OLDEST`: refused, naming the version and the range;
* from :data:`OLDEST` to :data:`NEWEST` (stable releases): supported;
* newer, a pre-release, or a version the server does not state: not measured, so only a
  schema check that passed lets ``schedule`` go ahead (a schema that could not be checked
  refuses).
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from rekall.kernel.errors import CodexError

OLDEST = "0.156.0"
NEWEST = "0.171.0"
#: ``X.Y.Z`` with an optional pre-release tail (``0.172.0-alpha.3``); npm's stable releases have none.
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$")

Standing = Literal["supported", "older", "unmeasured", "unknown"]


def _parsed(version: str | None) -> tuple[tuple[int, int, int], bool] | None:
    """``((major, minor, patch), is a pre-release)``, or ``None`` for anything else."""
    match = _VERSION.match(version or "")
    return None if match is None else ((int(match[1]), int(match[2]), int(match[3])), match[4] is not None)


class Release(NamedTuple):
    """A server's version and where it stands against the declared range."""

    version: str | None
    standing: Standing

    @classmethod
    def of(cls, version: str | None) -> Release:
        parsed = _parsed(version)
        if parsed is None:
            return cls(version, "unknown")
        numbers, prerelease = parsed
        # A pre-release comes before its release: 0.156.0-alpha.2 is older than 0.156.0.
        if (numbers, not prerelease) < (_OLDEST, True):
            return cls(version, "older")
        if numbers > _NEWEST or prerelease:
            return cls(version, "unmeasured")
        return cls(version, "supported")

    @property
    def words(self) -> str:
        """The standing in a sentence that names the version and the range."""
        if self.standing == "supported":
            return f"Codex {self.version} is in the range rekall supports ({RANGE})"
        if self.standing == "older":
            return f"Codex {self.version} is older than rekall supports ({OLDEST} or newer); update Codex"
        if self.standing == "unmeasured":
            return f"Codex {self.version} is not a release rekall was measured with ({RANGE})"
        shown = "" if self.version is None else f" ({self.version!r})"
        return f"the shared app-server did not state a Codex version rekall can read{shown}; rekall was measured " \
               f"with {RANGE}"

    def to_json(self) -> dict[str, str | None]:
        return {"version": self.version, "standing": self.standing, "supported": RANGE}


RANGE = f"{OLDEST} to {NEWEST}"
_OLDEST, _NEWEST = (tuple(int(part) for part in bound.split(".")) for bound in (OLDEST, NEWEST))


class UnsupportedCodex(CodexError):
    """The shared app-server runs a Codex release older than the range rekall supports."""

    code = "codex_unsupported"

    def __init__(self, release: Release) -> None:
        super().__init__(release.words, hint="update Codex, then restart the shared app-server "
                                             "(`codex app-server daemon restart`)")
        self.release = release


def refuse_older(version: str | None) -> Release:
    """The server's release, or :class:`UnsupportedCodex` when it is older than the range."""
    release = Release.of(version)
    if release.standing == "older":
        raise UnsupportedCodex(release)
    return release


__all__ = ["NEWEST", "OLDEST", "RANGE", "Release", "UnsupportedCodex", "refuse_older"]
