"""The worker's policy as a table: job, thread facts, event and memo in; steps and memo out.

No sockets, no sleeps, no clock: times are arguments. Each row names the behaviour it pins;
tests/worker/test_reactor.py and tests/test_scenarios.py drive the same rules end to end.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from rekall.kernel import events as ev
from rekall.kernel.settings import WorkerSettings
from rekall.adapters.contract import ThreadSnapshot
from rekall.kernel.records import Acted, Failure, ThreadFacts
from rekall.worker.policy import (
    WAITING_ON,
    Arm,
    Began,
    CancelSignalled,
    DeadlinePassed,
    Decision,
    DeliveryTaken,
    Disarm,
    Fire,
    Fired,
    HandoffChecked,
    Job,
    Memo,
    Note,
    Observed,
    Reconnect,
    ReconnectDone,
    RequestDone,
    Running,
    Send,
    TimerFired,
    VerifyHandoff,
    decide,
    fail,
)
from rekall.states import TERMINAL_STATES, DeliveryState, JobState
from tests.jobkit import view_in

S = JobState
SETTINGS = WorkerSettings(idle_stable_s=1.0, deadline_s=60.0, settle_s=5.0, system_error_window_s=30.0)
FP = "fingerprint-of-the-scheduling-turn"
IDLE = ThreadFacts(runtime_status="idle", busy_reason=None, boundary_fingerprint=FP, layout_problem=None,
                   tokens=90_000, window=200_000, completed_compaction_ids=frozenset({"old"}))
BUSY = attrs.evolve(IDLE, runtime_status="inProgress", busy_reason="turn_running", user_turn_running=True)
MEMO = Memo(connected=True, baseline=frozenset({"old"}))
COMPACTED = attrs.evolve(IDLE, completed_compaction_ids=frozenset({"old", "c1"}), tokens=30_000)
COMMON = {"idleMs": 1000, "tokens": 90_000, "window": 200_000, "revision": 7, "boundaryFingerprint": FP}


def seen(facts: ThreadFacts = IDLE) -> ThreadSnapshot:
    return ThreadSnapshot("thread", facts, 7, "owner-1")


def job(state: JobState, *, resume: bool = True, tokens_before: Any = 90_000, sent: bool = False) -> Job:
    """What the rules read of a job in ``state`` (``sent``: its injection journaled and sent)."""
    view = view_in("j", state, {}, sent=sent)
    return Job(state, SETTINGS, FP, resume, tokens_before, view.delivery, view.route)


def idle_timer(state: JobState, serial: int = 1, since: float = 0.0) -> Memo:
    return attrs.evolve(MEMO, serial=serial, idle=Running(serial, since, state))


LOST = Failure("connection_lost", "compact: connection lost while sending; outcome unknown", "unknown")
NOT_SENT = Failure("connection_lost", "compact: not sent, the IPC connection is closed", "not_delivered")
TIMED_OUT = Failure("request_timeout", "compact: no response within 12 s; outcome unknown", "unknown")
IN_PROGRESS = attrs.evolve(IDLE, running_compaction_ids=frozenset({"theirs"}))
REFUSE_SECOND = fail("compaction_in_progress", "the thread shows a compaction in progress (theirs) that this job "
                     "did not request; no second compaction was requested")
UNATTRIBUTABLE = fail("compaction_not_attributable", "2 compactions appeared on the thread after this job's compact "
                      "request (c1, c2); the owner's answer names none, so which one is this job's cannot be told. "
                      "None was claimed and no continuation was started; nothing was retried", "unknown")
STUCK = attrs.evolve(IDLE, runtime_status="systemError", busy_reason="runtime_systemError")
INJECTS = attrs.evolve(MEMO, inject=True)
NO_WAY_IN = attrs.evolve(MEMO, inject=False, injection_limit="no way in")
MOVED_ON = attrs.evolve(BUSY, boundary_fingerprint="a-newer-user-turn", goal="none")
HOOK_DELIVERED = Fire("handoff_not_delivered", {
    "errorCode": "handoff_delivered_by_hook", "delivery": "hook",
    "error": "the plugin's SessionStart(compact) hook delivered the handoff at the start of the turn that ran after "
             "the compaction, before the thread was idle again"})

# (behaviour, job, facts, event, memo, steps, memo after (None: unchanged), at, now)
ROWS: list[tuple[Any, ...]] = [
    # --- waiting for idle: the debounce
    ("idle at the first snapshot arms the stable-idle timer", job(S.WAITING_FOR_IDLE), IDLE, Began(), MEMO,
     [Arm("idle", 1.0, 1)], idle_timer(S.WAITING_FOR_IDLE), 0.0, 0.0),
    ("the debounce counts from when the fact arrived, not from the worker's work", job(S.WAITING_FOR_IDLE), IDLE,
     Observed(ev.ThreadIdle(7)), MEMO, [Arm("idle", 0.75, 1)], idle_timer(S.WAITING_FOR_IDLE, since=10.0),
     10.0, 10.25),
    ("a busy thread arms nothing", job(S.WAITING_FOR_IDLE), BUSY, Began(), MEMO, [], None, 0.0, 0.0),
    ("busy before the debounce ends disarms the timer", job(S.WAITING_FOR_IDLE), BUSY,
     Observed(ev.ThreadBusy("turn_running", 8)), idle_timer(S.WAITING_FOR_IDLE), [Disarm("idle")],
     attrs.evolve(MEMO, serial=1), 0.0, 0.5),
    ("idle that held asks for the compaction, retaking the baseline", job(S.WAITING_FOR_IDLE),
     attrs.evolve(IDLE, completed_compaction_ids=frozenset({"old", "meanwhile"})), TimerFired("idle", 1),
     idle_timer(S.WAITING_FOR_IDLE),
     [Fire("idle_stable", COMMON, then="send_compact")],
     attrs.evolve(MEMO, serial=1, baseline=frozenset({"old", "meanwhile"})), 1.0, 1.0),
    ("a timer of a cancelled debounce is ignored", job(S.WAITING_FOR_IDLE), IDLE, TimerFired("idle", 1),
     idle_timer(S.WAITING_FOR_IDLE, serial=2), [], None, 1.0, 1.0),
    ("idle that held while disconnected does nothing", job(S.WAITING_FOR_IDLE), IDLE, TimerFired("idle", 1),
     attrs.evolve(idle_timer(S.WAITING_FOR_IDLE), connected=False), [], None, 1.0, 1.0),
    ("a timer started in another state is restarted with this state's length", job(S.WAITING_FOR_IDLE), IDLE,
     Observed(ev.Telemetry(1, 2)), idle_timer(S.REQUESTING), [Disarm("idle"), Arm("idle", 1.0, 2)],
     idle_timer(S.WAITING_FOR_IDLE, serial=2), 0.0, 0.0),
    ("the compact request goes out only when idle_stable led to requesting", job(S.REQUESTING), IDLE,
     Fired("send_compact", S.REQUESTING), MEMO, [Send("compact")], None, 0.0, 0.0),
    ("idle_stable refused by its guard sends nothing", job(S.WAITING_FOR_IDLE), IDLE,
     Fired("send_compact", S.WAITING_FOR_IDLE), MEMO, [], None, 0.0, 0.0),
    # --- a compaction this job did not ask for
    ("a compaction in progress while waiting fails the job instead of compacting twice", job(S.WAITING_FOR_IDLE),
     IN_PROGRESS, Began(), MEMO, [REFUSE_SECOND], None, 0.0, 0.0),
    ("the request step looks for a compaction in progress again", job(S.WAITING_FOR_IDLE), IN_PROGRESS,
     TimerFired("idle", 1), idle_timer(S.WAITING_FOR_IDLE), [REFUSE_SECOND], attrs.evolve(MEMO, serial=1),
     1.0, 1.0),
    # --- the user moves on
    ("new user input before the resume cancels", job(S.WAITING_FOR_IDLE),
     attrs.evolve(IDLE, boundary_fingerprint="x", goal="none"), Observed(ev.UserBoundaryChanged("x", False)), MEMO,
     [Fire("cancel", {"reason": "new_user_input"})], None, 0, 0),
    ("new user input during the compaction cancels", job(S.ACCEPTED),
     attrs.evolve(BUSY, boundary_fingerprint="x", goal="paused"), Observed(ev.UserBoundaryChanged("x", False)), MEMO,
     [Fire("cancel", {"reason": "new_user_input"})], None, 0, 0),
    ("where goals cannot be told, a new user-bearing turn cancels as a new turn, not as input",
     job(S.WAITING_FOR_IDLE), attrs.evolve(IDLE, boundary_fingerprint="x"), Observed(ev.UserBoundaryChanged("x", False)),
     MEMO, [Fire("cancel", {"reason": "new_turn"})], None, 0, 0),
    ("a goal that becomes active cancels with that reason, even before its turn starts", job(S.WAITING_FOR_IDLE),
     attrs.evolve(IDLE, goal="active"), Observed(ev.GoalChanged("active")), MEMO,
     [Fire("cancel", {"reason": "goal_active"})], None, 0, 0),
    ("a goal that becomes active after the compaction cancels before the continuation is sent",
     job(S.WAITING_FOR_RESUME_IDLE), attrs.evolve(BUSY, boundary_fingerprint="x", goal="active"),
     Observed(ev.GoalChanged("active")), MEMO, [Fire("cancel", {"reason": "goal_active"})], None, 0, 0),
    ("a paused goal changes nothing", job(S.WAITING_FOR_IDLE), attrs.evolve(BUSY, goal="paused"),
     Observed(ev.GoalChanged("paused")), MEMO, [], None, 0, 0),
    ("a stopped user turn cancels", job(S.WAITING_FOR_RESUME_IDLE), attrs.evolve(IDLE, interrupted=True),
     Observed(ev.UserBoundaryChanged(FP, True)), MEMO, [Fire("cancel", {"reason": "user_turn_stopped"})], None, 0, 0),
    ("once resuming, the continuation's own turn is not the user moving on", job(S.RESUMING),
     attrs.evolve(BUSY, boundary_fingerprint="ours"), Observed(ev.UserBoundaryChanged("ours", False)), MEMO,
     [], None, 0.0, 0.0),
    ("a layout rekall cannot read fails the job", job(S.WAITING_FOR_IDLE),
     attrs.evolve(IDLE, layout_problem="no turns"), Observed(ev.LayoutIncompatible("no turns")), MEMO,
     [fail("layout_incompatible", "unsupported thread state layout: no turns")], None, 0.0, 0.0),
    ("a layout problem seen in the facts fails the job whatever event came", job(S.ACCEPTED),
     attrs.evolve(IDLE, layout_problem="no turns"), Observed(ev.Telemetry(1, 2)), MEMO,
     [fail("layout_incompatible", "unsupported thread state layout: no turns")], None, 0.0, 0.0),
    ("a protocol change fails the job with its code and the text saying which side is behind",
     job(S.WAITING_FOR_IDLE), IDLE,
     Observed(ev.ProtocolChanged("thread-stream-state-changed", 99, "the extension sent ...: update rekall")), MEMO,
     [fail("protocol_version_unsupported", "the extension sent ...: update rekall")], None, 0, 0),
    # --- the compact request's answer
    ("an answered compact request is accepted", job(S.REQUESTING), BUSY, RequestDone("compact", Acted()), MEMO,
     [Fire("compaction_accepted", {"ownerId": "owner-1"}, then="consider")], None, 0.0, 0.0),
    ("a compact request that never left fails with a known outcome", job(S.REQUESTING), IDLE,
     RequestDone("compact", Acted(NOT_SENT)), MEMO, [fail("connection_lost", NOT_SENT.message, "not_delivered")],
     None, 0.0, 0.0),
    ("a lost answer keeps watching and arms the settle window", job(S.REQUESTING), IDLE,
     RequestDone("compact", Acted(LOST)), MEMO,
     [Note("compact_ack_lost", {"error": LOST.message}), Arm("idle", 5.0, 1)],
     attrs.evolve(idle_timer(S.REQUESTING), outcome_unknown=True), 0.0, 0.0),
    ("a timed-out compact request fails with an unknown outcome", job(S.REQUESTING), IDLE,
     RequestDone("compact", Acted(TIMED_OUT)), MEMO, [fail("request_timeout", TIMED_OUT.message, "unknown")],
     None, 0.0, 0.0),
    ("a late answer after the completion changes nothing", job(S.WAITING_FOR_RESUME_IDLE), BUSY,
     RequestDone("compact", Acted()), MEMO, [], None, 0.0, 0.0),
    # --- the unknown outcome settles
    ("a quiet owner settles an unknown outcome", job(S.REQUESTING), IDLE, TimerFired("idle", 1),
     attrs.evolve(idle_timer(S.REQUESTING), outcome_unknown=True),
     [Fire("outcome_settled", {"idle": True, "compactionsInProgress": 0, "quietMs": 5000, "settleWindowS": 5.0,
                               "runtimeStatus": "idle", "ownerId": "owner-1", "revision": 7})],
     attrs.evolve(MEMO, serial=1, outcome_unknown=True), 0.0, 5.0),
    ("a compaction in progress holds off the settle window", job(S.ACCEPTED), IN_PROGRESS,
     Observed(ev.ThreadIdle()), attrs.evolve(idle_timer(S.ACCEPTED), outcome_unknown=True), [Disarm("idle")],
     attrs.evolve(MEMO, serial=1, outcome_unknown=True), 0.0, 0.0),
    # --- completion
    ("a completion seen while requesting proves acceptance", job(S.REQUESTING), COMPACTED,
     Observed(ev.CompactionCompleted("c1")), MEMO,
     [Fire("compaction_accepted", {"ownerId": "owner-1", "inferredFrom": "completion_observed"}, then="completion")],
     None, 0.0, 0.0),
    ("after the inferred acceptance the completion is recorded", job(S.ACCEPTED), COMPACTED,
     Fired("completion", S.ACCEPTED), MEMO,
     [Fire("compaction_completed", {"compactionId": "c1", "tokens": 30_000, "window": 200_000, "revision": 7},
           then="consider")], None, 0.0, 0.0),
    ("telemetry that has not caught up is awaited briefly", job(S.ACCEPTED),
     attrs.evolve(COMPACTED, tokens=90_000), Observed(ev.CompactionCompleted("c1")), MEMO, [Arm("telemetry", 1.0, 0)],
     attrs.evolve(MEMO, telemetry_wait_armed=True), 0.0, 0.0),
    ("after the brief wait the completion is recorded with the telemetry there is", job(S.ACCEPTED),
     attrs.evolve(COMPACTED, tokens=90_000), TimerFired("telemetry", 0), attrs.evolve(MEMO, telemetry_wait_armed=True),
     [Fire("compaction_completed", {"compactionId": "c1", "tokens": 90_000, "window": 200_000, "revision": 7},
           then="consider")], attrs.evolve(MEMO, telemetry_wait_armed=True, telemetry_wait_over=True), 0.0, 0.0),
    ("without a resume nothing waits for telemetry", job(S.ACCEPTED, resume=False),
     attrs.evolve(COMPACTED, tokens=90_000), Observed(ev.CompactionCompleted("c1")), MEMO,
     [Fire("compaction_completed", {"compactionId": "c1", "tokens": 90_000, "window": 200_000, "revision": 7},
           then="consider")], None, 0.0, 0.0),
    ("of two compactions since the request none can be told to be this job's: none is claimed, nothing resumes",
     job(S.ACCEPTED), attrs.evolve(COMPACTED, completed_compaction_ids=frozenset({"old", "c1", "c2"})),
     Observed(ev.CompactionCompleted("c1")), MEMO, [UNATTRIBUTABLE], None, 0.0, 0.0),
    ("a second compaction running beside a completed one makes it unattributable too", job(S.ACCEPTED),
     attrs.evolve(COMPACTED, running_compaction_ids=frozenset({"c2"})), Observed(ev.CompactionCompleted("c1")), MEMO,
     [UNATTRIBUTABLE], None, 0.0, 0.0),
    # --- the owner's record decides: the user's input after this job's compaction
    ("new user input after this job's compaction completed records it completed, with no continuation",
     job(S.ACCEPTED), attrs.evolve(COMPACTED, boundary_fingerprint="x", tokens=90_000, goal="none"),
     Observed(ev.UserBoundaryChanged("x", False)), MEMO,
     [Fire("compaction_completed", {"compactionId": "c1", "tokens": 90_000, "window": 200_000, "revision": 7,
                                    "userMovedOn": "new_user_input"}, then="consider")], None, 0.0, 0.0),
    ("a stopped user turn after this job's compaction completed records it completed too", job(S.ACCEPTED),
     attrs.evolve(COMPACTED, interrupted=True), Observed(ev.UserBoundaryChanged(FP, True)), MEMO,
     [Fire("compaction_completed", {"compactionId": "c1", "tokens": 30_000, "window": 200_000, "revision": 7,
                                    "userMovedOn": "user_turn_stopped"}, then="consider")], None, 0.0, 0.0),
    ("new user input after this job's compaction completed says the handoff is injected where it can be",
     job(S.ACCEPTED), attrs.evolve(COMPACTED, boundary_fingerprint="x", tokens=90_000, goal="none"),
     Observed(ev.UserBoundaryChanged("x", False)), INJECTS,
     [Fire("compaction_completed", {"compactionId": "c1", "tokens": 90_000, "window": 200_000, "revision": 7,
                                    "userMovedOn": "new_user_input", "inject": True}, then="consider")], None, 0, 0),
    ("a stopped user turn after this job's compaction completed says why the handoff is not injected where it "
     "cannot be", job(S.ACCEPTED), attrs.evolve(COMPACTED, interrupted=True),
     Observed(ev.UserBoundaryChanged(FP, True)), NO_WAY_IN,
     [Fire("compaction_completed", {"compactionId": "c1", "tokens": 30_000, "window": 200_000, "revision": 7,
                                    "userMovedOn": "user_turn_stopped", "injectionLimit": "no way in"},
           then="consider")], None, 0.0, 0.0),
    ("new user input while this job's compaction still runs cancels (its outcome is unknown)", job(S.ACCEPTED),
     attrs.evolve(BUSY, boundary_fingerprint="x", running_compaction_ids=frozenset({"c1"}), goal="none"),
     Observed(ev.UserBoundaryChanged("x", False)), MEMO, [Fire("cancel", {"reason": "new_user_input"})], None, 0, 0),
    ("a completed compaction from before the job is not this job's", job(S.ACCEPTED), IDLE,
     Observed(ev.Telemetry(90_000, 200_000)), MEMO, [], None, 0.0, 0.0),
    # --- the resume
    ("idle that held before the resume verifies the handoff, which if it passes lets idle_stable start the "
     "resume in the same round", job(S.WAITING_FOR_RESUME_IDLE), IDLE,
     TimerFired("idle", 1), idle_timer(S.WAITING_FOR_RESUME_IDLE),
     [VerifyHandoff(Fire("idle_stable", {"handoffVerified": True, **COMMON}, then="deliver"))],
     attrs.evolve(MEMO, serial=1, sent_at_boundary=FP), 1.0, 1.0),
    ("a handoff that changed fails before any continuation", job(S.WAITING_FOR_RESUME_IDLE), IDLE,
     HandoffChecked("sha256 differs"), MEMO,
     [fail("handoff_changed", "saved handoff failed verification: sha256 differs")], None, 0.0, 0.0),
    ("the continuation is sent only when idle_stable led to resuming", job(S.RESUMING), IDLE,
     Fired("deliver", S.RESUMING), MEMO, [Send("deliver")], None, 0.0, 0.0),
    ("a started turn resumes the job", job(S.RESUMING), BUSY, RequestDone("deliver", Acted(turn_id="t9",
                                                                                         turn_status=None)),
     MEMO, [Fire("handoff_delivered", {"turnId": "t9", "turnStatus": None})], None, 0.0, 0.0),
    ("a failed continuation fails with the delivery class it reports", job(S.RESUMING), IDLE,
     RequestDone("deliver", Acted(Failure("bad_ack", "no turn", "unknown"))), MEMO,
     [fail("bad_ack", "no turn", "unknown")], None, 0.0, 0.0),
    ("a continuation the plugin's hook delivered first ends the job completed, nothing sent", job(S.RESUMING),
     BUSY, DeliveryTaken("hook", "t.j.delivery"), MEMO, [HOOK_DELIVERED], None, 0.0, 0.0),
    ("a continuation whose claim another route holds fails, nothing sent", job(S.RESUMING), IDLE,
     DeliveryTaken("unknown", "t.j.delivery"), MEMO,
     [fail("handoff_claimed", "not sent: the handoff's delivery was already claimed by the unknown route "
                              "(t.j.delivery); it is never delivered twice", "not_delivered")], None, 0.0, 0.0),
    # --- a runtime stuck in systemError
    ("systemError after the user's turn arms its window", job(S.WAITING_FOR_IDLE), STUCK, Began(), MEMO,
     [Arm("system_error", 30.0, 1)], attrs.evolve(MEMO, serial=1, system_error=Running(1, 0.0)), 0.0, 0.0),
    ("systemError during the user's turn is not stuck", job(S.WAITING_FOR_IDLE),
     attrs.evolve(STUCK, user_turn_running=True), Began(), MEMO, [], None, 0.0, 0.0),
    ("systemError that held for the window ends the job", job(S.WAITING_FOR_IDLE), STUCK,
     TimerFired("system_error", 1), attrs.evolve(MEMO, serial=1, system_error=Running(1, 0.0)),
     [Fire("system_error_held", {"runtimeStatus": "systemError", "heldMs": 30_000, "windowS": 30.0, "revision": 7})],
     attrs.evolve(MEMO, serial=1), 30.0, 30.0),
    ("systemError that cleared disarms its window", job(S.WAITING_FOR_IDLE), BUSY, Observed(ev.ThreadBusy("x")),
     attrs.evolve(MEMO, serial=1, system_error=Running(1, 0.0)), [Disarm("system_error")],
     attrs.evolve(MEMO, serial=1), 0.0, 0.0),
    # --- the connection
    ("a lost connection after acceptance makes the outcome unknown and reconnects", job(S.ACCEPTED), BUSY,
     Observed(ev.ConnectionLost("reset")), MEMO, [Note("connection_lost", {"detail": "reset"}), Reconnect()],
     attrs.evolve(MEMO, connected=False, outcome_unknown=True), 0.0, 0.0),
    ("a lost connection while waiting disarms the debounce", job(S.WAITING_FOR_IDLE), IDLE,
     Observed(ev.ConnectionLost("reset")), idle_timer(S.WAITING_FOR_IDLE),
     [Disarm("idle"), Note("connection_lost", {"detail": "reset"}), Reconnect()],
     attrs.evolve(MEMO, connected=False, serial=1), 0.0, 0.0),
    ("a second loss report while disconnected is ignored", job(S.WAITING_FOR_IDLE), IDLE,
     Observed(ev.ConnectionLost("again")), attrs.evolve(MEMO, connected=False), [], None, 0.0, 0.0),
    ("nothing is decided from facts while disconnected", job(S.WAITING_FOR_IDLE), IDLE, Observed(ev.ThreadIdle()),
     attrs.evolve(MEMO, connected=False), [], None, 0.0, 0.0),
    ("reconnected, the worker notes it and decides from the fresh facts", job(S.WAITING_FOR_IDLE), IDLE,
     ReconnectDone(), attrs.evolve(MEMO, connected=False),
     [Note("reconnected", {"ownerId": "owner-1", "revision": 7}), Arm("idle", 1.0, 1)],
     idle_timer(S.WAITING_FOR_IDLE), 0.0, 0.0),
    ("a reconnect window that ran out while requesting fails with an unknown outcome", job(S.REQUESTING), IDLE,
     ReconnectDone("3 attempts in 30 s"), attrs.evolve(MEMO, connected=False),
     [fail("connection_lost", "could not reconnect: 3 attempts in 30 s", "unknown")], None, 0.0, 0.0),
    ("a reconnect window that ran out while waiting fails with a known outcome", job(S.WAITING_FOR_IDLE), IDLE,
     ReconnectDone("3 attempts in 30 s"), attrs.evolve(MEMO, connected=False),
     [fail("connection_lost", "could not reconnect: 3 attempts in 30 s")], None, 0.0, 0.0),
    ("a resync is journaled and the facts decided again", job(S.WAITING_FOR_IDLE), IDLE,
     Observed(ev.Resynced("owner moved", 1, 7)), MEMO,
     [Note("resynced", {"reason": "owner moved", "count": 1, "revision": 7}), Arm("idle", 1.0, 1)],
     idle_timer(S.WAITING_FOR_IDLE), 0.0, 0.0),
    # --- cancel and deadline
    ("a cancel signal with its marker cancels", job(S.ACCEPTED), BUSY, CancelSignalled(True), MEMO,
     [Fire("cancel", {"reason": "explicit_cancellation"})], None, 0.0, 0.0),
    ("a cancel signal without a marker does nothing", job(S.ACCEPTED), BUSY, CancelSignalled(False), MEMO,
     [], None, 0.0, 0.0),
    ("the deadline fires with its length, what the job waited for and the last fact seen", job(S.WAITING_FOR_IDLE),
     BUSY, DeadlinePassed(), MEMO,
     [Fire("deadline", {"deadlineS": 60.0, "waitingOn": WAITING_ON[S.WAITING_FOR_IDLE],
                        "lastFact": "the thread was busy (turn_running) (revision 7)"})], None, 0.0, 0.0),
    ("a deadline in a thread whose runtime stays systemError says so", job(S.WAITING_FOR_IDLE), STUCK,
     DeadlinePassed(), attrs.evolve(MEMO, serial=1, system_error=Running(1, 0.0)),
     [Fire("deadline", {"deadlineS": 60.0, "waitingOn": "the thread to stay idle for the stable interval before the "
                                                       "compaction",
                        "lastFact": "the thread's runtime stayed systemError for 60 s after the user's turn "
                                    "(revision 7)"})], None, 60.0, 60.0),
    ("a deadline while disconnected says the connection was lost", job(S.ACCEPTED), BUSY, DeadlinePassed(),
     attrs.evolve(MEMO, connected=False),
     [Fire("deadline", {"deadlineS": 60.0, "waitingOn": WAITING_ON[S.ACCEPTED],
                        "lastFact": "the connection to the thread's owner was lost and not back"})], None, 0.0, 0.0),
    # --- delivering the handoff where no continuation carries it
    ("the completion says the handoff is injected where it can be", job(S.ACCEPTED, resume=False), COMPACTED,
     Fired("completion", S.ACCEPTED), INJECTS,
     [Fire("compaction_completed", {"compactionId": "c1", "tokens": 30_000, "window": 200_000, "revision": 7,
                                    "inject": True}, then="consider")], None, 0.0, 0.0),
    ("the completion says why the handoff is not injected where it cannot be", job(S.ACCEPTED, resume=False),
     COMPACTED, Fired("completion", S.ACCEPTED), NO_WAY_IN,
     [Fire("compaction_completed", {"compactionId": "c1", "tokens": 30_000, "window": 200_000, "revision": 7,
                                    "injectionLimit": "no way in"}, then="consider")], None, 0.0, 0.0),
    ("once injecting and idle, the stable-idle timer is armed first", job(S.INJECTING), COMPACTED,
     Fired("consider", S.INJECTING), INJECTS, [Arm("idle", 1.0, 1)],
     attrs.evolve(INJECTS, serial=1, idle=Running(1, 0.0, S.INJECTING)), 0.0, 0.0),
    ("whatever led to injecting, the stable-idle timer is armed", job(S.INJECTING), COMPACTED,
     Fired("deliver", S.INJECTING), INJECTS, [Arm("idle", 1.0, 1)],
     attrs.evolve(INJECTS, serial=1, idle=Running(1, 0.0, S.INJECTING)), 0.0, 0.0),
    ("idle that held while injecting verifies the handoff and injects it", job(S.INJECTING), COMPACTED,
     TimerFired("idle", 1), attrs.evolve(INJECTS, serial=1, idle=Running(1, 0.0, S.INJECTING)),
     [VerifyHandoff(Fire("idle_stable", {"handoffVerified": True, **COMMON, "tokens": 30_000, "inject": True},
                         then="deliver"))],
     attrs.evolve(INJECTS, serial=1, sent_at_boundary=FP), 1.0, 1.0),
    ("the injection leaves once idle_stable journaled it", job(S.INJECTING, sent=True), IDLE,
     Fired("deliver", S.INJECTING), INJECTS, [Send("deliver")], None, 0.0, 0.0),
    ("while a turn runs nothing is injected: a queued follow-up, a goal or the user's own",
     job(S.INJECTING), MOVED_ON, Fired("consider", S.INJECTING), INJECTS, [], None, 0.0, 0.0),
    ("a turn that starts during the debounce disarms the injection's timer", job(S.INJECTING), MOVED_ON,
     Observed(ev.ThreadBusy("turn_running", 8)), attrs.evolve(INJECTS, serial=1, idle=Running(1, 0.0, S.INJECTING)),
     [Disarm("idle")], attrs.evolve(INJECTS, serial=1), 0.0, 0.5),
    ("the injection is never sent twice", job(S.INJECTING, sent=True), IDLE, Observed(ev.ThreadIdle(8)),
     INJECTS, [], None, 0.0, 0.0),
    ("the user's input while injecting cancels nothing", job(S.INJECTING, sent=True), MOVED_ON,
     Observed(ev.ThreadBusy("turn_running", 8)), INJECTS, [], None, 0.0, 0.0),
    ("a deadline while the injection waits on a long turn: not delivered, nothing sent after it",
     job(S.INJECTING), MOVED_ON, DeadlinePassed(), INJECTS,
     [Fire("deadline", {"deadlineS": 60.0, "waitingOn": WAITING_ON[S.INJECTING],
                        "lastFact": "the thread was busy (turn_running) (revision 7)", "delivery": "not_delivered"})],
     None, 0.0, 0.0),
    ("a deadline after the injection was sent: its delivery is unknown", job(S.INJECTING, sent=True), IDLE,
     DeadlinePassed(), INJECTS,
     [Fire("deadline", {"deadlineS": 60.0, "waitingOn": WAITING_ON[S.INJECTING],
                        "lastFact": "the thread was idle (revision 7)", "delivery": "unknown"})], None, 0.0, 0.0),
    ("an explicit cancel while the injection waits: nothing was sent", job(S.INJECTING), MOVED_ON,
     CancelSignalled(True), INJECTS, [Fire("cancel", {"reason": "explicit_cancellation",
                                                      "delivery": "not_delivered"})], None, 0.0, 0.0),
    ("an acknowledged injection that a new turn may have overtaken is unknown", job(S.INJECTING, sent=True),
     MOVED_ON, RequestDone("deliver", Acted(), 1234), attrs.evolve(INJECTS, sent_at_boundary=FP),
     [Fire("handoff_not_delivered", {
         "errorCode": "turn_started_during_injection", "delivery": "unknown",
         "error": "the owner acknowledged the injection, but a new turn started while it was on its way: it may "
                  "have landed inside that turn (whose model then answers again) or before it"})], None, 0.0, 0.0),
    ("an injection is not sent while disconnected", job(S.INJECTING), COMPACTED, Fired("consider", S.INJECTING),
     attrs.evolve(INJECTS, connected=False), [], None, 0.0, 0.0),
    ("an acknowledged injection ends the job with its size", job(S.INJECTING, sent=True), IDLE,
     RequestDone("deliver", Acted(), 1234), attrs.evolve(INJECTS, sent_at_boundary=FP),
     [Fire("handoff_delivered", {"textBytes": 1234})], None, 0.0, 0.0),
    ("an injection whose answer was lost is unknown, not sent again", job(S.INJECTING, sent=True), IDLE,
     RequestDone("deliver", Acted(TIMED_OUT), 1234), attrs.evolve(INJECTS, sent_at_boundary=FP),
     [Fire("handoff_not_delivered", {"errorCode": "request_timeout", "error": TIMED_OUT.message,
                                     "delivery": "unknown"})], None, 0.0, 0.0),
    ("an injection the plugin's hook delivered first: delivered by the hook, nothing sent",
     job(S.INJECTING, sent=True), IDLE, DeliveryTaken("hook", "t.j.delivery"), INJECTS, [HOOK_DELIVERED], None,
     0.0, 0.0),
    ("a delivery claim an explicit cancel holds cancels the job, nothing sent", job(S.RESUMING), IDLE,
     DeliveryTaken("cancel", "t.j.delivery"), MEMO,
     [Fire("cancel", {"reason": "explicit_cancellation", "delivery": "not_delivered"})], None, 0.0, 0.0),
    ("the injection that lost its claim to an explicit cancel was not sent", job(S.INJECTING, sent=True), IDLE,
     DeliveryTaken("cancel", "t.j.delivery"), INJECTS,
     [Fire("cancel", {"reason": "explicit_cancellation", "delivery": "not_delivered"})], None, 0.0, 0.0),
    ("a handoff that changed before its injection fails the job with nothing sent", job(S.INJECTING), IDLE,
     HandoffChecked("sha256 differs"), INJECTS,
     [fail("handoff_changed", "saved handoff failed verification: sha256 differs", "not_delivered")], None, 0.0, 0.0),
    ("the user's input before the continuation leads to the injection where it can be",
     job(S.WAITING_FOR_RESUME_IDLE), MOVED_ON, Observed(ev.ThreadBusy("turn_running", 8)), INJECTS,
     [Fire("rerouted", {"reason": "new_user_input"}, then="consider")], None, 0.0, 0.0),
    ("the user's input before the continuation cancels where it cannot be, saying why",
     job(S.WAITING_FOR_RESUME_IDLE), MOVED_ON, Observed(ev.ThreadBusy("turn_running", 8)), NO_WAY_IN,
     [Fire("cancel", {"reason": "new_user_input", "injectionLimit": "no way in"})], None, 0.0, 0.0),
    ("the headroom check before the resume carries the delivery evidence", job(S.WAITING_FOR_RESUME_IDLE), IDLE,
     TimerFired("idle", 1), attrs.evolve(idle_timer(S.WAITING_FOR_RESUME_IDLE), inject=True),
     [VerifyHandoff(Fire("idle_stable", {"handoffVerified": True, **COMMON, "inject": True}, then="deliver"))],
     attrs.evolve(MEMO, serial=1, inject=True, sent_at_boundary=FP), 1.0, 1.0),
]


@pytest.mark.parametrize("behaviour, job_, facts, event, memo, steps, after, at, now", ROWS,
                         ids=[row[0] for row in ROWS])
def test_the_policy_table(behaviour, job_, facts, event, memo, steps, after, at, now):
    decision = decide(job_, seen(facts), event, memo, at=at, now=now)
    assert list(decision.steps) == steps
    assert decision.memo == (memo if after is None else after)


@pytest.mark.parametrize("behaviour, job_, facts, event, memo, steps, after, at, now", ROWS,
                         ids=[row[0] for row in ROWS])
def test_a_fire_is_only_ever_the_last_step_and_a_decision_is_repeatable(behaviour, job_, facts, event, memo, steps,
                                                                        after, at, now):
    decision = decide(job_, seen(facts), event, memo, at=at, now=now)
    fires = [i for i, step in enumerate(decision.steps) if isinstance(step, Fire)]
    assert fires in ([], [len(decision.steps) - 1])
    assert decide(job_, seen(facts), event, memo, at=at, now=now) == decision


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES, key=lambda s: s.value))
@pytest.mark.parametrize("event", [Began(), DeadlinePassed(), CancelSignalled(True), TimerFired("idle", 1),
                                   RequestDone("compact", Acted()), Observed(ev.ConnectionLost("x"))])
def test_a_job_that_ended_takes_no_step_whatever_happens(state, event):
    assert decide(job(state), seen(IN_PROGRESS), event, idle_timer(S.WAITING_FOR_IDLE)) == \
        Decision((), idle_timer(S.WAITING_FOR_IDLE))


def test_the_job_the_rules_read_holds_the_status_fields_schedule_and_the_request_wrote():
    fields = {"userFingerprint": "fp", "resume": True, "contextTokensBefore": 90_000, "jobId": "j"}
    assert Job.of(view_in("j", JobState.ACCEPTED, fields), SETTINGS) == Job(JobState.ACCEPTED, SETTINGS, "fp", True,
                                                                              90_000)
    assert Job.of(view_in("j", JobState.SCHEDULED, {"jobId": "j"}), SETTINGS) == \
        Job(JobState.SCHEDULED, SETTINGS, None, False, None)
    assert Job.of(view_in("j", JobState.INJECTING, fields, sent=True), SETTINGS) == \
        Job(JobState.INJECTING, SETTINGS, "fp", True, 90_000, DeliveryState.SENDING, "injection")
