"""When a call names no caller and the owner's view cannot either, ``rekall mcp`` asks the user.

``rekall mcp`` runs as Codex starts it (a process on real stdio, the light path handing over), the
mcp SDK's client plays Codex and answers the server's elicitation as the user would; the simulated
owner serves the thread, idle, so its view shows no call in progress. Real Codex through a proxy that
strips ``_meta``: ``tests/codex/test_confirm_caller.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from rekall.sim import SimulatedOwner
from rekall.store import JobStore
from rekall.surfaces.mcp_confirm import CONFIRM_FIELD, TITLE_CHARS, ask_text
from tests.mcpkit import HANDOFF, job_env, wait_for_worker_exit
from tests.surfaces.test_mcp_server import PROMISED_FORM

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JOB = "0199a5c2-1111-4000-8000-0000000000ff"


def answering(result: types.ElicitResult, asked: list[types.ElicitRequestParams]) -> Any:
    """An elicitation callback that records each question and gives ``result``."""

    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return result

    return callback


async def call_without_meta(env: dict[str, str], tool: str, arguments: dict[str, Any],
                            callback: Any) -> types.CallToolResult:
    """``tool`` called on a real ``rekall mcp`` with no ``_meta``, the client answering questions with ``callback``."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "rekall", "mcp"], env=env)
    options = {} if callback is None else {"elicitation_callback": callback}
    async with Client(params, **options) as client:
        return await client.call_tool(tool, arguments)


def ticked(value: Any = True) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={CONFIRM_FIELD: value})


async def test_a_cancel_the_user_confirms_goes_ahead_as_the_named_threads(tmp_path: Path):
    asked: list[types.ElicitRequestParams] = []
    async with SimulatedOwner() as sim:
        env = job_env(sim.env, tmp_path / "jobs")
        result = await call_without_meta(env, "cancel_compaction", {"threadId": sim.thread_id, "jobId": JOB},
                                         answering(ticked(), asked))
    # Past the caller rule, to the job: this thread has none.
    assert result.is_error and result.content[0].text.startswith("[job_identity_mismatch]"), result
    (question,) = asked
    assert f"cancel compaction job {JOB} in the conversation {sim.thread_id}" in question.message
    schema = question.requested_schema
    assert schema["required"] == [CONFIRM_FIELD] and schema["properties"][CONFIRM_FIELD]["type"] == "boolean"


async def test_a_schedule_the_user_confirms_is_scheduled_and_runs(tmp_path: Path):
    asked: list[types.ElicitRequestParams] = []
    async with SimulatedOwner() as sim:
        env = job_env(sim.env, tmp_path / "jobs")
        result = await call_without_meta(env, "schedule_compaction",
                                         {"threadId": sim.thread_id, "handoff": {**HANDOFF, "resume": False}},
                                         answering(ticked(), asked))
        assert not result.is_error, result.content[0].text
        job = result.structured_content
        await wait_for_worker_exit(job["pid"], timeout=60)
    assert job["state"] == "scheduled" and job["threadId"] == sim.thread_id
    assert "compact the conversation once the agent's current answer ends" in asked[0].message


@pytest.mark.parametrize(("answer", "why"), [
    (types.ElicitResult(action="decline"), "declined"),
    (types.ElicitResult(action="cancel"), "dismissed the question"),
    (ticked(False), "did not tick it"),
    (types.ElicitResult(action="accept", content={}), "did not tick it"),
    (None, "declared no form elicitation"),
], ids=["declined", "dismissed", "unticked", "empty", "no-elicitation"])
async def test_a_schedule_the_user_does_not_confirm_is_refused_with_the_next_step_and_nothing_done(
        tmp_path: Path, answer: types.ElicitResult | None, why: str):
    asked: list[types.ElicitRequestParams] = []
    async with SimulatedOwner() as sim:
        env = job_env(sim.env, tmp_path / "jobs")
        result = await call_without_meta(env, "schedule_compaction", {"threadId": sim.thread_id},
                                         None if answer is None else answering(answer, asked))
        assert sim.compact_requests == []
    text = result.content[0].text
    assert result.is_error and PROMISED_FORM.match(text) and text.startswith("[caller_unknown]"), text
    assert why in text and "Next: ask the user to run `rekall schedule THREAD` in a terminal" in text
    assert len(asked) == (0 if answer is None else 1)
    assert JobStore.open_reader(env).read_status(sim.thread_id).state == "not_scheduled"


def test_the_question_names_the_thread_by_its_first_words_on_one_line():
    thread = "0199a5c2-1111-4000-8000-000000000001"
    long = "Fix the parser\n\nthen " + "x" * 200
    text = ask_text(thread, long, "do it")
    assert f"“Fix the parser then {'x' * (TITLE_CHARS - 20)}…” ({thread})" in text and "\n" not in text
    assert f"conversation {thread} (its title could not be read)" in ask_text(thread, None, "do it")
