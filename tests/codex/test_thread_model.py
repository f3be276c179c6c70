"""The shared app-server's thread model: public messages in, the worker's facts and events out.

The message shapes are those of codex 0.171.0's daemon (recorded in tests/codex/test_shared_appserver.py
and docs/app-server.md); no socket here.
"""

from __future__ import annotations

from typing import Any

from rekall.kernel import events as ev
from rekall.adapters.app_server.rpc import Notification, ServerRequest
from rekall.adapters.app_server.thread_model import ThreadModel, fingerprint_of
from rekall.kernel.records import NO_USER_INPUT

T = "thread-1"


def note(method: str, **params: Any) -> Notification:
    return Notification(method, {"threadId": T, **params})


def usage(total: int, input_tokens: int, window: int = 258400) -> Notification:
    last = {"totalTokens": total, "inputTokens": input_tokens}
    return note("thread/tokenUsage/updated", turnId="c", tokenUsage={"total": last, "last": last,
                                                                      "modelContextWindow": window})


def turn(turn_id: str, status: str, *types: str) -> dict[str, Any]:
    return {"id": turn_id, "status": status, "items": [{"type": t, "id": f"{turn_id}-{t}"} for t in types]}


def idle_thread(*turns: dict[str, Any]) -> ThreadModel:
    model = ThreadModel(T)
    model.load({"id": T, "status": {"type": "idle"}, "turns": list(turns)})
    return model


def feed(model: ThreadModel, *messages: Any) -> list[ev.DomainEvent]:
    return [event for message in messages for event in model.apply(message)]


def test_a_loaded_idle_thread_is_idle_and_its_latest_user_turn_is_the_boundary() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage", "agentMessage"),
                        turn("c0", "completed", "contextCompaction"),
                        turn("u2", "completed", "userMessage", "agentMessage"))
    facts = model.facts
    assert facts.idle and facts.layout_problem is None
    assert facts.boundary_fingerprint == fingerprint_of("u2") and facts.latest_user_turn_id == "u2"
    assert facts.completed_compaction_ids == {"c0-contextCompaction"} and not facts.interrupted


def test_our_compaction_turn_is_nobodys_until_its_item_says_so_and_never_moves_the_user_boundary() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage"))
    boundary = model.facts.boundary_fingerprint
    events = feed(model, note("thread/status/changed", status={"type": "active", "activeFlags": []}),
                  note("turn/started", turn={"id": "c", "status": "inProgress", "items": []}),
                  note("item/started", turnId="c", item={"type": "contextCompaction", "id": "x"}))
    assert model.facts.boundary_fingerprint == boundary
    assert not any(isinstance(e, ev.UserBoundaryChanged) for e in events)
    assert model.facts.running_compaction_ids == {"x"} and not model.facts.idle


def test_the_post_compaction_figure_is_the_last_update_before_the_items_completion() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage"))
    feed(model, usage(35921, 33000))
    events = feed(model, note("turn/started", turn={"id": "c", "status": "inProgress", "items": []}),
                  note("item/started", turnId="c", item={"type": "contextCompaction", "id": "x"}),
                  usage(35921, 33000),  # the old count, repeated
                  usage(36100, 36000),  # the compaction request's own usage: larger
                  usage(6113, 0),       # the compacted size
                  note("item/completed", turnId="c", item={"type": "contextCompaction", "id": "x"}))
    completed = [e for e in events if isinstance(e, ev.CompactionCompleted)]
    assert completed == [ev.CompactionCompleted("x", model.revision)]
    assert model.facts.tokens == 6113 and model.facts.completed_compaction_ids == {"x"}
    assert [e.tokens for e in events if isinstance(e, ev.Telemetry)] == [36100, 6113]  # a repeat is no change


def test_a_new_user_message_moves_the_boundary_once_its_item_arrives() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage"))
    events = feed(model, note("turn/started", turn={"id": "u2", "status": "inProgress", "items": []}))
    assert model.facts.boundary_fingerprint == fingerprint_of("u1")
    events += feed(model, note("item/started", turnId="u2", item={"type": "userMessage", "id": "m"}))
    assert model.facts.boundary_fingerprint == fingerprint_of("u2") and model.facts.user_turn_running
    assert any(isinstance(e, ev.UserBoundaryChanged) for e in events)


def test_idle_needs_the_status_no_turn_in_progress_and_no_request_pending_for_the_user() -> None:
    model = idle_thread(turn("u1", "inProgress", "userMessage"))
    assert model.facts.busy_reason == "turn_in_progress"
    feed(model, note("turn/completed", turn={"id": "u1", "status": "completed", "items": []}))
    assert model.facts.idle
    events = feed(model, ServerRequest(0, "item/commandExecution/requestApproval", {"threadId": T, "turnId": "u1"}))
    assert model.facts.busy_reason == "pending_request" and events == [ev.ThreadBusy("pending_request", model.revision)]
    feed(model, ServerRequest(1, "item/commandExecution/requestApproval", {"threadId": "another"}))
    assert model.facts.pending_requests == 1
    events = feed(model, note("serverRequest/resolved", requestId=0))
    assert model.facts.idle and events == [ev.ThreadIdle(model.revision)]


def test_a_stopped_user_turn_is_reported_interrupted() -> None:
    model = idle_thread(turn("u1", "inProgress", "userMessage"))
    feed(model, note("turn/completed", turn={"id": "u1", "status": "interrupted", "items": []}))
    assert model.facts.interrupted


def test_a_listings_compaction_turn_without_items_is_nobodys() -> None:
    model = ThreadModel(T)
    model.load({"id": T, "status": {"type": "idle"}}, [turn("u1", "completed", "userMessage"), turn("c", "completed")])
    assert model.facts.boundary_fingerprint == fingerprint_of("u1")


def test_messages_about_other_threads_change_nothing() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage"))
    before, revision = model.facts, model.revision
    other = Notification("thread/status/changed", {"threadId": "another", "status": {"type": "active"}})
    assert model.apply(other) == [] and model.facts == before and model.revision == revision


def test_a_thread_without_a_status_or_with_bad_turns_is_a_layout_problem_not_a_guess() -> None:
    model = ThreadModel(T)
    events = model.load({"id": T, "turns": "nope"})
    assert model.facts.layout_problem == "the thread's turns are not a list"
    assert not model.facts.idle and model.facts.boundary_fingerprint == NO_USER_INPUT
    assert isinstance(events[0], ev.LayoutIncompatible)
    model.load({"id": T, "turns": []})
    assert model.facts.layout_problem == "the thread has no status.type"


def test_a_compaction_that_completed_while_disconnected_is_completed_after_the_reload() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage"))
    feed(model, note("item/started", turnId="c", item={"type": "contextCompaction", "id": "c-contextCompaction"}))
    events = model.load({"id": T, "status": {"type": "idle"},
                         "turns": [turn("u1", "completed", "userMessage"), turn("c", "completed", "contextCompaction")]})
    assert model.facts.running_compaction_ids == frozenset()
    assert ev.CompactionCompleted("c-contextCompaction", model.revision) in events


def test_a_reload_after_a_daemon_restart_forgets_the_compaction_that_was_running_before() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage"))
    feed(model, note("turn/started", turn={"id": "c", "status": "inProgress", "items": []}),
         note("item/started", turnId="c", item={"type": "contextCompaction", "id": "x"}))
    assert model.facts.running_compaction_ids == {"x"}
    model.load({"id": T, "status": {"type": "idle"}, "turns": [turn("u1", "completed", "userMessage")]})
    assert model.facts.idle and not model.facts.running_compaction_ids and not model.facts.completed_compaction_ids


def test_a_compaction_whose_turn_ended_without_it_is_neither_running_nor_completed() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage"), turn("c0", "interrupted", "contextCompaction"))
    assert not model.facts.completed_compaction_ids and not model.facts.running_compaction_ids
    feed(model, note("turn/started", turn={"id": "c", "status": "inProgress", "items": []}),
         note("item/started", turnId="c", item={"type": "contextCompaction", "id": "x"}),
         note("turn/completed", turn={"id": "c", "status": "interrupted", "items": []}))
    assert not model.facts.completed_compaction_ids and not model.facts.running_compaction_ids


def goal(status: str) -> dict[str, Any]:
    return {"threadId": T, "objective": "ship it", "status": status, "tokensUsed": 0, "timeUsedSeconds": 0,
            "createdAt": 1, "updatedAt": 1}


def test_the_goal_is_unknown_until_read_then_follows_its_updates_and_its_clearing() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage"))
    assert model.facts.goal is None and not model.facts.goal_active  # the thread object carries no goal
    assert model.load_goal({"goal": None}) == [ev.GoalChanged("none", model.revision)]
    assert model.facts.goal == "none"
    events = feed(model, note("thread/goal/updated", turnId=None, goal=goal("active")))
    assert model.facts.goal_active and events == [ev.GoalChanged("active", model.revision)]
    feed(model, note("thread/goal/updated", turnId="g1", goal=goal("paused")))
    assert model.facts.goal == "paused" and not model.facts.goal_active
    feed(model, note("thread/goal/cleared"))
    assert model.facts.goal == "none"
    feed(model, note("thread/goal/updated", goal={"status": 7}))
    assert model.facts.goal is None  # a shape rekall cannot read is unknown, not a guess


def test_a_goals_own_turn_holds_no_user_message_and_does_not_move_the_user_boundary() -> None:
    model = idle_thread(turn("u1", "completed", "userMessage", "agentMessage"))
    feed(model, note("turn/started", turn=turn("g1", "inProgress")),
         note("item/completed", turnId="g1", item={"type": "agentMessage", "id": "m"}))
    assert model.facts.boundary_fingerprint == fingerprint_of("u1") and not model.facts.idle
