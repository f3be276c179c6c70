"""The extension IPC's protocol generations, as data: one record per generation.

Builds of the Codex extension differ in a few facts only (``extension-generations.md`` §1,
§2, §4): the base version of each method in the build's table, whether owner discovery
exists, how follower requests are routed, and the shape of the start-turn request. A
:class:`Generation` holds exactly those; :mod:`rekall.adapters.extension.ipc` is the one piece of code
that speaks any of them. Adding a generation is a record here plus its fixtures.

**The envelope rule** (shared, not per generation): a ``thread-follower-*`` request whose
envelope carries a top-level ``hostId`` is sent at its base version + 1. Targeted follower
requests carry ``hostId`` and ``targetClientId``; requests routed by discovery carry neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple, Protocol, TypeVar

from rekall.thread.fields import FieldNames, V11

INITIALIZE = "initialize"
OWNER_DISCOVERY = "thread-owner-discovery"
FOLLOWING_CHANGED = "thread-stream-following-changed"
FOLLOWING_STATUS_REQUESTED = "thread-stream-following-status-requested"
STATE_CHANGED = "thread-stream-state-changed"
COMPACT = "thread-follower-compact-thread"
START_TURN = "thread-follower-start-turn"
FOLLOWER_PREFIX = "thread-follower-"
#: The pin: the generation to speak when no installed extension table was read.
GENERATION_VAR = "REKALL_GENERATION"

#: The methods rekall sends or reads, in the order a table is shown. A bundle's table is
#: compared with a generation on these only (other methods do not change what rekall sends).
COMPARED_METHODS = (STATE_CHANGED, FOLLOWING_CHANGED, OWNER_DISCOVERY, COMPACT, START_TURN)

Routing = Literal["targeted", "discovery"]
StartTurnShape = Literal["turnStart", "turnStartParams"]


class Generation(NamedTuple):
    """What one generation of the extension IPC is, as far as rekall needs to know (a
    ``NamedTuple``: it is read before the worker's first follow, see :mod:`rekall.thread.fields`)."""

    #: The name users see and set (``REKALL_GENERATION``), e.g. ``"26.9xx"``.
    name: str
    #: The builds it was read from, for messages and ``rekall protocol``.
    builds: str
    #: Base versions as the build's own table states them; a method absent here is absent
    #: from the build (``thread-owner-discovery`` in 26.721). ``initialize`` is version 0.
    base_versions: Mapping[str, int]
    #: ``targeted``: follower requests carry ``hostId`` and ``targetClientId`` (the owner);
    #: ``discovery``: they carry neither and the router finds the owner by discovery.
    follower_routing: Routing
    #: ``turnStart``: ``{turnStart: {request, context}}``; ``turnStartParams``: ``{turnStartParams}``.
    start_turn_shape: StartTurnShape
    #: Where the started turn is in start-turn's result, and the compact acknowledgement's
    #: ``true`` field.
    turn_path: tuple[str, ...] = ("result", "turn")
    compact_ack_field: str = "ok"
    #: The conversation-state field names.
    layout: FieldNames = V11
    #: Where the record comes from (shown by ``rekall protocol``).
    source: str = ""

    @property
    def owner_discovery(self) -> bool:
        return OWNER_DISCOVERY in self.base_versions

    @property
    def state_version(self) -> int:
        return self.base_versions[STATE_CHANGED]

    def base(self, method: str) -> int | None:
        """The base version of ``method``: ``None`` when the build lacks it."""
        if method == INITIALIZE:
            return self.base_versions.get(method, 0)
        return self.base_versions.get(method)

    def sent_version(self, method: str, *, envelope_host_id: bool) -> int:
        """The version a request of ``method`` is sent at (the envelope rule)."""
        base = self.base(method)
        if base is None:
            raise KeyError(f"{method} does not exist in generation {self.name}")
        return base + 1 if envelope_host_id and method.startswith(FOLLOWER_PREFIX) else base

    @property
    def follower_envelope_host_id(self) -> bool:
        return self.follower_routing == "targeted"


G26_9XX = Generation(
    name="26.9xx",
    builds="26.901.x and 26.917.x",
    base_versions={STATE_CHANGED: 11, FOLLOWING_CHANGED: 1, FOLLOWING_STATUS_REQUESTED: 1, OWNER_DISCOVERY: 1,
                   COMPACT: 1, START_TURN: 2},
    follower_routing="targeted",
    start_turn_shape="turnStart",
    source="Node rekall 0.3.2 verified live on 26.901.22334; desktop bundles 26.901.x read by other projects",
)

#: A generation is derived from its nearest neighbour by naming only what differs.
G26_721 = G26_9XX._replace(
    name="26.721",
    builds="26.721.x",
    base_versions={**{m: v for m, v in G26_9XX.base_versions.items() if m != OWNER_DISCOVERY}, START_TURN: 1},
    follower_routing="discovery",
    start_turn_shape="turnStartParams",
    source="third-party readings of the 26.721 bundles (no live 26.721 build was checked)",
)

#: Every known generation, newest first. Which one is spoken is chosen on grounds
#: (:mod:`rekall.adapters.extension.choice`), never from this order.
GENERATIONS: tuple[Generation, ...] = (G26_9XX, G26_721)


def listed(names: Iterable[str]) -> str:
    """``"26.9xx and 26.721"`` (``"a, b and c"``), the one way messages list generations."""
    *rest, last = list(names) or ["none"]
    return f"{', '.join(rest)} and {last}" if rest else last


class _Answerable(Protocol):
    @property
    def owner_discovery(self) -> bool: ...


A = TypeVar("A", bound=_Answerable)


def left_by_the_owners_answer(discovery_answered: bool, among: Iterable[A]) -> list[A]:
    """The generations in ``among`` the owner's answer to owner discovery leaves: answered
    (``discovery_answered``), those with owner discovery; ``no-client-found``, those without.

    That is all the answer shows (ground (b) in :mod:`rekall.adapters.extension.choice`): the
    generations it leaves together look alike to it, and only the installed extension's table
    or ``REKALL_GENERATION`` tells them apart."""
    return [g for g in among if g.owner_discovery == discovery_answered]


def differences(table: Mapping[str, int], generation: Generation) -> list[str]:
    """How ``table`` (a build's method table) differs from ``generation`` on the compared methods."""
    out = []
    for method in COMPARED_METHODS:
        theirs, ours = table.get(method), generation.base_versions.get(method)
        if theirs != ours:
            out.append(f"{method}: {_shown(theirs)} in the table, {_shown(ours)} in {generation.name}")
    return out


def matching(table: Mapping[str, int]) -> tuple[Generation, ...]:
    return tuple(g for g in GENERATIONS if not differences(table, g))


def _shown(version: int | None) -> str:
    return "absent" if version is None else f"base {version}"
