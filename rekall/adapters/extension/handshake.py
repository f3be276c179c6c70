"""The handshake with the router, sans I/O: ``initialize``, then owner discovery.

:func:`handshake` is a generator that yields each request it needs answered (:class:`Ask`),
is sent the router's :class:`~rekall.adapters.extension.messages.Response`, and returns what it learned
(:class:`Handshaken`). It raises the precise error when an answer refuses us. The session
drives it on the event loop; the worker's first follow drives it on a blocking socket before
the event loop exists (:mod:`rekall.adapters.extension.first_follow`). The rules live here once.

When the grounds left several candidate generations, the owner's answer to discovery decides
(:mod:`rekall.adapters.extension.choice`, ground (b)): answered, a generation with owner discovery;
``no-client-found``, the one generation without it, whose owner then answers our follow.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, NamedTuple

from rekall.adapters.extension import generations as gen
from rekall.adapters.extension import messages as m
from rekall.adapters.extension.ipc import IpcAdapter
from rekall.adapters.extension.errors import VersionMismatch


class Ask(NamedTuple):
    """One request to send with ``adapter``'s envelope, from client ``source``."""

    adapter: IpcAdapter
    method: str
    params: dict[str, Any]
    source: str


class Handshaken(NamedTuple):
    """What the handshake learned."""

    adapter: IpcAdapter
    client_id: str
    #: ``None`` in a generation without owner discovery: the owner answers our follow.
    owner_id: str | None
    #: Why the owner's answer decided the generation; ``None`` when it was decided before.
    decided_because: str | None = None
    #: Discovery answered ``no-client-found``: following must find the owner.
    owner_unanswered: bool = False


Handshake = Generator[Ask, m.Response, Handshaken]


def handshake(thread_id: str, client_type: str, adapter: IpcAdapter | None,
              candidates: Sequence[IpcAdapter]) -> Handshake:
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


def _decide_by_discovery(thread_id: str, client_id: str, candidates: Sequence[IpcAdapter]) -> Handshake:
    """Ground (b): the owner's answer to discovery. Answered: a generation with owner
    discovery. ``no-client-found``: a generation without it, *if* a client then answers
    our follow with the thread's state; otherwise nobody owns the thread. The answer leaves
    the generations :func:`~rekall.adapters.extension.generations.left_by_the_owners_answer`
    says; more than one left is refused (they need the installed table or a pin)."""
    with_discovery = gen.left_by_the_owners_answer(True, candidates)
    without = gen.left_by_the_owners_answer(False, candidates)
    if not with_discovery:
        why = "no candidate generation has owner discovery"
        return Handshaken(_only(without, why), client_id, None, _without_because(why, without), owner_unanswered=True)
    probe = with_discovery[0]
    response = yield Ask(probe, probe.OWNER_DISCOVERY, probe.owner_discovery_params(thread_id), client_id)
    if response.ok:
        spoken = _only(with_discovery, f"the owner answered {probe.OWNER_DISCOVERY}")
        return Handshaken(spoken, client_id, spoken.owner_from(response, thread_id),
                          f"the owner answered {probe.OWNER_DISCOVERY}")
    if response.error == "no-client-found" and without:
        why = f"{probe.OWNER_DISCOVERY} answered no-client-found"
        return Handshaken(_only(without, why), client_id, None, _without_because(why, without), owner_unanswered=True)
    probe.owner_from(response, thread_id)  # raises the precise error
    raise AssertionError("owner_from accepted a failed response")  # pragma: no cover


def _only(left: Sequence[IpcAdapter], answer: str) -> IpcAdapter:
    """The one generation the owner's ``answer`` left; refused when it left several."""
    if len(left) == 1:
        return left[0]
    names = [a.NAME for a in left]
    raise VersionMismatch(f"{answer}, as generations {gen.listed(names)} all would: the owner's answer cannot "
                          "tell them apart, and only the installed extension's table or a pin can",
                          hint=f"pin the installed extension's generation: set {gen.GENERATION_VAR} to "
                               f"{' or '.join(names)} (`rekall protocol` shows the tables rekall read)")


def _without_because(why: str, without: Sequence[IpcAdapter]) -> str:
    return f"{why}; generation {without[0].NAME} has no owner discovery"
