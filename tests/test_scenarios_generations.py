"""A whole job through ``rekall mcp`` against the simulator playing each known build, with
no installed table: rekall finds the generation from how the owner answers, and needs the pin
only where that answer cannot tell the build from another known generation."""

from __future__ import annotations

import anyio
import pytest

from rekall.adapters.extension.generations import GENERATIONS, left_by_the_owners_answer
from rekall.sim import SimulatedOwner
from rekall.sim import protocol as p
from tests.mcpkit import HANDOFF, TERMINAL, job_env, rekall_mcp, wait_for_worker_exit

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.parametrize("generation", sorted(p.TABLES))
async def test_a_job_resumes_once_in_the_builds_own_shapes_and_versions(jobs_dir, generation):
    async with SimulatedOwner(generation=generation) as sim:
        env = job_env(sim.env, jobs_dir)
        alike = left_by_the_owners_answer(p.OWNER_DISCOVERY in p.TABLES[generation], GENERATIONS)
        assert ("REKALL_GENERATION" in env) == (len(alike) > 1)
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


def _connected_note(jobs_dir, job_id):
    from rekall.surfaces.explain import build_explanation
    from rekall.store import JobStore

    explanation = build_explanation(JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}), job_id)
    return next(note["detail"] for note in explanation["notes"] if note["kind"] == "connected")


async def test_a_26_721_job_pays_the_no_client_found_delay_once_schedule_settles_it_and_the_worker_reuses_it(
        jobs_dir):
    # The real router answers no-client-found only after ~10 s; the simulator's delay stands in.
    async with SimulatedOwner(generation="26.721", discovery_delay_s=0.5) as sim:
        env = job_env(sim.env, jobs_dir)
        async with rekall_mcp(env, sim.thread_id) as rekall:
            scheduled = await rekall.schedule(HANDOFF)
            assert len(sim.routed_for(p.OWNER_DISCOVERY)) == 1  # schedule's preflight asked the owner
            recorded = scheduled["generationAtSchedule"]
            assert recorded["generation"] == "26.721" and recorded["ownerId"] == sim.owner_id
            assert recorded["router"] == sim.env["REKALL_PIPE"] and recorded["socket"]
            assert "no-client-found" in recorded["how"]
            done = await rekall.wait_terminal()
            assert done["state"] == "resumed", done
            await wait_for_worker_exit(done["pid"])
        assert len(sim.routed_for(p.OWNER_DISCOVERY)) == 1  # the worker sent none
        connected = _connected_note(jobs_dir, scheduled["jobId"])
        assert connected["adapter"] == "26.721" and connected["generationSettled"] == "reused from schedule"
        assert connected["ownerId"] == sim.owner_id


async def test_an_owner_change_between_schedule_and_worker_makes_the_worker_settle_the_generation_again(jobs_dir):
    from rekall.usecases import service
    from rekall.usecases.spawn import spawn_worker

    async with SimulatedOwner(generation="26.721", discovery_delay_s=0.2) as sim:
        env = job_env(sim.env, jobs_dir)
        scheduled_owner = sim.owner_id

        def reload_then_spawn(thread_id, job_id, **kwargs):
            sim.owner_id = f"owner-reloaded-{job_id}"  # the window reloaded: a new client owns the thread
            return spawn_worker(thread_id, job_id, **kwargs)

        scheduled = await service.schedule(sim.thread_id, HANDOFF, env=env, spawn=reload_then_spawn)
        assert scheduled["generationAtSchedule"]["ownerId"] == scheduled_owner
        with anyio.fail_after(60):
            while (status := service.status_reply(sim.thread_id, env=env))["state"] not in TERMINAL:
                await anyio.sleep(0.1)
        assert status["state"] == "resumed", status
        await wait_for_worker_exit(scheduled["pid"])
        assert len(sim.routed_for(p.OWNER_DISCOVERY)) == 2  # the worker asked the new owner
        connected = _connected_note(jobs_dir, scheduled["jobId"])
        assert connected["generationSettled"] == "found anew" and connected["ownerId"] == sim.owner_id
        assert "no-client-found" in connected["generationReason"]
