"""The standing checkpoint's store: sealed, bound to its thread, replaced with history, cleared, removed."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from rekall.kernel.errors import InvalidInput
from rekall.store.checkpoint import (checkpoint_handoff, clear, current, deliveries, history, remove, save,
                                     sealed_record, summary)
from rekall.store.delivery import HOOK, DeliveryKey, take
from rekall.store.fsio import FileOps
from rekall.store.paths import JobPaths
from tests.jobkit import new_thread

NOTE = {"summary": "Port the parser to Rust.", "preserve": ["Never edit vendor/."], "discard": [],
        "nextStep": "Port lexer.rs."}


def saved(root: Path, thread: str, note: dict | None = None) -> dict:
    root.mkdir(mode=0o700, exist_ok=True)
    return save(root, thread, checkpoint_handoff(note or NOTE), FileOps())


def test_a_saved_checkpoint_is_sealed_by_the_sha256_of_its_private_file_and_bound_to_its_thread(tmp_path: Path):
    thread = new_thread()
    done = saved(tmp_path, thread)
    data = Path(done["path"]).read_bytes()
    assert done["changed"] is True and hashlib.sha256(data).hexdigest() == done["sha256"] == current(
        tmp_path, thread)["sha256"]
    record = json.loads(data)
    assert record == {"version": 1, "kind": "checkpoint", "threadId": thread, "handoff": {**NOTE, "resume": False}}
    for path in (Path(done["path"]), JobPaths(tmp_path).checkpoint_log(thread)):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sealed_record(tmp_path, new_thread(), done["sha256"]) is None  # another thread's name: not found
    Path(done["path"]).write_bytes(data.replace(b"lexer", b"parser"))
    assert sealed_record(tmp_path, thread, done["sha256"]) is None  # changed after it was saved


def test_a_new_checkpoint_replaces_the_earlier_which_stays_in_the_history(tmp_path: Path):
    thread = new_thread()
    first = saved(tmp_path, thread)
    second = saved(tmp_path, thread, {**NOTE, "nextStep": "Port ast.rs."})
    assert second["replaced"] == first["sha256"] and current(tmp_path, thread)["sha256"] == second["sha256"]
    assert [event["sha256"] for event in history(tmp_path, thread)] == [first["sha256"], second["sha256"]]
    assert sealed_record(tmp_path, thread, first["sha256"]) is not None


def test_saving_the_same_content_again_changes_nothing(tmp_path: Path):
    thread = new_thread()
    first = saved(tmp_path, thread)
    again = saved(tmp_path, thread, {**NOTE, "resume": False})
    assert again["changed"] is False and again["savedAt"] == first["savedAt"]
    assert len(history(tmp_path, thread)) == 1


def test_resume_true_is_refused_saying_a_checkpoint_never_starts_a_turn():
    with pytest.raises(InvalidInput) as refused:
        checkpoint_handoff({**NOTE, "resume": True})
    assert refused.value.field == "handoff.resume" and "never starts a turn" in refused.value.message
    with pytest.raises(InvalidInput) as odd:
        checkpoint_handoff({**NOTE, "resume": "no"})
    assert odd.value.field == "handoff.resume"


def test_the_handoffs_limits_and_credential_rules_apply_and_the_hint_says_save_again():
    with pytest.raises(InvalidInput) as secret:
        checkpoint_handoff({**NOTE, "preserve": ["the key is sk-proj-Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2"]})
    assert secret.value.field == "handoff.preserve[0]" and "sk-proj" not in secret.value.message
    assert "save the checkpoint again" in (secret.value.hint or "")
    with pytest.raises(InvalidInput) as missing:
        checkpoint_handoff({"summary": "x"})
    assert missing.value.field == "handoff.preserve"


def test_clear_ends_the_checkpoint_and_keeps_its_history(tmp_path: Path):
    thread = new_thread()
    done = saved(tmp_path, thread)
    assert clear(tmp_path, thread, FileOps())["cleared"] is True
    assert current(tmp_path, thread) is None and [e["event"] for e in history(tmp_path, thread)] == ["saved", "cleared"]
    assert clear(tmp_path, thread, FileOps()) == {"cleared": False}
    assert summary(tmp_path, thread)["state"] == "cleared" and summary(tmp_path, thread)["sha256"] == done["sha256"]


def test_a_torn_last_history_line_is_ignored_and_the_next_event_starts_on_its_own_line(tmp_path: Path):
    thread = new_thread()
    first = saved(tmp_path, thread)
    with open(JobPaths(tmp_path).checkpoint_log(thread), "ab") as log:
        log.write(b'{"event":"cleared","at":"2026-')  # a crash while appending
    assert current(tmp_path, thread)["sha256"] == first["sha256"]
    second = saved(tmp_path, thread, {**NOTE, "nextStep": "Port ast.rs."})
    assert [e["sha256"] for e in history(tmp_path, thread)] == [first["sha256"], second["sha256"]]


def test_remove_takes_every_checkpoint_file_of_the_thread_and_its_compactions_claims_and_no_other(tmp_path: Path):
    thread, other = new_thread(), new_thread()
    saved(tmp_path, thread)
    saved(tmp_path, thread, {**NOTE, "nextStep": "Port ast.rs."})
    kept = saved(tmp_path, other)
    assert take(tmp_path, DeliveryKey(thread, compaction="a" * 64), HOOK, checkpointSha256="x").won
    assert [d["compaction"] for d in deliveries(tmp_path, thread)] == ["a" * 64]
    listed = remove(tmp_path, thread, dry_run=True)
    assert len(listed["files"]) == 4 and all(Path(tmp_path, name).exists() for name in listed["files"])
    assert remove(tmp_path, thread, dry_run=False)["files"] == listed["files"]
    assert history(tmp_path, thread) == [] and JobPaths(tmp_path).checkpoint_files(thread) == []
    assert current(tmp_path, other)["sha256"] == kept["sha256"]
