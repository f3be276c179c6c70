"""The handshake, sans I/O: fed the router's answers, it says what to ask next and what it learned."""

from __future__ import annotations

from typing import Any

import pytest

from rekall.adapters.extension import messages as m
from rekall.adapters.extension.errors import NoOwner, VersionMismatch
from rekall.adapters.extension.generations import G26_721, G26_9XX, left_by_the_owners_answer
from rekall.adapters.extension.handshake import Handshaken, handshake
from rekall.adapters.extension.ipc import IpcAdapter
from tests.support.generations import G26_1201

THREAD = "019a0000-0000-7000-8000-000000000001"
A26_9XX, A26_721 = IpcAdapter(G26_9XX), IpcAdapter(G26_721)


def ok(result: Any = None, handled_by: str | None = None) -> m.Response:
    return m.Response("r", True, result, None, handled_by, {})


def refused(error: str) -> m.Response:
    return m.Response("r", False, None, error, None, {})


INITIALIZED = ok({"clientId": "me"})


def run(adapter: IpcAdapter | None, candidates: tuple[IpcAdapter, ...], answers: list[m.Response]) -> tuple[
        list[str], Handshaken]:
    """The methods asked, in order, and what the handshake learned from ``answers``."""
    steps = handshake(THREAD, "codex-rekall", adapter, candidates)
    asked = []
    ask = next(steps)
    try:
        for answer in answers:
            asked.append(ask.method)
            ask = steps.send(answer)
    except StopIteration as done:
        return asked, done.value
    raise AssertionError(f"the handshake still asks for {ask.method}")


@pytest.mark.parametrize(("candidates", "answers", "asked", "spoken", "owner", "why"), [
    ((A26_9XX, A26_721), [INITIALIZED, ok(handled_by="owner")], ["initialize", "thread-owner-discovery"], "26.9xx",
     "owner", "the owner answered thread-owner-discovery"),
    ((A26_9XX, A26_721), [INITIALIZED, refused("no-client-found")], ["initialize", "thread-owner-discovery"],
     "26.721", None, "thread-owner-discovery answered no-client-found; generation 26.721 has no owner discovery"),
    ((A26_721,), [INITIALIZED], ["initialize"], "26.721", None,
     "no candidate generation has owner discovery; generation 26.721 has no owner discovery"),
    # The owner's answer leaves one generation with discovery: a third without it changes nothing.
    ((G26_1201, A26_721), [INITIALIZED, ok(handled_by="owner")], ["initialize", "thread-owner-discovery"],
     "26.1201", "owner", "the owner answered thread-owner-discovery"),
])
def test_the_owners_answer_decides_when_it_leaves_one_generation(candidates, answers, asked, spoken, owner, why):
    methods, done = run(None, candidates, answers)
    assert methods == asked
    assert (done.adapter.NAME, done.owner_id, done.decided_because) == (spoken, owner, why)


def test_a_decided_generation_asks_discovery_only_if_it_has_it():
    assert run(A26_9XX, (), [INITIALIZED, ok(handled_by="owner")])[1] == Handshaken(A26_9XX, "me", "owner")
    assert run(A26_721, (), [INITIALIZED])[1] == Handshaken(A26_721, "me", None)


def test_an_answer_that_leaves_two_generations_is_refused_naming_them_and_how_to_pin():
    with pytest.raises(VersionMismatch) as caught:
        run(None, (G26_1201, A26_9XX, A26_721), [INITIALIZED, ok(handled_by="owner")])
    assert caught.value.message == (
        "the owner answered thread-owner-discovery, as generations 26.1201 and 26.9xx all would: the owner's "
        "answer cannot tell them apart, and only the installed extension's table or a pin can")
    assert caught.value.hint == ("pin the installed extension's generation: set REKALL_GENERATION to 26.1201 or "
                                 "26.9xx (`rekall protocol` shows the tables rekall read)")


def test_no_client_found_that_leaves_two_generations_without_discovery_is_refused_too():
    other = IpcAdapter(G26_721._replace(name="26.700"))
    with pytest.raises(VersionMismatch, match="answered no-client-found, as generations 26.721 and 26.700 all "
                                              "would: the owner's answer cannot tell them apart"):
        run(None, (A26_9XX, A26_721, other), [INITIALIZED, refused("no-client-found")])


def test_no_client_found_with_no_candidate_without_discovery_means_no_owner():
    with pytest.raises(NoOwner):
        run(None, (A26_9XX, G26_1201), [INITIALIZED, refused("no-client-found")])


def test_the_rule_leaves_the_generations_that_agree_on_owner_discovery():
    known = (G26_1201.generation, G26_9XX, G26_721)
    assert left_by_the_owners_answer(True, known) == [G26_1201.generation, G26_9XX]
    assert left_by_the_owners_answer(False, known) == [G26_721]
