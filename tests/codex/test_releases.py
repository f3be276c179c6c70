"""The declared range of Codex releases on the shared app-server: judged from the server's own
version, right after ``initialize``, in the client, ``probe``, ``schedule`` and ``doctor``.

The server is the scripted ``websockets`` server of tests/codex/fakeserver.py stating a version;
the real releases of the range run in CI (scripts/test, docs/app-server.md's table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from rekall.usecases import service
from rekall.adapters.app_server.releases import NEWEST, OLDEST, Release, UnsupportedCodex
from rekall.adapters.app_server.client import open_shared_app_server
from tests.codex.fakeserver import env_for, fake_app_server, folder  # noqa: F401 (a fixture)
from tests.codex.test_platform import IDLE_THREAD, T, Script, loaded, ok

pytestmark = pytest.mark.anyio

REFUSAL = f"Codex 0.150.1 is older than rekall supports ({OLDEST} or newer); update Codex"


@pytest.mark.parametrize(("version", "standing"), [
    ("0.150.1", "older"), ("0.155.1", "older"), ("0.156.0-alpha.2", "older"), (OLDEST, "supported"),
    ("0.163.0", "supported"), (NEWEST, "supported"), ("0.172.0", "unmeasured"), ("0.170.0-alpha.1", "unmeasured"),
    ("1.0.0", "unmeasured"), (None, "unknown"), ("", "unknown"), ("main", "unknown"), ("0.171", "unknown"),
])
def test_a_version_stands_older_supported_unmeasured_or_unknown_against_the_range(version: str | None,
                                                                                   standing: str) -> None:
    assert Release.of(version).standing == standing


def test_the_words_name_the_version_and_the_range() -> None:
    assert Release.of("0.150.1").words == REFUSAL
    assert Release.of("0.172.0").words == f"Codex 0.172.0 is not a release rekall was measured with ({OLDEST} to {NEWEST})"
    assert "did not state a Codex version rekall can read ('main')" in Release.of("main").words


async def test_a_server_older_than_the_range_is_refused_right_after_initialize_before_any_thread_request(
        folder: Path) -> None:
    methods: list[str] = []
    async with fake_app_server(folder / "app.sock", Script(), version="0.150.1", methods=methods):
        with anyio.fail_after(10), pytest.raises(UnsupportedCodex) as caught:
            async with open_shared_app_server(env_for(folder / "app.sock")):
                pytest.fail("an older server must not be handed out")
    assert caught.value.message == REFUSAL and caught.value.code == "codex_unsupported"
    assert "codex app-server daemon restart" in str(caught.value.hint)
    assert methods == ["initialize", "initialized"]


def _env(folder: Path, tmp_path: Path) -> dict[str, str]:
    return {**env_for(folder / "app.sock"), "CODEX_HOME": str(tmp_path), "TMPDIR": str(tmp_path), "PATH": "",
            "REKALL_JOBS_DIR": str(tmp_path / "jobs")}


def _no_job(tmp_path: Path) -> bool:
    return not any((tmp_path / "jobs").rglob("*.journal.jsonl")) if (tmp_path / "jobs").exists() else True


def _thread_script() -> Script:
    return Script(thread__loaded__list=loaded(T), thread__read=ok({"thread": {**IDLE_THREAD, "turns": []}}),
                  thread__turns__list=ok({"data": IDLE_THREAD["turns"], "nextCursor": None}))


async def test_probe_schedule_and_doctor_refuse_an_older_server_by_its_version_and_no_job_is_created(
        folder: Path, tmp_path: Path) -> None:
    from rekall.usecases.doctor import diagnose

    methods: list[str] = []
    env = _env(folder, tmp_path)
    async with fake_app_server(folder / "app.sock", _thread_script(), version="0.150.1", methods=methods):
        with anyio.fail_after(60):
            with pytest.raises(Exception) as probed:
                await service.probe(T, env=env)
            with pytest.raises(Exception) as scheduled:
                await service.schedule(T, None, env=env, spawn=lambda *a, **k: pytest.fail("no worker may start"))
            rows = {row.name: row for row in (await diagnose(env)).rows}
    assert REFUSAL in str(probed.value) and REFUSAL in str(scheduled.value)
    assert _no_job(tmp_path)
    assert rows["app_server"].level == "RED" and rows["app_server"].detail == REFUSAL
    assert rows["app_server_schema"].level == "RED" and rows["app_server_schema"].detail.startswith(REFUSAL)
    assert not [m for m in methods if m.startswith(("thread/", "turn/"))]


async def test_an_unchecked_schema_refuses_schedule_unless_the_server_states_a_release_in_the_range(
        folder: Path, tmp_path: Path) -> None:
    # PATH is empty and the server is not daemon-managed: its schema cannot be checked.
    from rekall.usecases.doctor import diagnose

    env = _env(folder, tmp_path)
    async with fake_app_server(folder / "app.sock", _thread_script(), version="0.172.0"):
        with anyio.fail_after(60):
            with pytest.raises(service.Refused) as caught:
                await service.schedule(T, None, env=env, spawn=lambda *a, **k: pytest.fail("no worker may start"))
            probed = await service.probe(T, env=env)
            rows = {row.name: row for row in (await diagnose(env)).rows}
    assert caught.value.message.startswith("Codex 0.172.0 is not a release rekall was measured with")
    assert "its schema could not be checked" in caught.value.message and "on PATH" in str(caught.value.hint)
    assert _no_job(tmp_path)
    assert probed["compatibility"]["publicSchema"]["release"]["standing"] == "unmeasured"
    assert rows["app_server_schema"].level == "RED" and "schedule refuses" in str(rows["app_server_schema"].hint)

    spawned: list[Any] = []
    async with fake_app_server(folder / "app.sock", _thread_script(), version=OLDEST):
        with anyio.fail_after(60):
            done = await service.schedule(T, None, env=env, spawn=lambda *a, **k: spawned.append(a) or 4242)
    assert done["platform"] == "app-server" and spawned


async def test_the_refusal_reaches_the_worker_too_when_the_daemon_is_replaced_by_an_older_release(
        folder: Path) -> None:
    from rekall.adapters.app_server.platform import SharedAppServerPlatform

    async with fake_app_server(folder / "app.sock", _thread_script(), version="0.155.1"):
        with anyio.fail_after(10), pytest.raises(UnsupportedCodex, match="0.155.1 is older"):
            await SharedAppServerPlatform(env_for(folder / "app.sock")).follow(T, request_timeout_s=5)



def test_the_docs_table_covers_the_declared_range_with_a_whole_job_on_each_ci_release() -> None:
    from bench.codex_releases import BEGIN, DOC, END
    from tests.support.pinned import CI_RELEASES

    table = DOC.read_text(encoding="utf-8").partition(BEGIN)[2].partition(END)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    releases = [row[0] for row in rows]
    assert releases[0] == OLDEST and releases[-1] == NEWEST
    assert releases == sorted(releases, key=lambda v: tuple(int(p) for p in v.split(".")))
    assert all(row[1] == "supported" and row[2] == "14 of 14 pass" for row in rows), rows
    assert [row[0] for row in rows if row[4]] == list(CI_RELEASES)
    assert all(row[3].startswith("resumed;") and row[3].endswith("one continuation") for row in rows if row[4])
