"""The plugin's SessionStart(compact) hook on a REAL Codex app-server daemon.

Real Codex (the pinned release) with the mock model; nothing of Codex is mocked. The plugin is
installed as users install it (``codex plugin marketplace add`` + ``codex plugin add``), found by
``hooks/list`` untrusted, and trusted as ``/hooks`` does it: ``[hooks.state."<key>"] trusted_hash``
in ``config.toml``. The daemon runs with injection turned off (``REKALL_INJECT_HANDOFF=off``), so
that it behaves as the VS Code extension does, where the hook is the only way in. The hook runs
``rekall`` from ``PATH``; the jobs are in the daemon's Codex home's default jobs directory, which the
hook finds from the transcript's place (Codex runs it with the daemon's environment).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from rekall.usecases import service
from rekall.usecases.hook_doctor import handler_hash, hook_rows
from rekall.store import JobStore
from rekall.store.delivery import DeliveryKey, holder
from tests.codex.daemonkit import Daemon, PeerClient, peer_client, start_daemon, stop_daemon
from tests.codex.test_app_server_delivery import (
    compaction_turn_ended,
    continuation_marker,
    handoff_copies,
    injection_marker,
    new_conversation,
    wait_terminal,
)
from tests.codex.test_app_server_job import FILLER, JOB_S, on_thread, run_turn
from tests.codex.test_registration import install_plugin
from tests.mcpkit import HANDOFF, wait_for_worker_exit
from tests.support.codex_home import make_isolated_home
from tests.support.mock_model import MockModel, RecordedRequest

pytestmark = [pytest.mark.codex, pytest.mark.slow, pytest.mark.anyio]

HOOK_KEY = "rekall@rekall:hooks/hooks.json:session_start:0:0"
REKALL_COMMAND = Path(sys.executable).with_name("rekall")


@attrs.frozen
class HookDaemon:
    daemon: Daemon
    model: MockModel
    jobs: Path


@pytest.fixture
def hook_model() -> Any:
    with MockModel() as model:
        yield model


@pytest.fixture
async def hook_daemon(codex_binary: Path, hook_model: MockModel, tmp_path_factory: pytest.TempPathFactory,
                      monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[HookDaemon]:
    """A daemon of its own (its hooks must not touch the session's shared daemon's jobs), with the
    plugin installed and its hook trusted the way a user trusts it."""
    # A short path: the control socket's must fit in sun_path.
    home = make_isolated_home(tmp_path_factory.mktemp("hook") / "h", hook_model.base_url, approval_policy="never")
    await anyio.to_thread.run_sync(install_plugin, codex_binary, home)
    monkeypatch.setenv("PATH", f"{REKALL_COMMAND.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in ("REKALL_JOBS_DIR", "CONTEXT_COMPACT_JOBS_DIR"):
        monkeypatch.delenv(name, raising=False)
    listed = await trust_hook(codex_binary, home)
    assert (listed["source"], listed["trustStatus"]) == ("plugin", "untrusted"), listed
    # rekall doctor computes the handler's half of that hash from the installed files as Codex does.
    assert handler_hash({"matcher": listed["matcher"], "command": listed["command"],
                         "timeout": listed["timeoutSec"]}) == listed["currentHash"].split("/")[0]
    daemon = start_daemon(codex_binary, home)
    try:
        yield HookDaemon(daemon, hook_model, home / "tools" / "rekall" / "jobs")
    finally:
        stop_daemon(daemon)


async def trust_hook(codex_binary: Path, home: Path) -> dict[str, Any]:
    """Find the plugin's hook with ``hooks/list`` (untrusted) and trust its current hash in config.toml."""
    from tests.support.appserver import open_app_server

    with anyio.fail_after(60):
        async with open_app_server(codex_binary, home) as server:
            listing = await server.request("hooks/list", {"cwds": [str(home)]})
    hooks = [hook for entry in listing["data"] for hook in entry["hooks"]]
    (hook,) = [h for h in hooks if h["key"] == HOOK_KEY]
    # A plugin's hook has two hashes, "<handler>/<plugin contents>": /hooks records each.
    handler, contents = hook["currentHash"].split("/")
    with open(home / "config.toml", "a", encoding="utf-8") as config:
        config.write(f"\n[hooks.state.{json.dumps(HOOK_KEY)}]\ntrusted_hash = {json.dumps(handler)}\n"
                     f"trusted_content_hash = {json.dumps(contents)}\n")
    return hook


def hook_env(hooked: HookDaemon, **more: str) -> dict[str, str]:
    """What rekall's MCP server would run with: the daemon's home, injection off (as on the extension)."""
    return {**os.environ, "CODEX_HOME": str(hooked.daemon.codex_home), "REKALL_IDLE_STABLE_MS": "100",
            "REKALL_INJECT_HANDOFF": "off", **more}


async def schedule_and_finish(user: PeerClient, hooked: HookDaemon, thread_id: str,
                              handoff: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(JOB_S):
        scheduled = await service.schedule(thread_id, handoff, env=hook_env(hooked))
    done = await wait_terminal(hooked.jobs, thread_id, scheduled["jobId"])
    await wait_for_worker_exit(done["pid"])
    return done


def next_turn_request(model: MockModel, seq: int) -> RecordedRequest:
    """The first model request of a turn after request ``seq``."""
    return min((r for r in model.requests if r.seq > seq and r.kind == "turn"), key=lambda r: r.seq)


def hook_runs(seen: list[dict[str, Any]], thread_id: str) -> list[dict[str, Any]]:
    return [m["params"]["run"] for m in seen if on_thread("hook/completed", thread_id)(m)]


async def test_after_a_resume_false_job_the_hook_puts_the_handoff_in_the_next_model_request_exactly_once(
        hook_daemon: HookDaemon) -> None:
    hooked = hook_daemon
    async with peer_client(hooked.daemon.socket_path) as user:
        thread_id = await new_conversation(user, hooked.model)
        done = await schedule_and_finish(user, hooked, thread_id, {**HANDOFF, "resume": False})
        before_next, start = hooked.model.requests[-1].seq, len(user.messages)
        await run_turn(user, thread_id, "What were we doing?")
        seen = user.messages[start:]
        before_later = hooked.model.requests[-1].seq
        await run_turn(user, thread_id, "And then?")

    assert done["state"] == "completed" and done["handoffDelivery"] == "not_delivered", done  # injection off
    runs = hook_runs(seen, thread_id)
    assert [(r["eventName"], r["status"]) for r in runs] == [("sessionStart", "completed")], json.dumps(runs)
    marker = injection_marker(done["jobId"])
    next_request = next_turn_request(hooked.model, before_next)
    assert next_request.text.count(marker) == 1 and handoff_copies(next_request) == 1
    assert hooked.model.requests_containing(marker)[0] is next_request  # no request before it had it
    later = next_turn_request(hooked.model, before_later)
    assert later.text.count(marker) <= 1  # what Codex keeps of it in the history; the hook added nothing
    status = JobStore.open_reader({"CODEX_HOME": str(hooked.daemon.codex_home)}).read_status(thread_id)
    assert status.handoffDelivery == "hook" and status.handoffCut is False, status
    claim = holder(hooked.jobs, DeliveryKey(thread_id, job=done["jobId"]))
    assert claim["route"] == "hook"
    # rekall doctor asks the daemon's hooks/list: installed, enabled, trusted.
    rows = await hook_rows({"CODEX_HOME": str(hooked.daemon.codex_home)})
    assert [(r.name, r.level) for r in rows] == [("session_hook_installed", "GREEN"), ("session_hook_enabled", "GREEN"),
                                                 ("session_hook_trusted", "GREEN")], rows
    assert all(r.detail.startswith("hooks/list on ") for r in rows)


async def test_after_a_resume_true_job_only_the_continuation_carries_the_handoff(hook_daemon: HookDaemon) -> None:
    hooked = hook_daemon
    async with peer_client(hooked.daemon.socket_path) as user:
        thread_id = await new_conversation(user, hooked.model)
        start = len(user.messages)
        done = await schedule_and_finish(user, hooked, thread_id, HANDOFF)
        await user.wait_for(lambda m: on_thread("turn/completed", thread_id)(m)
                            and m["params"]["turn"]["id"] == done["resumeTurnId"], timeout=JOB_S)
        before_next = hooked.model.requests[-1].seq
        await run_turn(user, thread_id, "And now?")
        seen = user.messages[start:]

    assert done["state"] == "resumed" and done["handoffDelivery"] == "continuation", done
    assert [r["status"] for r in hook_runs(seen, thread_id)] == ["completed"]  # it ran, at the continuation's start
    assert not hooked.model.requests_containing(injection_marker(done["jobId"]))  # and printed nothing
    (continuation, *_) = hooked.model.requests_containing(continuation_marker(done["jobId"]))
    assert handoff_copies(continuation) == 1
    assert handoff_copies(next_turn_request(hooked.model, before_next)) == 1  # the continuation's copy only
    assert holder(hooked.jobs, DeliveryKey(thread_id, job=done["jobId"]))["route"] == "continuation"


async def test_a_later_compact_and_codexs_own_compaction_get_nothing_from_the_hook(hook_daemon: HookDaemon) -> None:
    hooked = hook_daemon
    async with peer_client(hooked.daemon.socket_path) as user:
        thread_id = (await user.request("thread/start", {"approvalPolicy": "never", "config": {
            "model_auto_compact_token_limit": 20_000}}))["thread"]["id"]
        await run_turn(user, thread_id, "Read the parser.")
        done = await schedule_and_finish(user, hooked, thread_id, {**HANDOFF, "resume": False})
        await run_turn(user, thread_id, "What were we doing?")  # the hook delivers here, once
        marker = injection_marker(done["jobId"])
        assert len(hooked.model.requests_containing(marker)) == 1
        # The user compacts again (what /compact sends); the next turn's hook finds two compactions.
        start = len(user.messages)
        await user.request("thread/compact/start", {"threadId": thread_id})
        await compaction_turn_ended(user, thread_id, start)
        before_next = hooked.model.requests[-1].seq
        await run_turn(user, thread_id, "Where are we?")
        after_compact = next_turn_request(hooked.model, before_next)
        # Codex's own auto-compaction, past the thread's limit.
        hooked.model.queue_text(FILLER)
        await run_turn(user, thread_id, "Tell me everything about it.")
        before_last = hooked.model.requests[-1].seq
        await run_turn(user, thread_id, "Where are we now?")
        seen = user.messages[start:]

    compactions = [m["params"]["item"]["id"] for m in seen if on_thread("item/completed", thread_id)(m)
                   and m["params"]["item"]["type"] == "contextCompaction"]
    assert len(compactions) >= 2, compactions  # the user's, then Codex's own
    assert len(hook_runs(seen, thread_id)) >= 2  # the hook ran after each
    assert after_compact.text.count(marker) == 0
    assert next_turn_request(hooked.model, before_last).text.count(marker) == 0
    assert all(r.text.count(marker) <= 1 for r in hooked.model.requests_containing(marker))
    store = JobStore.open_reader({"CODEX_HOME": str(hooked.daemon.codex_home)})
    assert [job for _, job in store.all_jobs()] == [done["jobId"]]


async def test_after_an_upgrade_that_changes_the_hook_codex_calls_it_modified_and_doctor_says_trust_it_again(
        codex_binary: Path, hook_model: MockModel, tmp_path_factory: pytest.TempPathFactory) -> None:
    from rekall.usecases.hook_doctor import file_rows, listing_rows
    from tests.support.appserver import open_app_server

    home = make_isolated_home(tmp_path_factory.mktemp("upgrade") / "h", hook_model.base_url, approval_policy="never")
    await anyio.to_thread.run_sync(install_plugin, codex_binary, home)
    await trust_hook(codex_binary, home)
    # What an upgrade to a release with another hook definition leaves in the plugin cache.
    (installed,) = (home / "plugins" / "cache" / "rekall" / "rekall").glob("*/hooks/hooks.json")
    hooks = json.loads(installed.read_text())
    hooks["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] = 20
    installed.write_text(json.dumps(hooks))
    with anyio.fail_after(60):
        async with open_app_server(codex_binary, home) as server:
            listing = await server.request("hooks/list", {"cwds": [str(home)]})
    (hook,) = [h for entry in listing["data"] for h in entry["hooks"] if h["key"] == HOOK_KEY]
    assert hook["trustStatus"] == "modified", hook
    assert listing_rows(hook, "hooks/list")[2].hint == "run `rekall setup` again (or trust it again in /hooks)"
    from_files = file_rows(home)[2]
    assert from_files.level == "AMBER" and from_files.hint == "run `rekall setup` again (or trust it again in /hooks)"
