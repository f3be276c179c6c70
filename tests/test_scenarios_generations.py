"""A whole job through ``rekall mcp`` against the simulator playing each known build, with
nothing pinned: rekall finds the generation from how the owner answers."""

from __future__ import annotations

import pytest

from rekall.sim import SimulatedOwner
from rekall.sim import protocol as p
from tests.mcpkit import HANDOFF, job_env, rekall_mcp, wait_for_worker_exit

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.parametrize("generation", sorted(p.TABLES))
async def test_a_job_resumes_once_in_the_builds_own_shapes_and_versions(jobs_dir, generation):
    async with SimulatedOwner(generation=generation) as sim:
        env = job_env(sim.env, jobs_dir)
        assert "REKALL_GENERATION" not in env
        async with rekall_mcp(env, sim.thread_id) as rekall:
            await rekall.schedule(HANDOFF)
            done = await rekall.wait_terminal()
            assert done["state"] == "resumed", done
            await wait_for_worker_exit(done["pid"])
    table = p.TABLES[generation]
    assert [len(sim.compact_requests), len(sim.start_turn_requests)] == [1, 1]
    for request in (*sim.compact_requests, *sim.start_turn_requests):
        envelope = request.envelope
        assert envelope["version"] == p.accepted_version(table, request.method, envelope)
        # Routed by discovery (no owner discovery in the build) or sent to the owner.
        assert ("targetClientId" in envelope) == (p.OWNER_DISCOVERY in table)
        assert ("hostId" in envelope) == (p.OWNER_DISCOVERY in table)
    start = sim.start_turn_requests[0]
    assert p.START_TURN_KEYS[generation] in start.params
    assert [k for k in ("turnStart", "turnStartParams") if k in start.params] == [p.START_TURN_KEYS[generation]]
