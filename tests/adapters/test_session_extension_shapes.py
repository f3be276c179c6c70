"""ThreadSession against the simulator playing the real extension's shapes
(``../shared/reference/extension-generations.md`` §3), over a real Unix socket.

Each test turns one simulator option on and checks that the session's mirror ends up equal
to the owner's state, with the facts and events the worker relies on.
"""

from __future__ import annotations

import anyio
import pytest

from rekall.kernel import events as ev
from rekall.adapters.extension import connect_thread
from rekall.thread import facts as f
from rekall.sim import SimulatedOwner
from tests.adapters.test_session import collect_until

pytestmark = pytest.mark.anyio


class Handled:
    """A tap that wakes the test after the session has handled each incoming message."""

    def __init__(self) -> None:
        self.changed = anyio.Event()

    def __call__(self, direction: str, message: object) -> None:
        if direction == "handled":
            self.changed.set()
            self.changed = anyio.Event()


async def follow(sim: SimulatedOwner):
    handled = Handled()
    session = await connect_thread(sim.thread_id, env=sim.env, tap=handled)
    session.handled = handled
    return session


async def exact(session, sim: SimulatedOwner) -> None:
    """Wait (bounded) until the mirror holds the owner's latest revision and state."""
    with anyio.fail_after(5):
        while True:
            changed = session.handled.changed
            if session.mirror.revision == sim.revision and session.mirror.state == sim.backend.state:
                return
            await changed.wait()


async def test_a_paginated_thread_is_followed_through_its_history_to_the_completion():
    async with SimulatedOwner(history_mode="paginated") as sim, \
            await follow(sim) as session:
        assert session.mirror.state["turns"] == [] and session.mirror.latest_user_turn_id == "user-turn"
        assert session.mirror.completed_compaction_ids == {"old"} and session.mirror.layout_problem is None
        await session.compact()
        seen = await collect_until(session, ev.ThreadIdle)
        assert ev.CompactionCompleted("compaction-1", sim.revision) in seen
        sim.backend.user_turn("next")
        (moved, running) = (await collect_until(session, ev.UserTurnRunning))[-2:]
        assert isinstance(moved, ev.UserBoundaryChanged) and running.running
        await exact(session, sim)


async def test_an_answered_approval_left_in_requests_does_not_keep_the_thread_busy():
    async with SimulatedOwner(answered_requests=2) as sim, await follow(sim) as session:
        assert session.mirror.idle and session.mirror.pending_requests == 0
        request = sim.backend.add_request()
        assert await collect_until(session, ev.ThreadBusy) == [ev.ThreadBusy("pending_requests", sim.revision)]
        sim.backend.answer_request(request)
        await collect_until(session, ev.ThreadIdle)
        assert len(session.mirror.state["requests"]) == 3


@pytest.mark.parametrize(("runtime", "reason"), [(None, f.RUNTIME_NULL), ("notLoaded", "runtime_notLoaded")])
async def test_a_thread_that_is_not_loaded_yet_is_busy_until_it_loads(runtime, reason):
    async with SimulatedOwner(runtime=runtime) as sim, await follow(sim) as session:
        assert session.mirror.busy_reason == reason and session.mirror.layout_problem is None
        sim.backend.load_thread()
        await collect_until(session, ev.ThreadIdle)


async def test_a_turn_that_ends_in_system_error_leaves_the_thread_busy_with_the_turn_over():
    async with SimulatedOwner(system_error_after_turn=True) as sim, \
            await follow(sim) as session:
        sim.backend.user_turn("go")
        sim.backend.complete_turn("completed")
        seen = await collect_until(session, ev.ThreadBusy)
        assert seen[-1].reason == "runtime_active"
        seen = await collect_until(session, ev.ThreadBusy)
        assert ev.UserTurnRunning(False, sim.revision) in seen and seen[-1].reason == "runtime_systemError"
        assert not session.mirror.user_turn_running and session.mirror.runtime_status == "systemError"


async def test_unsolicited_snapshots_with_revision_jumps_are_taken_without_a_resync():
    async with SimulatedOwner(snapshot_on_connect=True, snapshots_at_turn_boundaries=True) as sim, \
            await follow(sim) as session:
        before = sim.revision
        sim.backend.user_turn("go")  # patches, then a snapshot two revisions on
        sim.backend.complete_turn()
        await exact(session, sim)
        async with await connect_thread(sim.thread_id, env=sim.env):  # another client connects
            await exact(session, sim)
        sim.backend.agent_message()  # patches on top of the jumped revision still apply
        await exact(session, sim)
        assert session.mirror.snapshots >= 4 and sim.revision >= before + 3 * 2
        assert session.resync_count == 0 and session.mirror.idle


async def test_a_root_replace_at_turn_end_rebuilds_the_facts():
    async with SimulatedOwner(replace_root_at_turn_end=True) as sim, \
            await follow(sim) as session:
        await session.compact()
        seen = await collect_until(session, ev.ThreadIdle)
        assert ev.CompactionCompleted("compaction-1", sim.revision) in seen
        await exact(session, sim)
        assert session.resync_count == 0


async def test_batches_from_a_client_other_than_the_owner_are_ignored():
    async with SimulatedOwner(foreign_batches=True) as sim, await follow(sim) as session:
        start = session.mirror.boundary_fingerprint
        await session.compact()
        await collect_until(session, ev.ThreadIdle)
        await exact(session, sim)
        assert sim.foreign_batches_sent >= 2 and session.follower.foreign_broadcasts == sim.foreign_batches_sent
        assert session.mirror.boundary_fingerprint == start and session.resync_count == 0
        assert session.owner_id == sim.owner_id  # asked the router once, which named the same owner
        assert sim.discovery_count == 2


async def test_submissions_without_a_terminal_flag_hold_the_thread_until_the_key_is_deleted():
    async with SimulatedOwner(real_submissions=True) as sim, await follow(sim) as session:
        assert "unconfirmedTurnSubmissions" not in session.mirror.state and session.mirror.idle
        first = sim.backend.add_unconfirmed_submission()
        second = sim.backend.add_unconfirmed_submission()
        assert (await collect_until(session, ev.ThreadBusy))[-1].reason == "unconfirmed_submission"
        sim.backend.confirm_submission(first)
        await exact(session, sim)
        assert session.mirror.unconfirmed_submissions == 1
        sim.backend.confirm_submission(second)
        await collect_until(session, ev.ThreadIdle)
        assert "unconfirmedTurnSubmissions" not in session.mirror.state
