"""A third platform is one folder plus one registry line (:mod:`tests.support.toy_platform`): with
that line added, a whole job runs through ``rekall schedule`` to ``resumed`` on it, and ``probe``,
``status``, ``explain`` and ``doctor`` name it. No module of rekall knows it."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from rekall.worker import start as worker_start
from rekall.adapters import registry
from rekall.surfaces.cli import main
from rekall.adapters.resume import ResumeToken
from tests.jobkit import handoff
from tests.support import toy_platform
from tests.support.toy_platform import platform as toy


@pytest.fixture
def toy_thread(monkeypatch: pytest.MonkeyPatch, jobs_dir: Path) -> toy.ToyOwner:
    monkeypatch.setattr(registry, "PLATFORMS", [*registry.PLATFORMS, toy_platform])
    owner = toy.ToyOwner(str(uuid.uuid4()))
    monkeypatch.setitem(toy.OWNERS, owner.thread_id, owner)
    monkeypatch.setenv("REKALL_JOBS_DIR", str(jobs_dir))
    monkeypatch.setenv("REKALL_IDLE_STABLE_MS", "50")
    return owner


def said(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_toy_platform_added_by_one_registry_line_runs_a_whole_job_to_resumed_and_every_verb_names_it(
        toy_thread, tmp_path, monkeypatch, capsys):
    thread = toy_thread.thread_id
    started: list[tuple[str, str, ResumeToken]] = []

    def spawn(thread_id: str, job_id: str, *, scheduled: ResumeToken, **_: Any) -> int:
        started.append((thread_id, job_id, scheduled))  # run below, as the detached worker would run
        return os.getpid()

    monkeypatch.setattr("rekall.usecases.spawn.spawn_worker", spawn)

    code, probed = said(capsys, "probe", thread)
    assert code == 0 and probed["platform"] == "toy" and probed["ownerId"] == "toy-owner"
    assert probed["compatibility"]["publicSchema"]["toy"] is True  # the toy's own report
    assert toy_thread.compacts == 0  # the probe only read

    handoff_file = tmp_path / "handoff.json"
    handoff_file.write_text(json.dumps(handoff(resume=True)), encoding="utf-8")
    code, scheduled = said(capsys, "schedule", thread, "--handoff", str(handoff_file))
    assert code == 0 and scheduled["platform"] == "toy"
    assert scheduled["generationAtSchedule"] == {"toyOwner": "toy-owner"}  # the toy's token, journaled
    [(thread_id, job_id, token)] = started
    assert token == ResumeToken("toy", {"toyOwner": "toy-owner"})
    assert worker_start.run_worker(thread_id, job_id, scheduled=ResumeToken.from_argument(token.to_argument())) == 0

    assert toy_thread.compacts == 1 and [job for _, job in toy_thread.turns] == [job_id]
    assert toy_thread.resumed_from == [token]  # the worker opened the toy platform from its token
    code, status = said(capsys, "status", thread)
    assert code == 0 and status["state"] == "resumed" and status["platform"] == "toy"
    assert status["resumeTurnId"] == "toy-turn-1"
    code, explained = said(capsys, "explain", job_id)
    assert code == 0 and '"platform": "toy"' in json.dumps(explained)
    code, doctor = said(capsys, "doctor")
    assert {"name": "toy_owners", "level": "GREEN", "detail": "the toy platform holds 1 thread(s)", "hint": None} \
        in doctor["rows"]


def test_with_three_platforms_and_none_claiming_the_thread_the_answer_is_each_platforms_own_words(
        toy_thread, monkeypatch):
    import asyncio

    from rekall.adapters.owners import OwnerUnknown, find_owner

    monkeypatch.delitem(toy.OWNERS, toy_thread.thread_id)  # the toy platform does not have it either
    with pytest.raises(OwnerUnknown) as caught:
        asyncio.run(find_owner(toy_thread.thread_id, request_timeout_s=2))
    message = caught.value.message
    assert message.startswith(f"no platform serves thread {toy_thread.thread_id}: the VS Code extension: ")
    assert "; the shared app-server: " in message  # absent, but not the only other one: named with the rest
    assert message.endswith(f"; the toy platform: no toy owner holds thread {toy_thread.thread_id}")
    assert caught.value.hint == "create a ToyOwner for it"  # the last platform's own hint
