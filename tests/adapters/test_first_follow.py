"""The worker's first follow on a blocking socket, against the simulated owner over a real Unix
socket (on its own thread: the follow blocks), and the session that goes on from it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rekall.adapters.extension import connect_thread
from rekall.adapters.extension.first_follow import FirstFollow, follow_first
from rekall.adapters.extension.platform import ExtensionIpc
from rekall.kernel.errors import IpcError
from rekall.sim import start_sim_in_thread
from rekall.sim.threaded import SimHandle

DISCOVERY = "thread-owner-discovery"


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    with start_sim_in_thread() as handle:
        yield handle


def early_follow(sim: SimHandle, **options: Any) -> FirstFollow:
    early = follow_first(sim.thread_id, sim.env, at_schedule=None, request_timeout_s=5.0, **options)
    assert early is not None  # a Unix socket: followed here
    return early


async def connect(sim: SimHandle, early: FirstFollow | BaseException | None = None,
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """Connect as the worker does (``ExtensionIpc.follow``), and what the session says."""
    platform = ExtensionIpc(env or sim.env, first_follow=early)
    session = await platform.connect(sim.thread_id, request_timeout_s=5.0, write_cache=False)
    try:
        mirror = session.mirror
        return {"owner": session.owner_id, "client": session.client_id, "adapter": session.generation,
                "reason": session.generation_reason, "settled": session.generation_settled,
                "endpoint": session.endpoint, "facts": (mirror.idle, mirror.tokens, mirror.revision)}
    finally:
        await session.aclose()


def test_the_first_follow_goes_out_before_any_event_loop_and_the_session_goes_on_from_it(sim):
    before = sim.follow_count
    early = early_follow(sim)
    # The owner has our follow already; nothing runs an event loop in this thread yet.
    sim.wait_until(lambda owner: owner.follow_count == before + 1 and owner.followers == 1)
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    adopted = asyncio.run(connect(sim, early))
    assert sim.follow_count == before + 1  # the session did not follow again
    assert adopted["client"] == early.handshaken.client_id and adopted["owner"] == sim.owner_id
    assert adopted["facts"][0] is True and adopted["facts"][1] == 90000
    # The same session as a connect without the early follow: the same generation, evidence and checks.
    fresh = asyncio.run(connect(sim))
    assert fresh.pop("client") != adopted.pop("client")
    assert adopted == fresh
    assert "matches ours" in adopted["endpoint"].peer_check


def test_what_arrives_during_the_handshake_is_handled_once_the_session_takes_over(sim):
    # The owner is slow to answer discovery; meanwhile the router probes every client.
    sim.call(lambda owner: owner.delay_next(DISCOVERY, 1.5))

    def probe_once_discovery_is_asked() -> None:
        sim.wait_until(lambda owner: len(owner.routed_for(DISCOVERY)) == 1)
        sim.call(lambda owner: owner.probe_clients())

    prober = threading.Thread(target=probe_once_discovery_is_asked)
    prober.start()
    early = early_follow(sim)
    prober.join(timeout=10)
    kinds = [message.get("type") for message, _ in early.backlog]
    assert kinds == ["client-discovery-request", "request"]
    assert sim.call(lambda owner: list(owner.probe_replies)) == []  # nothing answered them yet
    asyncio.run(connect(sim, early))
    sim.wait_until(lambda owner: len(owner.probe_replies) == 2)
    replies = sim.call(lambda owner: list(owner.probe_replies))
    assert [r["type"] for r in replies] == ["client-discovery-response", "response"]
    assert replies[0]["response"] == {"canHandle": False} and replies[1]["error"] == "no-handler-for-request"


def caught(call: Callable[[], Any]) -> IpcError:
    with pytest.raises(IpcError) as info:
        call()
    return info.value


def said(error: IpcError) -> tuple[type, str, str, str | None]:
    return type(error), error.code, error.message, error.hint


@pytest.mark.parametrize("fault", [
    lambda owner: owner.fail_next("initialize", "request-version-mismatch"),
    lambda owner: owner.fail_next("initialize", "internal-error"),
    lambda owner: owner.fail_next(DISCOVERY, "no-client-found"),
    lambda owner: owner.drop_connection_on(DISCOVERY),
], ids=["initialize-refused-for-its-version", "initialize-failed", "no-owner", "connection-dropped"])
def test_a_first_follow_fails_as_the_event_loops_connect_fails_and_nothing_is_tried_again(sim, fault):
    env = {**sim.env, "REKALL_GENERATION": "26.9xx"}  # decided: no-client-found means no owner

    def asked() -> int:
        return sim.call(lambda owner: len(owner.routed_for("initialize")))

    sim.call(fault)
    early = caught(lambda: follow_first(sim.thread_id, env, at_schedule=None, request_timeout_s=5.0))
    assert asked() == 1
    sim.call(fault)
    on_the_loop = caught(lambda: asyncio.run(connect(sim, env=env)))
    assert asked() == 2
    assert said(early) == said(on_the_loop)
    # Handed to the platform, it is what the worker's connect raises; nothing is sent again.
    assert caught(lambda: asyncio.run(connect(sim, early, env))) is early
    assert asked() == 2


def test_a_router_without_a_listener_fails_the_first_follow_as_connecting_does(tmp_path):
    env = {"REKALL_PIPE": str(tmp_path / "gone.sock")}
    thread = "0199a5c2-2222-7000-8000-0000000000a1"
    early = caught(lambda: follow_first(thread, env, at_schedule=None, request_timeout_s=1.0))
    on_the_loop = caught(lambda: asyncio.run(connect_thread(thread, env=env)))
    assert said(early) == said(on_the_loop) and early.code == "endpoint_missing"
