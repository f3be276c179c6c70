"""The handshake with the router, sans I/O: ``initialize``, then owner discovery.

:func:`handshake` is a generator that yields each request it needs answered (:class:`Ask`),
is sent the router's :class:`~rekall.adapters.extension.messages.Response`, and returns what it learned
(:class:`Handshaken`). It raises the precise error when an answer refuses us. The session
drives it on the event loop; the worker's first follow drives it on a blocking socket before
the event loop exists (:mod:`rekall.adapters.extension.early`). The rules live here once.

When the evidence left several candidate generations, the owner's answer to discovery decides
(:mod:`rekall.adapters.extension.choice`, evidence (b)): answered, a generation with owner discovery;
``no-client-found``, the one generation without it, whose owner then answers our follow.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, NamedTuple

from rekall.adapters.extension import messages as m
from rekall.adapters.extension.contract import Adapter
from rekall.adapters.extension.errors import VersionMismatch


class Ask(NamedTuple):
    """One request to send with ``adapter``'s envelope, from client ``source``."""

    adapter: Adapter
    method: str
    params: dict[str, Any]
    source: str


class Handshaken(NamedTuple):
    """What the handshake learned."""

    adapter: Adapter
    client_id: str
    #: ``None`` in a generation without owner discovery: the owner answers our follow.
    owner_id: str | None
    #: Why the owner's answer decided the generation; ``None`` when it was decided before.
    decided_because: str | None = None
    #: Discovery answered ``no-client-found``: following must find the owner.
    owner_unanswered: bool = False


Handshake = Generator[Ask, m.Response, Handshaken]


def handshake(thread_id: str, client_type: str, adapter: Adapter | None, candidates: Sequence[Adapter]) -> Handshake:
    """The handshake in ``adapter``'s generation, or deciding among ``candidates`` (``adapter`` ``None``)."""
    speaking = adapter if adapter is not None else candidates[0]  # initialize is the same in every generation
    response = yield Ask(speaking, speaking.INITIALIZE, speaking.initialize_params(client_type),
                         speaking.INITIAL_CLIENT_ID)
    if not response.ok and response.error == "request-version-mismatch":
        raise VersionMismatch(f"{speaking.INITIALIZE} v{speaking.METHOD_VERSIONS[speaking.INITIALIZE]} was "
                              "refused: request-version-mismatch",
                              hint="the extension changed its protocol; update rekall")
    client_id = speaking.client_id_from(response)
    if adapter is None:
        return (yield from _decide_by_discovery(thread_id, client_id, candidates))
    owner = None
    if adapter.owner_discovery:
        response = yield Ask(adapter, adapter.OWNER_DISCOVERY, adapter.owner_discovery_params(thread_id), client_id)
        owner = adapter.owner_from(response, thread_id)
    # else: a generation without owner discovery; the owner answers our follow.
    return Handshaken(adapter, client_id, owner)


def _decide_by_discovery(thread_id: str, client_id: str, candidates: Sequence[Adapter]) -> Handshake:
    """Evidence (b): the owner's answer to discovery. Answered: a generation with owner
    discovery. ``no-client-found``: a generation without it, *if* a client then answers
    our follow with the thread's state; otherwise nobody owns the thread."""
    with_discovery = [a for a in candidates if a.owner_discovery]
    without = [a for a in candidates if not a.owner_discovery]
    if not with_discovery:
        return _without(without, "no candidate generation has owner discovery", client_id)
    probe = with_discovery[0]
    response = yield Ask(probe, probe.OWNER_DISCOVERY, probe.owner_discovery_params(thread_id), client_id)
    if response.ok:
        if len(with_discovery) > 1:
            raise VersionMismatch(f"the owner answered {probe.OWNER_DISCOVERY}, which generations "
                                  f"{' and '.join(a.NAME for a in with_discovery)} all have",
                                  hint="set REKALL_GENERATION to the installed extension's generation")
        return Handshaken(probe, client_id, probe.owner_from(response, thread_id),
                          f"the owner answered {probe.OWNER_DISCOVERY}")
    if response.error == "no-client-found" and without:
        return _without(without, f"{probe.OWNER_DISCOVERY} answered no-client-found", client_id)
    probe.owner_from(response, thread_id)  # raises the precise error
    raise AssertionError("owner_from accepted a failed response")  # pragma: no cover


def _without(without: list[Adapter], why: str, client_id: str) -> Handshaken:
    if len(without) != 1:
        raise VersionMismatch(f"{why}; cannot tell generations {' and '.join(a.NAME for a in without)} apart",
                              hint="set REKALL_GENERATION to the installed extension's generation")
    return Handshaken(without[0], client_id, None, f"{why}; generation {without[0].NAME} has no owner discovery",
                      owner_unanswered=True)
