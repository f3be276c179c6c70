"""Real Codex 0.171.0 that names no caller: rekall asks the user, through Codex, whose call it is.

A daemon of its own registers ``rekall mcp`` behind ``meta_stripping_proxy.py``, which strips
``_meta`` from what Codex sends (as a release with openai/codex PR #31328 would), and lets
``schedule_compaction`` and ``cancel_compaction`` run without Codex's own approval prompt, so that
rekall's question is the only one. The shared app-server's view of a turn in progress does not show the call either, so
rekall asks: the question reaches the user's client as ``mcpServer/elicitation/request``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rekall.store import JobStore
from tests.codex.daemonkit import Daemon, PeerClient, peer_client, rekall_mcp_toml, start_daemon, stop_daemon
from tests.codex.test_app_server_job import JOB_S, on_thread, wait_terminal
from tests.mcpkit import HANDOFF, wait_for_worker_exit
from tests.support.codex_home import make_isolated_home
from tests.support.mock_model import MockModel

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

PROXY = Path(__file__).with_name("meta_stripping_proxy.py")
APPROVED = "".join(f'[mcp_servers.rekall.tools.{tool}]\napproval_mode = "approve"\n'
                   for tool in ("schedule_compaction", "cancel_compaction"))
JOB = "0199a5c2-1111-4000-8000-0000000000ff"
OWN_HANDOFF = {**HANDOFF, "resume": False}
ASK = "Compact this conversation about the parser now."


@pytest.fixture(scope="module")
def model() -> Iterator[MockModel]:
    with MockModel() as mock:
        yield mock


@pytest.fixture(scope="module")
def daemon(codex_binary: Path, model: MockModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("stripped")
    home, jobs = root / "codex-home", root / "jobs"
    extra = rekall_mcp_toml(home, jobs, args=(str(PROXY),)) + APPROVED
    home = make_isolated_home(home, model.base_url, extra, approval_policy="on-request")
    started = start_daemon(codex_binary, home, jobs)
    try:
        yield started
    finally:
        stop_daemon(started)


async def asking_turn(user: PeerClient, model: MockModel, approval_policy: str, name: str | None = None,
                      tool: str = "schedule_compaction", arguments: dict[str, Any] | None = None,
                      sandbox: str | None = None) -> tuple[str, int]:
    """A thread (titled ``name``, in ``sandbox`` if given) whose agent calls ``tool`` on itself
    (``schedule_compaction`` with a handoff unless ``arguments`` are given); the thread and where its
    messages start."""
    start = len(user.messages)
    options = {"approvalPolicy": approval_policy, **({"sandbox": sandbox} if sandbox else {})}
    thread = (await user.request("thread/start", options))["thread"]["id"]
    await user.wait_for(lambda m: m.get("method") == "mcpServer/startupStatus/updated"
                        and m["params"].get("name") == "rekall" and m["params"].get("status") == "ready",
                        start=start, timeout=JOB_S)
    if name is not None:
        await user.request("thread/name/set", {"threadId": thread, "name": name})
    model.queue_mcp_call("rekall", tool, {"threadId": thread, **(arguments or {"handoff": OWN_HANDOFF})})
    await user.request("turn/start", {"threadId": thread, "input": [{"type": "text", "text": ASK}]})
    return thread, start


async def question(user: PeerClient, thread: str, start: int) -> dict[str, Any]:
    return await user.wait_for(lambda m: m.get("method") == "mcpServer/elicitation/request" and "id" in m
                               and m["params"].get("threadId") == thread, start=start, timeout=JOB_S)


async def answer(user: PeerClient, asked: dict[str, Any], result: dict[str, Any]) -> None:
    await user.connection.send(json.dumps({"id": asked["id"], "result": result}))


async def turn_end(user: PeerClient, thread: str, start: int) -> None:
    await user.wait_for(on_thread("turn/completed", thread), start=start, timeout=JOB_S)


async def test_the_user_confirms_the_thread_and_the_compaction_is_scheduled_and_done(daemon: Daemon, model: MockModel):
    async with peer_client(daemon.socket_path, "terminal") as user:
        thread, start = await asking_turn(user, model, "on-request")
        asked = await question(user, thread, start)
        params = asked["params"]
        assert thread in params["message"] and "compact the conversation" in params["message"], params
        assert "Compact this conversation about the parser" in params["message"], params  # its first words
        assert params["requestedSchema"]["required"] == ["confirm"], params
        await answer(user, asked, {"action": "accept", "content": {"confirm": True}})
        await turn_end(user, thread, start)
        done = await wait_terminal(daemon, thread)
        await wait_for_worker_exit(done["pid"])
    assert done["state"] == "completed" and done["platform"] == "app-server", done


async def test_the_user_declines_and_the_call_is_refused_with_the_next_step(daemon: Daemon, model: MockModel):
    async with peer_client(daemon.socket_path, "terminal") as user:
        thread, start = await asking_turn(user, model, "on-request", name="Parser rewrite")
        asked = await question(user, thread, start)
        assert f"“Parser rewrite” ({thread})" in asked["params"]["message"], asked  # its title, before its first words
        await answer(user, asked, {"action": "decline", "content": None})
        await turn_end(user, thread, start)
    (refusal,) = model.requests_containing(f"whether thread {thread} is the caller's")
    assert refusal.contains("[caller_unknown]") and refusal.contains("declined")
    assert refusal.contains("Next: ask the user to run `rekall schedule THREAD` in a terminal")
    assert JobStore.open_reader({"REKALL_JOBS_DIR": str(daemon.jobs_dir)}).read_status(thread).state == "not_scheduled"


@pytest.mark.parametrize("sandbox", [None, "danger-full-access"], ids=["configured", "full-access"])
async def test_under_approval_policy_never_codex_declines_the_question_and_the_call_is_refused(
        daemon: Daemon, model: MockModel, sandbox: str | None):
    # In full access Codex accepts a form without fields by itself (openai/codex PR #17164): rekall's has one.
    async with peer_client(daemon.socket_path, "terminal") as user:
        thread, start = await asking_turn(user, model, "never", sandbox=sandbox)
        await turn_end(user, thread, start)
        asked = [m for m in user.messages[start:] if m.get("method") == "mcpServer/elicitation/request"]
    assert asked == []  # never shown to the user
    (refusal,) = model.requests_containing(f"whether thread {thread} is the caller's")
    assert refusal.contains("[caller_unknown]") and refusal.contains("declined")
    assert JobStore.open_reader({"REKALL_JOBS_DIR": str(daemon.jobs_dir)}).read_status(thread).state == "not_scheduled"


async def test_the_user_confirms_a_cancel_and_it_goes_on_to_the_job(daemon: Daemon, model: MockModel):
    async with peer_client(daemon.socket_path, "terminal") as user:
        thread, start = await asking_turn(user, model, "on-request", tool="cancel_compaction", arguments={"jobId": JOB})
        asked = await question(user, thread, start)
        assert f"cancel compaction job {JOB} in the conversation" in asked["params"]["message"], asked
        await answer(user, asked, {"action": "accept", "content": {"confirm": True}})
        await turn_end(user, thread, start)
    # Past the caller rule, to the job, which this thread does not have.
    assert model.requests_containing(f"[job_identity_mismatch] job {JOB} is not the current job of thread {thread}")
