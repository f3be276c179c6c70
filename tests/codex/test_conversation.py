"""The projection of an app-server thread onto the extension's conversationState."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall.thread.facts import derive_facts
from rekall.thread.patches import apply_patches
from tests.support.appserver import Message, Notification, ServerRequest, open_app_server
from tests.support.conversation import ConversationProjection
from tests.support.mock_model import MockModel, escalated_command

THREAD = {"id": "thr-1", "status": {"type": "idle"}, "cwd": "/w", "name": None}


def note(method: str, **params: Any) -> Notification:
    return Notification(method, {"threadId": "thr-1", **params})


def turn(turn_id: str, status: str = "inProgress") -> dict[str, Any]:
    return {"id": turn_id, "status": status, "startedAt": 1_800_000_000, "items": []}


class Follower:
    """A follower's copy, kept only from the snapshot and the patches."""

    def __init__(self, projection: ConversationProjection) -> None:
        self.projection = projection
        self.state = projection.snapshot()

    def feed(self, *messages: Message) -> None:
        for message in messages:
            self.state = apply_patches(self.state, self.projection.apply(message))
        assert self.state == self.projection.state

    @property
    def facts(self):
        return derive_facts(self.state)


@pytest.fixture
def follower() -> Follower:
    return Follower(ConversationProjection(THREAD, model="mock-model"))


def test_the_initial_snapshot_has_the_layout_the_mirror_requires(follower: Follower) -> None:
    facts = follower.facts
    assert facts.layout_problem is None and facts.idle and facts.tokens is None
    assert follower.state["latestModel"] == "mock-model"


def test_a_compaction_turn_flips_the_private_completed_flag(follower: Follower) -> None:
    item = {"type": "contextCompaction", "id": "cmp-1"}
    follower.feed(note("thread/status/changed", status={"type": "active", "activeFlags": []}),
                  note("turn/started", turn=turn("t1")),
                  note("item/started", turnId="t1", item=item))
    assert follower.state["turns"][0]["items"] == [{**item, "completed": False}]
    assert follower.facts.completed_compaction_ids == frozenset() and not follower.facts.idle
    follower.feed(note("item/completed", turnId="t1", item=item),
                  note("thread/status/changed", status={"type": "idle"}),
                  note("turn/completed", turn=turn("t1", "completed")))
    assert follower.state["turns"][0]["items"] == [{**item, "completed": True}]
    assert follower.state["turns"][0]["status"] == "completed"
    assert follower.facts.completed_compaction_ids == {"cmp-1"} and follower.facts.idle


def test_token_usage_becomes_latest_token_usage_info(follower: Follower) -> None:
    usage = {"total": {"totalTokens": 900}, "last": {"totalTokens": 700}, "modelContextWindow": 258400}
    follower.feed(note("thread/tokenUsage/updated", turnId="t1", tokenUsage=usage))
    assert follower.state["latestTokenUsageInfo"] == usage
    assert (follower.facts.tokens, follower.facts.window) == (700, 258400)


def test_a_server_request_is_pending_until_resolved(follower: Follower) -> None:
    request = ServerRequest(0, "item/commandExecution/requestApproval", {"threadId": "thr-1", "turnId": "t1"})
    other = ServerRequest(1, "item/tool/requestUserInput", {"threadId": "thr-1", "turnId": "t1"})
    follower.feed(request, other)
    assert [r["id"] for r in follower.state["requests"]] == [0, 1]
    assert follower.facts.busy_reason == "pending_requests"
    follower.feed(note("serverRequest/resolved", requestId=0))
    assert [r["id"] for r in follower.state["requests"]] == [1]
    follower.feed(note("serverRequest/resolved", requestId=1))
    assert follower.facts.idle


def test_turn_params_attach_whether_the_reply_or_the_notification_comes_first(follower: Follower) -> None:
    params = {"input": [{"type": "text", "text": "hi"}], "clientUserMessageId": "job-1"}
    follower.projection.note_turn_params("early", params)
    follower.feed(note("turn/started", turn=turn("early")))
    follower.feed(note("turn/started", turn=turn("late")))
    follower.state = apply_patches(follower.state, follower.projection.note_turn_params("late", params))
    assert follower.state == follower.projection.state
    assert [t["params"] for t in follower.state["turns"]] == [params, params]
    assert follower.facts.latest_user_turn_id == "late"


def test_messages_for_other_threads_and_unknown_methods_change_nothing(follower: Follower) -> None:
    before = copy.deepcopy(follower.state)
    follower.feed(Notification("thread/status/changed", {"threadId": "other", "status": {"type": "active"}}),
                  Notification("account/rateLimits/updated", {"rateLimits": {}}),
                  note("item/agentMessage/delta", turnId="t1", itemId="m", delta="x"),
                  ServerRequest(5, "item/tool/requestUserInput", {"threadId": "other"}))
    assert follower.state == before


def test_an_item_for_a_turn_never_started_here_is_dropped_and_counted(follower: Follower) -> None:
    follower.feed(note("item/started", turnId="ghost", item={"type": "contextCompaction", "id": "c"}),
                  note("turn/completed", turn=turn("ghost", "completed")))
    assert follower.state["turns"] == [] and follower.projection.dropped == 2


def test_a_resolution_for_an_unknown_request_changes_nothing(follower: Follower) -> None:
    follower.feed(note("serverRequest/resolved", requestId=99))
    assert follower.state["requests"] == []


# --- against the real app-server ----------------------------------------------------------


@pytest.mark.codex
@pytest.mark.anyio
async def test_a_real_compaction_and_approval_project_to_what_the_mirror_expects(
        codex_binary: Path, codex_home: Path, mock_model: MockModel, tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with open_app_server(codex_binary, codex_home) as server:
            started = await server.start_thread()
            follower = Follower(ConversationProjection(started["thread"], model=started.get("model")))
            thread_id = follower.projection.thread_id

            async def run_until(method: str) -> None:
                message = await server.wait_for(lambda m: follower.feed(m) or m.method == method)
                assert message.method == method

            mock_model.queue_text("filler " * 5000)
            turn_params = {"input": [{"type": "text", "text": "fill"}]}
            started_turn = await server.start_turn(thread_id, "fill")
            follower.state = apply_patches(follower.state, follower.projection.note_turn_params(started_turn["id"], turn_params))
            await run_until("turn/completed")
            before = follower.facts
            assert before.idle and before.tokens and before.window and before.layout_problem is None

            await server.start_compaction(thread_id)
            await run_until("turn/completed")
            after = follower.facts
            assert len(after.completed_compaction_ids) == 1 and after.idle
            assert after.tokens < before.tokens
            assert after.boundary_fingerprint == before.boundary_fingerprint  # compaction is not user input

            mock_model.queue_tool_call("exec_command", escalated_command(f"touch {tmp_path / 'x'}"))
            await server.start_turn(thread_id, "touch")
            request = await server.wait_for(lambda m: follower.feed(m) or isinstance(m, ServerRequest))
            assert follower.facts.pending_requests == 1 and not follower.facts.idle
            await server.respond(request.id, {"decision": "decline"})
            await run_until("serverRequest/resolved")
            assert follower.facts.pending_requests == 0
            await run_until("turn/completed")
            assert follower.facts.idle and follower.projection.dropped == 0
