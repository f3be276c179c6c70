"""Which platform serves a thread: both are asked, one must claim it, nothing is guessed.

The extension is the simulated owner (``rekall.sim``) on a real socket; the shared app-server is a
scripted ``websockets`` server (tests/codex/fakeserver.py) that claims the thread it is told to.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from rekall.kernel.errors import RekallError
from rekall.adapters.owners import OwnerUnknown, find_owner, platform_named
from rekall.sim import SimulatedOwner
from tests.codex.fakeserver import env_for, fake_app_server, folder  # noqa: F401 (a fixture)
from tests.codex.test_platform import IDLE_THREAD, Script, loaded, ok

pytestmark = pytest.mark.anyio


def claiming(thread_id: str) -> Script:
    thread = {**IDLE_THREAD, "id": thread_id}
    return Script(thread__loaded__list=loaded(thread_id), thread__read=ok({"thread": thread}),
                  thread__turns__list=ok({"data": thread["turns"], "nextCursor": None}))


async def test_a_thread_both_platforms_claim_is_refused_rather_than_guessed(folder: Path, tmp_path: Path) -> None:
    async with SimulatedOwner() as sim:
        async with fake_app_server(folder / "app.sock", claiming(sim.thread_id)):
            env = {**sim.env, **env_for(folder / "app.sock"), "CODEX_HOME": str(tmp_path)}
            with anyio.fail_after(20), pytest.raises(OwnerUnknown) as caught:
                await find_owner(sim.thread_id, env, request_timeout_s=5)
    assert "both the VS Code extension and the shared app-server claim thread" in caught.value.message
    assert caught.value.code == "owner_unknown"


async def test_the_one_platform_that_claims_the_thread_serves_it(folder: Path, tmp_path: Path) -> None:
    thread_id = IDLE_THREAD["id"]
    async with fake_app_server(folder / "app.sock", claiming(thread_id)):
        env = {**env_for(folder / "app.sock"), "CODEX_HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
        with anyio.fail_after(20):
            platform, seen = await find_owner(thread_id, env, request_timeout_s=5)
    assert platform.name == "app-server" and seen.facts.idle

    async with SimulatedOwner() as sim:
        with anyio.fail_after(20):
            platform, seen = await find_owner(sim.thread_id, {**sim.env, "CODEX_HOME": str(tmp_path)},
                                              request_timeout_s=5)
    assert platform.name == "extension-ipc" and seen.owner_id is not None


async def test_with_no_shared_app_server_the_extensions_answer_stands_and_names_the_terminal_way(
        tmp_path: Path) -> None:
    env = {"CODEX_HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    with anyio.fail_after(20), pytest.raises(RekallError) as caught:
        await find_owner(IDLE_THREAD["id"], env, request_timeout_s=5)
    assert caught.value.code == "endpoint_missing"  # the extension's own code, as before
    # Each platform says where it looked, and which CODEX_HOME that was, and why (here: from the environment).
    assert f"rekall looked under CODEX_HOME {tmp_path}, from this process's environment" in caught.value.message
    said = caught.value.message
    assert "; no shared app-server runs here either (no shared Codex app-server: " in said
    assert f"{tmp_path}/app-server-control/app-server-control.sock does not exist" in said
    # The causes rekall cannot tell apart, then how the user checks the session and brings it in reach.
    assert "-c/--config" in said and "-p/--profile" in said and "daemon_auto_start" in said and "codex exec" in said
    assert "rekall cannot tell which" in said
    hint = caught.value.hint
    assert "`/status` shows `Server: Local background server`" in hint and "codex --remote unix://" in hint
    assert "codex app-server daemon start" in hint


async def test_a_default_codex_home_is_named_as_the_default_with_the_likely_mistake(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    env = {"HOME": str(home), "TMPDIR": str(tmp_path)}  # as a hand registration forwarding no CODEX_HOME
    with anyio.fail_after(20), pytest.raises(RekallError) as caught:
        await find_owner(IDLE_THREAD["id"], env, request_timeout_s=5)
    assert f"CODEX_HOME {home}/.codex, the default, as CODEX_HOME is not set" in caught.value.message
    assert "forward it to rekall" in caught.value.message


async def test_a_thread_a_running_shared_app_server_has_not_loaded_is_not_told_to_start_one(
        folder: Path, tmp_path: Path) -> None:
    other = {**IDLE_THREAD, "id": "019a0000-0000-7000-8000-0000000000ee"}
    async with fake_app_server(folder / "app.sock", Script(thread__loaded__list=loaded(other["id"]))):
        env = {**env_for(folder / "app.sock"), "CODEX_HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
        with anyio.fail_after(20), pytest.raises(RekallError) as caught:
            await find_owner(IDLE_THREAD["id"], env, request_timeout_s=5)
    assert "does not have thread" in caught.value.message
    assert "start the shared app-server" not in str(caught.value.hint) and "daemon start" not in str(caught.value.hint)


def test_a_job_names_its_platform_and_an_unknown_one_is_refused() -> None:
    assert platform_named(None, {}).name == "extension-ipc"  # recorded before platforms were: the extension's
    assert platform_named("app-server", {}).name == "app-server"
    with pytest.raises(OwnerUnknown, match="platform 'carrier-pigeon'"):
        platform_named("carrier-pigeon", {})
