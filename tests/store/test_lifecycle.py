from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rekall.kernel.errors import InvalidInput
from rekall.states import IllegalTransition, JobState, TransitionRefused
from rekall.states.status import ABSENT, wire
from rekall.store import FileOps, JobStore, JournalUnusable
from rekall.store.journal import scan_journal
from rekall.store.wire import RECORD_VERSION
from rekall.testing import FakeClock

from tests.jobkit import FINGERPRINT, handoff, idle, me, new_thread, run, schedule, snapshot
from tests.states.reference import ILLEGAL, REFUSED, TRIGGERS, Reference, evidence_for


class Crash(BaseException):
    """The process dies here: no cleanup code runs."""


class Faults:
    """A FileOps whose next write or fsync can tear, crash or fail, once."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.cut = 0
        self.writes: list[tuple[str, JobState | None]] = []
        self.watch = None

    def write(self, fd: int, data: bytes) -> int:
        if self.watch is not None:
            self.writes.append((os.readlink(f"/proc/self/fd/{fd}"), self.watch.state))
        if self.mode == "torn":
            self.mode = None
            os.write(fd, data[: self.cut])
            raise Crash
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        mode, self.mode = self.mode, None
        if mode == "crash_before_fsync":
            raise Crash
        if mode == "eio":
            raise OSError(errno.EIO, "I/O error")
        self.mode = mode
        os.fsync(fd)

    def ops(self) -> FileOps:
        return FileOps(write=self.write, fsync=self.fsync)


OLD_JOURNALS = Path(__file__).resolve().parents[2] / "fixtures" / "store" / "ed555ee-journals.json"


def _started(store: JobStore, thread: str, resume: bool = True):
    created = schedule(store, thread, resume=resume)
    lifecycle = store.open_lifecycle(thread, created.job_id)
    lifecycle.fire("worker_started", **me(created.job_id))
    return created.job_id, lifecycle


def test_a_resumed_job_records_every_field_with_monotonic_durations(store: JobStore, clock: FakeClock, thread: str):
    job = schedule(store, thread).job_id
    assert run(store, clock, thread, job, "resumed") is JobState.RESUMED
    status = store.read_status(thread)
    assert status.state == status.status == "resumed"
    assert status.contextTokensBefore == 90_000 and status.contextTokensAfter == 30_000
    assert status.tokensReclaimed == 60_000 and status.reclaimedFraction == pytest.approx(2 / 3)
    assert status.compactionDurationMs == 1_000 and status.resumeDelayMs == 1_000
    assert status.resumeTurnId == "turn-9" and status.outcomeMayBeUnknown is False
    assert status.resumeCheckContextTokens == 31_000
    assert status.statusFileProblem is ABSENT
    assert "summary" not in wire(status)  # the handoff text stays in its own file


def test_a_journal_written_before_the_platform_was_named_is_read_unchanged(tmp_path: Path):
    fixture = json.loads(OLD_JOURNALS.read_text(encoding="utf-8"))
    job_id, job = next((job_id, job) for job_id, job in fixture["expected"]["jobs"].items() if job["name"] == "resumed")
    store = JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "jobs")})
    path = store.journal_path(job["thread"], job_id)
    # ed555ee's journal, as rekall wrote it before records named the platform: version 1, same shape.
    old = b"".join(_as_version_1(line) for line in fixture["files"][path.name].encode().splitlines(keepends=True))
    assert RECORD_VERSION == 3 and old.count(b'"v":1,') == len(old.splitlines()) > 5
    path.write_bytes(old)
    os.chmod(path, 0o600)
    replay = store.load(job["thread"], job_id)
    assert replay.state is JobState.RESUMED and [t.trigger for t in replay.transitions] == job["triggers"]
    assert path.read_bytes() == old  # read, never rewritten


def _as_version_1(line: bytes) -> bytes:
    import json
    import zlib

    record = json.loads(line)["record"]
    body = json.dumps({**record, "v": 1}, ensure_ascii=False, separators=(",", ":")).encode()
    return b'{"crc32":"%08x","record":%s}\n' % (zlib.crc32(body), body)


def test_a_skip_at_the_resume_check_records_the_second_check(store: JobStore, clock: FakeClock, thread: str):
    job = schedule(store, thread).job_id
    assert run(store, clock, thread, job, "skipped_at_resume") is JobState.SKIPPED
    status = store.read_status(thread)
    assert status.resumeSkipReason == "more_than_60_percent_used"
    assert status.resumeCheckWindowUsedFraction == 0.7
    assert (status.resumeCheckContextTokens, status.resumeCheckModelContextWindow) == (70_000, 100_000)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="names file descriptors through /proc")
def test_the_journal_is_written_before_memory_changes_and_the_status_after(jobs_dir: Path, clock: FakeClock,
                                                                          thread: str):
    faults = Faults()
    store = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock, fs=faults.ops())
    job, lifecycle = _started(store, thread)
    faults.watch = lifecycle
    lifecycle.fire("idle_stable", **idle(90_000))
    (journal, state_then), (status_temp, state_later) = faults.writes
    assert journal.endswith(".journal.jsonl") and state_then is JobState.WAITING_FOR_IDLE
    assert status_temp.endswith(".tmp") and state_later is JobState.REQUESTING


@pytest.mark.parametrize(("trigger", "evidence", "error"), [
    ("handoff_delivered", {"turnId": "t"}, IllegalTransition),
    ("idle_stable", idle(90_000, boundaryFingerprint="someone typed"), TransitionRefused),
    ("idle_stable", {"idleMs": 1}, InvalidInput),
])
def test_an_illegal_or_refused_event_changes_neither_memory_nor_disk(store: JobStore, thread: str, trigger, evidence,
                                                                     error):
    _, lifecycle = _started(store, thread)
    before = snapshot(store.root)
    with pytest.raises(error):
        lifecycle.fire(trigger, **evidence)
    assert lifecycle.state is JobState.WAITING_FOR_IDLE
    assert snapshot(store.root) == before


@pytest.mark.parametrize("cut", [0, 1, 30, 200, -1])
def test_a_crash_in_the_middle_of_an_append_loses_only_that_transition(jobs_dir: Path, clock: FakeClock,
                                                                       thread: str, cut: int):
    faults = Faults()
    store = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock, fs=faults.ops())
    job, lifecycle = _started(store, thread)
    faults.mode, faults.cut = "torn", cut  # -1: everything but the newline
    with pytest.raises(Crash):
        lifecycle.fire("idle_stable", **idle(90_000))
    # The process is gone; a new one opens the job.
    reopened = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock).open_lifecycle(thread, job)
    assert reopened.state is JobState.WAITING_FOR_IDLE
    assert scan_journal(store.journal_path(thread, job)).torn_bytes == 0  # the torn tail was cut
    assert reopened.fire("idle_stable", **idle(90_000)) is JobState.REQUESTING
    assert [r.seq for r in scan_journal(store.journal_path(thread, job)).records] == [0, 1, 2]


def test_a_crash_after_the_write_but_before_fsync_may_keep_the_unacknowledged_record(
        jobs_dir: Path, clock: FakeClock, thread: str):
    faults = Faults()
    store = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock, fs=faults.ops())
    job, lifecycle = _started(store, thread)
    faults.mode = "crash_before_fsync"
    with pytest.raises(Crash):
        lifecycle.fire("idle_stable", **idle(90_000))
    # A process crash keeps the page cache: the whole record is there, never half of it, and
    # the status file (written after the journal) still shows the acknowledged state.
    reopened = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock)
    assert reopened.open_lifecycle(thread, job).state is JobState.REQUESTING
    status = reopened.read_status(thread)
    # The lock still names a live process (this one), so a file one record behind is the
    # ordinary gap between the journal append and the status rewrite, not a problem.
    assert status.state == "requesting" and status.statusFileProblem is ABSENT


def test_a_failed_fsync_leaves_the_job_where_it_was_and_the_handle_unusable(jobs_dir: Path, clock: FakeClock,
                                                                           thread: str):
    faults = Faults()
    store = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)}, clock=clock, fs=faults.ops())
    job, lifecycle = _started(store, thread)
    faults.mode = "eio"
    with pytest.raises(JournalUnusable):
        lifecycle.fire("idle_stable", **idle(90_000))
    assert lifecycle.state is JobState.WAITING_FOR_IDLE
    with pytest.raises(JournalUnusable):
        lifecycle.fire("cancel", reason="explicit_cancellation")
    assert store.open_lifecycle(thread, job).state is JobState.WAITING_FOR_IDLE


def test_a_status_file_that_cannot_be_written_does_not_undo_the_transition(store: JobStore, thread: str, mocker):
    job, lifecycle = _started(store, thread)
    full = mocker.patch.object(FileOps, "atomic_replace", side_effect=OSError(errno.ENOSPC, "No space left on device"))
    assert lifecycle.fire("idle_stable", **idle(90_000)) is JobState.REQUESTING
    assert "No space" in lifecycle.status_error
    full.assert_called_once()
    mocker.stopall()
    status = store.read_status(thread)
    # The lock still names a live process (this one), so a file one record behind is the
    # ordinary gap between the journal append and the status rewrite, not a problem.
    assert status.state == "requesting" and status.statusFileProblem is ABSENT


def test_notes_are_journaled_without_changing_the_state(store: JobStore, thread: str):
    job, lifecycle = _started(store, thread)
    lifecycle.note("reconnected", ownerId="o2", revision=12, adapter=object())
    assert lifecycle.state is JobState.WAITING_FOR_IDLE
    note = store.load(thread, job).notes[0]
    assert (note.kind, note.detail["ownerId"], note.seq) == ("reconnected", "o2", 2)
    assert note.detail["adapter"].startswith("<object")
    with pytest.raises(InvalidInput):
        lifecycle.note("", x=1)


def test_worker_started_is_refused_for_another_job(store: JobStore, thread: str):
    created = schedule(store, thread)
    lifecycle = store.open_lifecycle(thread, created.job_id)
    with pytest.raises(TransitionRefused, match="owns_job"):
        lifecycle.fire("worker_started", **me(new_thread()))


class LifecycleOnDisk(RuleBasedStateMachine):
    """The store-backed lifecycle against the reference model, with restarts from disk."""

    @initialize(resume=st.booleans())
    def start(self, resume: bool) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rk-"))
        self.clock = FakeClock()
        self.thread = new_thread()
        self.store = JobStore.open({"REKALL_JOBS_DIR": str(self.dir / "jobs")}, clock=self.clock)
        self.job = self.store.create_job(self.thread, handoff=handoff(resume), user_fingerprint=FINGERPRINT).job_id
        self.lifecycle = self.store.open_lifecycle(self.thread, self.job)
        self.model = Reference(self.job, resume, FINGERPRINT)

    def teardown(self) -> None:
        if hasattr(self, "dir"):
            self.lifecycle.close()
            shutil.rmtree(self.dir)

    @rule(trigger=st.sampled_from(TRIGGERS), data=st.data())
    def fire(self, trigger: str, data: st.DataObject) -> None:
        self._fire(trigger, data)

    @rule(data=st.data())
    def fire_progress(self, data: st.DataObject) -> None:
        self._fire(self.model.progress, data)

    def _fire(self, trigger: str, data: st.DataObject) -> None:
        evidence = data.draw(evidence_for(trigger, self.job))
        want = self.model.after(trigger, evidence)
        self.clock.advance(25)
        if want in (ILLEGAL, REFUSED):
            before = snapshot(self.store.root)
            with pytest.raises(IllegalTransition if want == ILLEGAL else TransitionRefused):
                self.lifecycle.fire(trigger, **evidence)
            assert snapshot(self.store.root) == before
            return
        assert isinstance(want, Reference)
        assert self.lifecycle.fire(trigger, **evidence) is want.state
        self.model = want

    @precondition(lambda self: hasattr(self, "lifecycle"))
    @rule()
    def restart(self) -> None:
        self.lifecycle.close()
        self.store = JobStore.open({"REKALL_JOBS_DIR": str(self.dir / "jobs")}, clock=self.clock)
        self.lifecycle = self.store.open_lifecycle(self.thread, self.job)

    @invariant()
    def disk_memory_and_model_agree(self) -> None:
        if hasattr(self, "lifecycle"):
            assert self.lifecycle.state is self.model.state
            view = self.lifecycle.view
            assert (view.compaction, view.delivery, view.route) == (self.model.compaction, self.model.delivery,
                                                                    self.model.route)
            status = self.store.read_status(self.thread)
            assert status.state == self.model.state.value and status.statusFileProblem is ABSENT


TestLifecycleOnDisk = LifecycleOnDisk.TestCase
TestLifecycleOnDisk.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)


def test_a_held_status_file_is_written_once_by_save_status_and_readers_answer_from_the_journal_meanwhile(
        store: JobStore, thread: str, mocker):
    job, lifecycle = _started(store, thread)
    writes = mocker.spy(FileOps, "atomic_replace")
    lifecycle.hold_status = True
    assert lifecycle.fire("idle_stable", **idle(90_000)) is JobState.REQUESTING
    assert writes.call_count == 0
    on_disk = store.status_file.read(thread)[0]
    assert on_disk["state"] == "waiting_for_idle"
    # The lock names a live process (this one): the journal answers, the file waits for its writer.
    assert store.read_status(thread).state == "requesting"
    lifecycle.hold_status = False
    lifecycle.save_status()
    lifecycle.save_status()  # nothing new since: no second write
    assert writes.call_count == 1
    assert store.status_file.read(thread)[0] == lifecycle.derived_status


def test_a_worker_that_died_between_the_two_records_of_a_completion_leaves_a_compacted_job_its_reaper_can_end(
        store: JobStore, clock: FakeClock, thread: str):
    job = schedule(store, thread).job_id
    assert run(store, clock, thread, job, "skipped") is JobState.SKIPPED
    path = store.journal_path(thread, job)
    lines = path.read_bytes().splitlines(keepends=True)
    assert b'"type":"delivery"' in lines[-1] and b'"route_chosen"' in lines[-1]
    path.write_bytes(b"".join(lines[:-1]))  # the route's record never reached the disk
    replay = store.load(thread, job)
    assert replay.state is JobState.COMPACTED and replay.states_taken[-2:] == ["accepted", "compacted"]
    with store.open_lifecycle(thread, job) as lifecycle:
        assert lifecycle.fire("fail", errorCode="worker_lost", error="gone") is JobState.FAILED
    status = store.read_status(thread)
    assert status.state == "failed" and status.outcomeMayBeUnknown is False  # nothing was in flight
