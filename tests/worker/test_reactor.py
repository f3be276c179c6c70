"""The worker's reactor, run in-process against the simulated owner on a real socket.

The end-to-end scenarios (tests/test_scenarios.py) run the worker as the detached process
it is; these tests drive the cases that need a finer grip on timing or on the process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import anyio
import pytest

from rekall.worker import policy, timers
from rekall.usecases import service
from rekall.kernel.settings import WorkerSettings
from rekall.adapters.extension.platform import ExtensionIpc
from rekall.kernel.errors import RekallError
from rekall.surfaces.explain import build_explanation
from rekall.adapters.resume import ResumeToken
from rekall.sim import SimulatedOwner
from rekall.states import JobState
from rekall.states.status import known
from rekall.store import JobStore
from rekall.worker.reactor import Worker
from tests.mcpkit import HANDOFF

pytestmark = pytest.mark.anyio

COMPACT = "thread-follower-compact-thread"
FAST = WorkerSettings(idle_stable_s=0.05, deadline_s=20)


def _no_spawn(thread_id: str, job_id: str, **_: object) -> int:
    return os.getpid()  # the test runs the worker itself, in this process


async def schedule(sim: SimulatedOwner, jobs: Path, handoff=HANDOFF) -> tuple[JobStore, str]:
    env = {**sim.env, "REKALL_JOBS_DIR": str(jobs)}
    scheduled = await service.schedule(sim.thread_id, handoff, env=env, spawn=_no_spawn)
    return JobStore.open(env), scheduled["jobId"]


async def schedule_telling(sim: SimulatedOwner, jobs: Path, handoff=HANDOFF) -> tuple[JobStore, str, ResumeToken]:
    """Schedule, keeping what schedule tells the worker it starts (its SCHEDULED argument)."""
    told: list[ResumeToken] = []

    def spawn(thread_id: str, job_id: str, *, scheduled: ResumeToken, **_: object) -> int:
        told.append(scheduled)
        return os.getpid()

    env = {**sim.env, "REKALL_JOBS_DIR": str(jobs)}
    scheduled = await service.schedule(sim.thread_id, handoff, env=env, spawn=spawn)
    return JobStore.open(env), scheduled["jobId"], told[0]


def _journal_reads(store: JobStore, sim: SimulatedOwner, monkeypatch) -> list[tuple[int, int]]:
    """Each read of a job's journal from now on: the owner's follow count and compact requests then."""
    reads: list[tuple[int, int]] = []
    load = store.load

    def counted(*args):
        reads.append((sim.follow_count, len(sim.compact_requests)))
        return load(*args)

    monkeypatch.setattr(store, "load", counted)
    return reads


async def run(store: JobStore, sim: SimulatedOwner, job: str, settings: WorkerSettings = FAST) -> JobState:
    worker = Worker(store, sim.thread_id, job, settings=settings, env=sim.env)
    with anyio.fail_after(30):
        return await worker.run()


async def test_telemetry_that_trails_the_completed_item_is_awaited_briefly(tmp_path):
    # The item completes while the token count still shows the old context; the owner
    # sends fresh telemetry 50 ms later, as a real engine does.
    async with SimulatedOwner(telemetry_after=[90_000, 12_000], telemetry_step_s=0.05) as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        final = await run(store, sim, job, WorkerSettings(idle_stable_s=1.0, deadline_s=20))
        assert final is JobState.RESUMED
        assert store.read_status(sim.thread_id).contextTokensAfter == 12_000


async def test_a_lost_acknowledgement_is_proven_by_the_completion_seen_after_reconnecting(tmp_path):
    async with SimulatedOwner() as sim:
        sim.drop_connection_on(COMPACT, deliver=True)  # the owner compacts, the answer is lost
        store, job = await schedule(sim, tmp_path / "jobs")
        assert await run(store, sim, job) is JobState.RESUMED
        assert len(sim.compact_requests) == 1 and len(sim.start_turn_requests) == 1
        explanation = build_explanation(store, job)
        accepted = next(row for row in explanation["timeline"] if row["trigger"] == "compaction_accepted")
        assert accepted["evidence"]["inferredFrom"] == "completion_observed"
        assert {"connection_lost", "reconnected"} <= {note["kind"] for note in explanation["notes"]}


async def test_a_cancel_marker_present_at_start_cancels_the_scheduled_job_without_connecting(tmp_path):
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        follows = sim.follow_count
        cancelled = service.cancel(sim.thread_id, job, env={**sim.env, "REKALL_JOBS_DIR": str(store.root)})
        assert cancelled["cancellationRequested"] is True
        assert await run(store, sim, job) is JobState.CANCELLED
        path = build_explanation(store, job)["path"]
        assert path == ["scheduled", "cancelled"]
        assert sim.follow_count == follows and not sim.compact_requests


async def test_a_worker_never_runs_a_job_that_has_already_started(tmp_path):
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs", handoff=None)
        assert await run(store, sim, job) is JobState.COMPLETED
        follows = sim.follow_count
        with pytest.raises(RekallError) as caught:
            await run(store, sim, job)
        assert caught.value.code == "job_already_started"
        assert len(sim.compact_requests) == 1
        assert sim.follow_count == follows  # a job that is not `scheduled` is not even followed


async def test_the_deadline_after_acceptance_records_an_unknown_outcome(tmp_path):
    async with SimulatedOwner(compaction_delay_s=60) as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        final = await run(store, sim, job, WorkerSettings(idle_stable_s=0.05, deadline_s=3))
        assert final is JobState.TIMED_OUT
        status = store.read_status(sim.thread_id)
        assert status.outcomeMayBeUnknown is True and status.errorCode == "deadline_exceeded"
        assert len(sim.compact_requests) == 1


async def test_idle_must_hold_for_the_whole_debounce(tmp_path):
    # Busy again before the debounce ends: the timer starts over, and only a full idle
    # interval lets the request go.
    async with SimulatedOwner(runtime="active") as sim:
        store, job = await schedule(sim, tmp_path / "jobs", handoff=None)

        lasting_idle: list[int] = []

        async def flicker() -> None:
            await sim.wait_until(lambda s: s.followers >= 1, timeout=10)
            sim.backend.set_runtime("idle")
            sim.backend.set_runtime("active")
            assert not sim.compact_requests
            sim.backend.set_runtime("idle")
            lasting_idle.append(sim.revision)

        async with anyio.create_task_group() as group:
            group.start_soon(flicker)
            final = await run(store, sim, job, WorkerSettings(idle_stable_s=0.3, deadline_s=20))
        assert final is JobState.COMPLETED
        idle = next(r for r in build_explanation(store, job)["timeline"] if r["trigger"] == "idle_stable")
        # The request followed the idle period that lasted, not the one cut short (no wall-clock threshold here).
        assert idle["evidence"]["revision"] >= lasting_idle[0]


# --- under faults ------------------------------------------------------------------------


def _cut_the_link_before_the_compact_request(worker: Worker, sim: SimulatedOwner) -> None:
    """The owner's connection dies after idle held but before the request goes out."""
    connect = worker._connect

    async def connect_then_arm() -> None:
        await connect()
        session = worker.thread.session  # the extension platform's session
        compact = session.compact

        async def compact_on_a_dead_link() -> None:
            link = session._link
            await sim.disconnect_all()
            with anyio.fail_after(5):
                await link.reader  # the reader ends once it has seen the connection die
            await compact()

        session.compact = compact_on_a_dead_link

    worker._connect = connect_then_arm


async def test_a_compact_request_that_never_left_fails_at_once_with_a_known_outcome(tmp_path):
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        worker = Worker(store, sim.thread_id, job, settings=WorkerSettings(idle_stable_s=0.05, deadline_s=5),
                        env=sim.env)
        _cut_the_link_before_the_compact_request(worker, sim)
        with anyio.fail_after(30):
            assert await worker.run() is JobState.FAILED
        status = store.read_status(sim.thread_id)
        assert status.errorCode == "connection_lost" and status.outcomeMayBeUnknown is False
        assert "not sent" in status.error
        assert not sim.compact_requests


async def test_an_unknown_outcome_settles_once_the_owner_shows_the_thread_quiet(tmp_path):
    async with SimulatedOwner() as sim:
        sim.drop_connection_on(COMPACT, deliver=False)  # the request arrived; the answer never comes
        store, job = await schedule(sim, tmp_path / "jobs")
        settings = WorkerSettings(idle_stable_s=0.05, deadline_s=10, settle_s=0.3)
        assert await run(store, sim, job, settings) is JobState.FAILED
        status = store.read_status(sim.thread_id)
        assert status.errorCode == "outcome_unknown" and status.outcomeMayBeUnknown is True
        assert "idle" in status.error and "no compaction in progress" in status.error
        settled = build_explanation(store, job)["timeline"][-1]
        assert settled["trigger"] == "outcome_settled" and settled["evidence"]["settleWindowS"] == 0.3
        assert len(sim.compact_requests) == 1


async def test_a_compaction_in_progress_holds_off_the_settle_window(tmp_path):
    # The answer is lost but the owner compacts, slower than the settle window: the running
    # compaction is not "quiet", and its completion then proves acceptance.
    async with SimulatedOwner(compaction_delay_s=1.0) as sim:
        sim.drop_connection_on(COMPACT, deliver=True)
        store, job = await schedule(sim, tmp_path / "jobs")
        settings = WorkerSettings(idle_stable_s=0.05, deadline_s=20, settle_s=0.2)
        assert await run(store, sim, job, settings) is JobState.RESUMED
        assert len(sim.compact_requests) == 1 and len(sim.start_turn_requests) == 1


async def _until_connected(worker: Worker) -> None:
    """The worker holds its first snapshot (a fault before that fails the connect itself)."""
    with anyio.fail_after(10):
        while not worker.connected:
            await anyio.sleep(0.01)  # no event marks it; the bounded loop does


async def test_an_owner_gone_longer_than_the_backoff_is_followed_again_within_the_reconnect_window(tmp_path):
    delays = (0.02, 0.05)
    async with SimulatedOwner(runtime="active") as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        settings = WorkerSettings(idle_stable_s=0.05, deadline_s=20, reconnect_delays_s=delays,
                                  reconnect_window_s=10)

        worker = Worker(store, sim.thread_id, job, settings=settings, env=sim.env)

        async def window_reload() -> None:
            await _until_connected(worker)
            gone_at = sim.discovery_count
            sim.no_owner = True
            await sim.disconnect_all()
            # Back only after more failed attempts than the delays alone allow.
            await sim.wait_until(lambda s: s.discovery_count >= gone_at + len(delays) + 3, timeout=10)
            sim.no_owner = False
            await sim.wait_until(lambda s: s.followers >= 1, timeout=10)
            sim.backend.complete_turn("completed")

        async with anyio.create_task_group() as group:
            group.start_soon(window_reload)
            with anyio.fail_after(30):
                final = await worker.run()
        assert final is JobState.RESUMED
        assert len(sim.compact_requests) == 1 and len(sim.start_turn_requests) == 1


async def test_an_owner_gone_for_the_whole_reconnect_window_fails_the_job(tmp_path):
    async with SimulatedOwner(runtime="active") as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        settings = WorkerSettings(idle_stable_s=0.05, deadline_s=20, reconnect_delays_s=(0.02, 0.05),
                                  reconnect_window_s=0.5)

        worker = Worker(store, sim.thread_id, job, settings=settings, env=sim.env)

        async def gone() -> None:
            await _until_connected(worker)
            sim.no_owner = True
            await sim.disconnect_all()

        async with anyio.create_task_group() as group:
            group.start_soon(gone)
            with anyio.fail_after(30):
                final = await worker.run()
        assert final is JobState.FAILED
        status = store.read_status(sim.thread_id)
        assert status.errorCode == "connection_lost" and "0.5 s" in status.error
        assert not sim.compact_requests


async def _start_a_compaction_elsewhere(sim: SimulatedOwner) -> None:
    """What a lost worker leaves behind: the owner compacting on a request rekall no longer follows."""
    from rekall.adapters.extension import connect_thread

    session = await connect_thread(sim.thread_id, env=sim.env)
    try:
        await session.compact()
    finally:
        await session.aclose()


async def test_schedule_refuses_while_the_thread_shows_a_compaction_in_progress(tmp_path):
    async with SimulatedOwner(compaction_delay_s=30) as sim:
        await _start_a_compaction_elsewhere(sim)
        with pytest.raises(service.Refused) as caught:
            await schedule(sim, tmp_path / "jobs")
        assert "compaction in progress" in caught.value.message
        assert len(sim.compact_requests) == 1


async def test_the_worker_refuses_to_request_while_another_compaction_runs(tmp_path):
    async with SimulatedOwner(compaction_delay_s=1.0) as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        await _start_a_compaction_elsewhere(sim)  # after scheduling, before the worker looks
        assert await run(store, sim, job) is JobState.FAILED
        status = store.read_status(sim.thread_id)
        assert status.errorCode == "compaction_in_progress" and status.outcomeMayBeUnknown is False
        assert len(sim.compact_requests) == 1  # only the other one


async def test_a_worker_that_finds_a_cancel_marker_at_start_releases_the_lock(tmp_path):
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        store.request_cancel(sim.thread_id, job)
        assert store.lock_path(sim.thread_id).exists()
        assert await run(store, sim, job) is JobState.CANCELLED
        assert not store.lock_path(sim.thread_id).exists()


async def test_a_second_worker_started_for_the_same_job_refuses_and_sends_nothing(tmp_path):
    async with SimulatedOwner(runtime="active") as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        # Both exist before either runs: a scheduler that spawned twice, or a restart racing the first.
        first = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env)
        second = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env)

        async def then_finish_the_turn() -> None:
            await _until_connected(first)
            with pytest.raises(RekallError) as caught:
                await second.run()
            assert caught.value.code == "job_already_started"
            assert store.lock_holder(sim.thread_id).job_id == job  # the refusal left the lock alone
            sim.backend.complete_turn("completed")

        async with anyio.create_task_group() as group:
            group.start_soon(then_finish_the_turn)
            with anyio.fail_after(30):
                assert await first.run() is JobState.RESUMED
        assert len(sim.compact_requests) == 1 and len(sim.start_turn_requests) == 1
        assert [row["trigger"] for row in build_explanation(store, job)["timeline"]].count("worker_started") == 1


async def test_the_journal_names_the_platform_the_worker_followed_the_thread_on(tmp_path):
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        assert await run(store, sim, job) is JobState.RESUMED
        replay = store.load(sim.thread_id, job)
        started = next(t for t in replay.transitions if t.trigger == "worker_started")
        connected = next(n for n in replay.notes if n.kind == "connected")
        assert started.evidence["platform"] == connected.detail["platform"] == "extension-ipc"
        assert connected.detail["adapter"] == "26.9xx" and connected.detail["ownerId"]


async def test_the_worker_follows_the_thread_before_it_claims_the_job_and_acts_only_once_it_owns_it(tmp_path):
    async with SimulatedOwner(runtime="active") as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        follows, at_claim = sim.follow_count, []

        class Watched(Worker):
            def _claim(self, me: int, started: str | None) -> None:
                at_claim.append((sim.follow_count, store.load(sim.thread_id, job).state, len(sim.compact_requests)))
                super()._claim(me, started)

        worker = Watched(store, sim.thread_id, job, settings=FAST, env=sim.env)

        async def finish_the_turn() -> None:
            await _until_connected(worker)
            sim.backend.complete_turn("completed")

        async with anyio.create_task_group() as group:
            group.start_soon(finish_the_turn)
            with anyio.fail_after(30):
                assert await worker.run() is JobState.RESUMED
        # Followed (read-only) while the job was still `scheduled`, before anything acted on the thread.
        assert at_claim == [(follows + 1, JobState.SCHEDULED, 0)]
        replay = store.load(sim.thread_id, job)
        assert [t.trigger for t in replay.transitions][:3] == ["schedule", "worker_started", "idle_stable"]
        assert replay.notes[0].kind == "connected" and replay.notes[0].seq > replay.transitions[1].seq
        assert len(sim.compact_requests) == 1 and len(sim.start_turn_requests) == 1


async def _finish_the_turn_once_connected(worker: Worker, sim: SimulatedOwner) -> None:
    await _until_connected(worker)
    sim.backend.complete_turn("completed")


async def test_a_worker_told_what_schedule_journaled_follows_the_thread_before_it_reads_the_journal(tmp_path,
                                                                                                     monkeypatch):
    async with SimulatedOwner(runtime="active") as sim:
        store, job, told = await schedule_telling(sim, tmp_path / "jobs")
        status = store.read_status(sim.thread_id)
        assert told == ResumeToken(status.platform, status.generationAtSchedule)
        assert told.settled is not None and told.settled["ownerId"] == sim.owner_id
        follows, reads = sim.follow_count, _journal_reads(store, sim, monkeypatch)
        worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env, scheduled=told)
        async with anyio.create_task_group() as group:
            group.start_soon(_finish_the_turn_once_connected, worker, sim)
            with anyio.fail_after(30):
                assert await worker.run() is JobState.RESUMED
    # The first read of the journal is the claim's: the thread was already followed, nothing sent.
    assert reads[0] == (follows + 1, 0)
    assert sim.follow_count == follows + 1 and len(sim.compact_requests) == len(sim.start_turn_requests) == 1


async def test_a_worker_started_without_what_schedule_journaled_reads_the_journal_before_it_follows(tmp_path,
                                                                                                    monkeypatch):
    # A worker started by an earlier rekall's schedule (THREAD JOB only) works as before.
    async with SimulatedOwner(runtime="active") as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        follows, reads = sim.follow_count, _journal_reads(store, sim, monkeypatch)
        worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env)
        async with anyio.create_task_group() as group:
            group.start_soon(_finish_the_turn_once_connected, worker, sim)
            with anyio.fail_after(30):
                assert await worker.run() is JobState.RESUMED
    assert reads[:2] == [(follows, 0), (follows + 1, 0)]  # the job as it stands, then the claim's read
    assert sim.follow_count == follows + 1 and len(sim.compact_requests) == 1


async def test_a_worker_whose_command_line_disagrees_with_the_journal_drops_that_follow_and_does_as_the_journal_says(
        tmp_path, caplog):
    async with SimulatedOwner(runtime="active") as sim:
        store, job, told = await schedule_telling(sim, tmp_path / "jobs")
        follows = sim.follow_count
        hearsay = told._replace(settled={**told.settled, "how": "not what the journal says"})
        worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env, scheduled=hearsay)
        with caplog.at_level(logging.WARNING, logger="rekall.worker"):
            async with anyio.create_task_group() as group:
                group.start_soon(_finish_the_turn_once_connected, worker, sim)
                with anyio.fail_after(30):
                    assert await worker.run() is JobState.RESUMED
            # Followed on the command line's word, closed once the claim read the journal, followed again.
            assert sim.follow_count == follows + 2
            await sim.wait_until(lambda owner: owner.followers == 0, timeout=5)
    assert any("its journal says" in r.getMessage() for r in caplog.records if r.name == "rekall.worker")
    assert len(sim.compact_requests) == 1 and len(sim.start_turn_requests) == 1
    replay = store.load(sim.thread_id, job)
    assert [t.trigger for t in replay.transitions][:2] == ["schedule", "worker_started"]
    connected = [n for n in replay.notes if n.kind == "connected"]
    assert len(connected) == 1 and connected[0].seq > replay.transitions[1].seq  # followed after the claim


async def test_a_worker_told_another_platform_than_the_journal_follows_only_on_the_journals_after_its_claim(tmp_path):
    async with SimulatedOwner(runtime="active") as sim:
        store, job, told = await schedule_telling(sim, tmp_path / "jobs")
        follows = sim.follow_count
        worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env,
                        scheduled=ResumeToken("app-server", None))
        async with anyio.create_task_group() as group:
            group.start_soon(_finish_the_turn_once_connected, worker, sim)
            with anyio.fail_after(30):
                assert await worker.run() is JobState.RESUMED
    assert worker.platform.name == "extension-ipc" and sim.follow_count == follows + 1
    started = next(t for t in store.load(sim.thread_id, job).transitions if t.trigger == "worker_started")
    assert started.evidence["platform"] == "extension-ipc"


async def test_a_worker_told_what_schedule_journaled_closes_its_follow_when_the_job_was_cancelled_first(tmp_path):
    async with SimulatedOwner() as sim:
        store, job, told = await schedule_telling(sim, tmp_path / "jobs")
        follows = sim.follow_count
        service.cancel(sim.thread_id, job, env={**sim.env, "REKALL_JOBS_DIR": str(store.root)})
        worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env, scheduled=told)
        with anyio.fail_after(30):
            assert await worker.run() is JobState.CANCELLED
        assert sim.follow_count == follows + 1  # followed before the claim read the marker
        await sim.wait_until(lambda owner: owner.followers == 0, timeout=5)
        assert not sim.compact_requests
    assert build_explanation(store, job)["path"] == ["scheduled", "cancelled"]
    assert not store.lock_path(sim.thread_id).exists()


async def test_a_worker_told_what_schedule_journaled_closes_its_follow_when_the_claim_refuses_the_job(tmp_path):
    async with SimulatedOwner() as sim:
        store, job, told = await schedule_telling(sim, tmp_path / "jobs", handoff=None)
        assert await run(store, sim, job) is JobState.COMPLETED
        follows = sim.follow_count
        again = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env, scheduled=told)
        with pytest.raises(RekallError) as caught, anyio.fail_after(30):
            await again.run()
        assert caught.value.code == "job_already_started"
        assert sim.follow_count == follows + 1
        await sim.wait_until(lambda owner: owner.followers == 0, timeout=5)
        assert len(sim.compact_requests) == 1


@pytest.mark.parametrize("extra", [["not json"], ['{"platform": "extension-ipc"}'], ['[]'],
                                   ['{"platform": 1, "generationAtSchedule": null}'],
                                   ['{"platform": null, "generationAtSchedule": null}', "more"]],
                         ids=["not-json", "a-field-missing", "not-an-object", "a-field-of-another-type", "extra"])
def test_the_worker_refuses_a_malformed_or_extra_argument_as_a_usage_error(extra, capsys):
    from rekall.worker.start import main

    assert main(["0199a5c2-2222-7000-8000-0000000000a1", "0199a5c2-3333-7000-8000-0000000000a2", *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("SCHEDULED" in err) and "next:" in err


def test_what_schedule_tells_the_worker_reads_back_as_it_was_written():
    said = ResumeToken("extension-ipc", {"generation": "26.9xx", "ownerId": "o", "router": "/r", "socket": None,
                                         "how": "the owner's answer \"quoted\", ünïcode"})
    assert ResumeToken.from_argument(said.to_argument()) == said
    assert ResumeToken.from_argument(ResumeToken(None, None).to_argument()) == ResumeToken(None, None)


async def test_a_follow_that_fails_before_the_claim_fails_the_job_once_the_worker_has_claimed_it(tmp_path):
    async with SimulatedOwner(runtime="active") as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
    # The owner is gone before the worker starts: its follow fails, then the claim is journaled, then the failure.
    assert await run(store, sim, job) is JobState.FAILED
    assert build_explanation(store, job)["path"] == ["scheduled", "waiting_for_idle", "failed"]
    status = store.read_status(sim.thread_id)
    assert status.errorCode != "worker_error" and status.error and status.outcomeMayBeUnknown is False
    assert not store.lock_path(sim.thread_id).exists()


def _causes(exc: BaseException | None) -> list[BaseException]:
    chain = []
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__
    return chain


async def test_the_workers_log_keeps_what_caused_a_failure_the_journal_words_briefly(tmp_path, caplog):
    async with SimulatedOwner(runtime="active") as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
    # The owner has gone: connecting fails in the OS, and the transport says so in its own words.
    with caplog.at_level(logging.WARNING, logger="rekall.worker"):
        final = await run(store, sim, job)
    assert final is JobState.FAILED
    status = store.read_status(sim.thread_id)
    logged = [r for r in caplog.records if r.name == "rekall.worker" and r.exc_info]
    assert len(logged) == 1 and status.error in logged[0].getMessage()
    chain = _causes(logged[0].exc_info[1])
    assert isinstance(chain[0], RekallError) and any(isinstance(cause, OSError) for cause in chain[1:]), chain


class _Watched:
    """A followed thread whose requests note the worker's log lines as they start."""

    def __init__(self, thread, caplog, logged_at):
        self._thread, self._caplog, self._logged_at = thread, caplog, logged_at

    def __getattr__(self, name):
        return getattr(self._thread, name)

    def _note(self, kind):
        self._logged_at[kind] = [r.getMessage() for r in self._caplog.records if r.name == "rekall.worker"]

    async def compact(self):
        self._note("compact")
        return await self._thread.compact()

    async def start_turn(self, text, job_id):
        self._note("start_turn")
        return await self._thread.start_turn(text, job_id)


class _WatchedPlatform:
    def __init__(self, platform, caplog):
        self._platform, self._caplog, self.logged_at = platform, caplog, {}

    def __getattr__(self, name):
        return getattr(self._platform, name)

    async def follow(self, thread_id, *, request_timeout_s):
        thread = await self._platform.follow(thread_id, request_timeout_s=request_timeout_s)
        return _Watched(thread, self._caplog, self.logged_at)


async def test_the_transition_that_sends_a_request_is_logged_after_the_request_has_left(tmp_path, caplog):
    # Only the journal record precedes a request; the log line (like the status file) follows it.
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        platform = _WatchedPlatform(ExtensionIpc(sim.env), caplog)
        with caplog.at_level(logging.INFO, logger="rekall.worker"):
            worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env, platform=platform)
            with anyio.fail_after(30):
                assert await worker.run() is JobState.RESUMED
    requesting = f"idle_stable: {JobState.WAITING_FOR_IDLE.value} -> {JobState.REQUESTING.value}"
    resuming = f"idle_stable: {JobState.WAITING_FOR_RESUME_IDLE.value} -> {JobState.RESUMING.value}"
    assert requesting not in platform.logged_at["compact"]
    assert resuming not in platform.logged_at["start_turn"]
    assert requesting in platform.logged_at["start_turn"]  # written once the compact request had left
    logged = [r.getMessage() for r in caplog.records if r.name == "rekall.worker"]
    assert logged.index(requesting) < logged.index(resuming)


async def test_each_request_is_written_in_the_step_that_decided_it_not_in_a_task_of_its_own(tmp_path, monkeypatch):
    from rekall.transports import channel as channel_module

    written: list[tuple[str, bool, object]] = []  # method, inside the worker's step, by which task
    stepping: list[object] = []  # the task applying the worker's step, while it does
    encode = channel_module.encode_message

    def noted(message):  # a channel encodes a message's frame just before it writes it
        if message.get("type") == "request" and message.get("method", "").startswith("thread-follower-"):
            written.append((message["method"], bool(stepping), asyncio.current_task()))
        return encode(message)

    monkeypatch.setattr(channel_module, "encode_message", noted)
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env)
        real_apply = worker._apply

        def applying(event):
            stepping.append(asyncio.current_task())
            try:
                real_apply(event)
            finally:
                stepping.pop()

        monkeypatch.setattr(worker, "_apply", applying)
        with anyio.fail_after(30):
            assert await worker.run() is JobState.RESUMED
    main = asyncio.current_task()  # the worker's reactor runs in the caller's task
    assert written == [("thread-follower-compact-thread", True, main), ("thread-follower-start-turn", True, main)]


class _SlowToAnswer:
    """A followed thread whose compact request is answered ``delay_s`` late, with nothing else
    arriving meanwhile (the owner's update that the compaction started is dropped); it notes the
    status file's state as the request leaves and just before the answer comes back."""

    def __init__(self, thread, sim, status_path, delay_s):
        self._thread, self._sim, self._status_path, self._delay_s = thread, sim, status_path, delay_s
        self.status_states: list[str] = []

    def __getattr__(self, name):
        return getattr(self._thread, name)

    def _status_state(self):
        return json.loads(self._status_path.read_text())["state"]

    async def compact(self):
        self.status_states.append(self._status_state())
        self._sim.drop_updates(1)
        acted = await self._thread.compact()
        await anyio.sleep(self._delay_s)  # the owner is slow to answer: nothing else happens meanwhile
        self.status_states.append(self._status_state())
        return acted


class _SlowPlatform:
    def __init__(self, platform, sim, store, delay_s):
        self._platform, self._sim, self._store, self._delay_s, self.thread = platform, sim, store, delay_s, None

    def __getattr__(self, name):
        return getattr(self._platform, name)

    async def follow(self, thread_id, *, request_timeout_s):
        self.thread = _SlowToAnswer(await self._platform.follow(thread_id, request_timeout_s=request_timeout_s),
                                    self._sim, self._store.status_path(thread_id), self._delay_s)
        return self.thread


@pytest.mark.parametrize("hold_s, status_before_the_answer", [
    (0.01, JobState.REQUESTING.value),  # written once the hold has passed, with no answer yet
    (60.0, JobState.WAITING_FOR_IDLE.value),  # still held: the answer, the next item, writes it
])
async def test_a_requests_held_writes_wait_for_the_hold_or_the_next_item_and_keep_their_order(
        tmp_path, caplog, monkeypatch, hold_s, status_before_the_answer):
    from rekall.worker import reactor as worker_module

    monkeypatch.setattr(worker_module, "HELD_AFTER_REQUEST_S", hold_s)
    async with SimulatedOwner(compaction_delay_s=1.0) as sim:  # the compaction ends after the answer
        store, job = await schedule(sim, tmp_path / "jobs")
        platform = _SlowPlatform(ExtensionIpc(sim.env), sim, store, delay_s=0.2)
        with caplog.at_level(logging.INFO, logger="rekall.worker"):
            worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env, platform=platform)
            with anyio.fail_after(30):
                assert await worker.run() is JobState.RESUMED
    # the request left before the status file said so (the journal, not the file, precedes it)
    assert platform.thread.status_states == [JobState.WAITING_FOR_IDLE.value, status_before_the_answer]
    logged = [r.getMessage() for r in caplog.records if r.name == "rekall.worker" and "->" in r.getMessage()]
    assert logged.index(f"idle_stable: {JobState.WAITING_FOR_IDLE.value} -> {JobState.REQUESTING.value}") \
        < logged.index(f"compaction_accepted: {JobState.REQUESTING.value} -> {JobState.ACCEPTED.value}")
    assert json.loads(store.status_path(sim.thread_id).read_text())["state"] == JobState.RESUMED.value


class _LateEvents:
    """A followed thread whose events reach the worker ``delay_s`` after the platform saw them."""

    def __init__(self, thread, delay_s):
        self._thread, self._delay_s = thread, delay_s

    def __getattr__(self, name):
        return getattr(self._thread, name)

    async def events(self):
        async for event in self._thread.events():
            await asyncio.sleep(self._delay_s)
            yield event


class _LatePlatform:
    def __init__(self, platform, delay_s):
        self._platform, self._delay_s = platform, delay_s

    def __getattr__(self, name):
        return getattr(self._platform, name)

    async def follow(self, thread_id, *, request_timeout_s):
        return _LateEvents(await self._platform.follow(thread_id, request_timeout_s=request_timeout_s), self._delay_s)


async def test_the_resume_debounce_counts_from_when_the_platform_saw_the_thread_idle(tmp_path):
    # The completion's events wait 0.2 s on their way to the worker: the 50 ms debounce has
    # held by the time the worker takes them, so the idle it records spans the wait too.
    late_s = 0.2
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env,
                        platform=_LatePlatform(ExtensionIpc(sim.env), late_s))
        with anyio.fail_after(30):
            assert await worker.run() is JobState.RESUMED
    resume_idle = [row for row in build_explanation(store, job)["timeline"]
                   if row["trigger"] == "idle_stable" and (row["machine"], row["to"]) == ("delivery", "sending")]
    assert len(resume_idle) == 1 and resume_idle[0]["evidence"]["idleMs"] >= late_s * 1000


async def test_the_idle_debounce_is_due_its_interval_after_the_fact_however_long_the_steps_took(tmp_path, monkeypatch):
    armed = []
    call_at = timers.call_at

    def recording_call_at(when, callback, *args):
        if args and isinstance(args[0], policy.TimerFired) and args[0].timer == "idle":
            armed.append((when, worker._item_at))
        return call_at(when, callback, *args)

    monkeypatch.setattr(timers, "call_at", recording_call_at)
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env)
        with anyio.fail_after(30):
            assert await worker.run() is JobState.RESUMED
    assert len(armed) == 2  # before the compaction and before the resume
    for when, fact_at in armed:
        assert when == pytest.approx(fact_at + FAST.idle_stable_s, abs=1e-6)


# --- the handoff: validated while the compaction runs, its identity checked at the resume ------------


def _validations(monkeypatch) -> list[object]:
    """The handoffs given to each full validation of a handoff's content from now on."""
    from rekall.store import handoff as handoff_module

    seen: list[object] = []
    real = handoff_module.validate_handoff

    def counted(value):
        seen.append(value)
        return real(value)

    monkeypatch.setattr(handoff_module, "validate_handoff", counted)
    return seen


async def test_the_handoff_is_validated_once_while_the_compaction_runs_not_at_the_resume(tmp_path, monkeypatch):
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        validations = _validations(monkeypatch)
        worker = Worker(store, sim.thread_id, job, settings=FAST, env=sim.env)
        states_at_verify: list[JobState] = []
        real = store.verify_sealed_handoff

        def noted(*args):
            states_at_verify.append((worker.state, len(validations)))
            return real(*args)

        monkeypatch.setattr(store, "verify_sealed_handoff", noted)
        with anyio.fail_after(30):
            assert await worker.run() is JobState.RESUMED
        assert len(validations) == 1
        # First just after the compact request left, while the compaction runs (nothing validated
        # yet), then at the resume, where only the bytes' identity is checked: nothing is validated again.
        (ahead, validated_before), at_resume = states_at_verify
        assert ahead in (JobState.REQUESTING, JobState.ACCEPTED) and validated_before == 0
        assert at_resume == (JobState.WAITING_FOR_RESUME_IDLE, 1)


async def test_at_the_resume_the_handoff_is_read_again_and_compared_with_the_validated_bytes_not_hashed_again(
        tmp_path, monkeypatch):
    from rekall.store import handoff as handoff_module

    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        path = store.handoff_path(sim.thread_id, job)
        reads, hashed = [], []
        real_read, real_hash = handoff_module.read_private, handoff_module.sha256_hex
        monkeypatch.setattr(handoff_module, "read_private",
                            lambda where, **kw: (reads.append(where), real_read(where, **kw))[1])
        monkeypatch.setattr(handoff_module, "sha256_hex", lambda data: (hashed.append(data), real_hash(data))[1])
        assert await run(store, sim, job) is JobState.RESUMED
        # Read twice (while the compaction ran, and at the resume), hashed once: the second read's
        # bytes were compared with the first's.
        assert reads == [path, path] and hashed == [path.read_bytes()]


def _after_the_validation_ahead(store, monkeypatch, change) -> None:
    """Run ``change`` right after the handoff is validated while the compaction runs."""
    real = store.verify_sealed_handoff

    def then_changed(thread_id, job_id, expected, validated=None):
        verified = real(thread_id, job_id, expected, validated)
        if validated is None:  # the validation ahead (the resume's check passes what it validated)
            change()
        return verified

    monkeypatch.setattr(store, "verify_sealed_handoff", then_changed)


async def test_a_handoff_rewritten_in_place_with_its_size_and_times_kept_fails_the_job_before_the_continuation(
        tmp_path, monkeypatch):
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        path = store.handoff_path(sim.thread_id, job)

        def rewrite_in_place() -> None:
            before, data = os.stat(path), path.read_bytes()
            at = data.index(b'"summary": "') + len(b'"summary": "')
            with open(path, "r+b") as handle:
                handle.seek(at)
                handle.write(b"X" if data[at:at + 1] != b"X" else b"Y")
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
            assert os.stat(path).st_size == before.st_size and path.read_bytes() != data

        _after_the_validation_ahead(store, monkeypatch, rewrite_in_place)
        assert await run(store, sim, job) is JobState.FAILED
        status = store.read_status(sim.thread_id)
        assert status.errorCode == "handoff_changed" and "SHA-256 differs" in status.error
        assert len(sim.compact_requests) == 1 and sim.start_turn_requests == []


async def test_the_start_turn_text_is_the_continuation_of_the_saved_handoff(tmp_path):
    from rekall.worker.continuation import continuation_text

    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        assert await run(store, sim, job) is JobState.RESUMED
        record = store.verify_handoff(sim.thread_id, job, store.read_status(sim.thread_id).handoffSha256)
        expected = continuation_text(record, str(store.handoff_path(sim.thread_id, job)))
        sent = sim.start_turn_requests[0].params["turnStart"]["request"]["input"][0]["text"]
        assert sent == expected


async def test_a_handoff_changed_after_it_was_validated_fails_the_job_before_the_continuation(tmp_path, monkeypatch):
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        path = store.handoff_path(sim.thread_id, job)

        def append_a_space() -> None:
            with open(path, "ab") as handle:
                handle.write(b" ")

        _after_the_validation_ahead(store, monkeypatch, append_a_space)
        assert await run(store, sim, job) is JobState.FAILED
        status = store.read_status(sim.thread_id)
        assert status.errorCode == "handoff_changed" and status.outcomeMayBeUnknown is False
        assert "changed after it was saved (SHA-256 differs)" in status.error
        assert len(sim.compact_requests) == 1 and sim.start_turn_requests == []


async def test_on_the_extension_a_job_without_a_continuation_says_its_handoff_was_not_delivered_and_why(tmp_path):
    from rekall.adapters.extension.platform import INJECTION_LIMIT

    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs", {**HANDOFF, "resume": False})
        assert await run(store, sim, job) is JobState.COMPLETED
        assert not sim.start_turn_requests
    status = store.read_status(sim.thread_id)
    assert (status.handoffDelivery, status.handoffDeliveryNote) == ("not_delivered", INJECTION_LIMIT)
    (row,) = [r for r in build_explanation(store, job)["timeline"] if r["trigger"] == "compaction_completed"]
    assert row["evidence"]["injectionLimit"] == INJECTION_LIMIT  # journaled with the transition it decided
    assert "not delivered after the compaction: the VS Code extension's IPC router has no way" in \
        build_explanation(store, job)["outcome"]


async def test_with_injection_turned_off_the_status_names_the_setting(tmp_path):
    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs", {**HANDOFF, "resume": False})
        off = FAST._replace(inject_handoff=False)
        assert await run(store, sim, job, off) is JobState.COMPLETED
    status = store.read_status(sim.thread_id)
    assert status.handoffDeliveryNote == "injection is turned off (REKALL_INJECT_HANDOFF=off)"


async def test_a_continuation_whose_delivery_the_plugins_hook_already_claimed_is_never_sent_and_the_job_completes(
        tmp_path):
    from rekall.store.delivery import DeliveryKey, take

    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        assert take(store.paths.root, DeliveryKey(sim.thread_id, job=job), "hook").won  # the user's turn started first
        assert await run(store, sim, job) is JobState.COMPLETED
        assert sim.start_turn_requests == []
    status = store.read_status(sim.thread_id)
    assert (status.resumeSkipped, status.outcomeMayBeUnknown) == ("handoff_delivered_by_hook", False)
    assert known(status.errorCode) is None and known(status.resumeTurnId) is None
    assert status.handoffDelivery == "hook"  # the claim, folded into the job's record
    explanation = build_explanation(store, job)
    assert explanation["timeline"][-1]["trigger"] == "handoff_not_delivered"
    assert explanation["outcome"].endswith(
        "No continuation: the compaction completed, then the user's turn started and the plugin's "
        "SessionStart(compact) hook delivered the handoff at its start, just before the continuation: none was "
        f"sent. The handoff was handed to Codex by the plugin's SessionStart(compact) hook for the next model "
        f"request at {status.handoffHookAt}; no turn was started.")


async def test_the_continuation_claims_the_delivery_before_it_is_sent_so_the_hook_stays_silent(tmp_path):
    from rekall.surfaces.session_hook import answer
    from rekall.store.delivery import DeliveryKey, holder

    async with SimulatedOwner() as sim:
        store, job = await schedule(sim, tmp_path / "jobs")
        assert await run(store, sim, job) is JobState.RESUMED
        assert len(sim.start_turn_requests) == 1
    assert holder(store.paths.root, DeliveryKey(sim.thread_id, job=job))["route"] == "continuation"
    hook_input = {"session_id": sim.thread_id, "hook_event_name": "SessionStart", "source": "compact"}
    assert answer(json.dumps(hook_input).encode(), {"REKALL_JOBS_DIR": str(tmp_path / "jobs")}) is None
    assert store.read_status(sim.thread_id).handoffDelivery == "continuation"
