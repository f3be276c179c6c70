"""Security checks, each a test: bad ids at every entry point, insecure IPC endpoints at the job
level, private files under a permissive umask, and no handoff text or secret in what rekall
prints or logs.

Already covered elsewhere, and not repeated here: symlinked, foreign-owned and group- or
world-accessible IPC directories and sockets at resolution (tests/transports/test_endpoint.py)
and at connect (tests/adapters/test_session_security.py); the peer uid check through the
injectable credential lookup (tests/transports/test_unix.py, test_session_security.py); the
jobs directory tightened or refused (tests/store/test_paths.py); credential patterns and
prose (tests/store/test_handoff.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rekall.usecases import service
from rekall.adapters.extension import connect_thread
from rekall.surfaces.cli import main
from rekall.kernel.errors import InvalidInput, RekallError
from rekall.surfaces.explain import build_explanation
from rekall.surfaces.history import collect_history
from rekall.usecases.spawn import spawn_worker
from rekall.store import JobStore
from tests.chaos.harness import ChaosJob, audit
from tests.chaos.ledger import LEDGER
from tests.chaos.rawmcp import RawMcp
from tests.mcpkit import HANDOFF

pytestmark = pytest.mark.chaos

GOOD = "0199a5c2-3333-4000-8000-000000000003"
BAD_IDS = ["../../../tmp/owned", "..", "/etc/passwd", f"{GOOD}/../x", f"{GOOD}\n", f"{GOOD}\x00", "",
           "0199a5c2333340008000000000000003", "{" + GOOD + "}", "０199a5c2-3333-4000-8000-000000000003", "x" * 300]
ROOT = Path(__file__).resolve().parents[2]


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@contextmanager
def nothing_created(root: Path) -> Iterator[None]:
    before = tree(root)
    yield
    assert tree(root) - before == set()


# --- bad ids -----------------------------------------------------------------------------------

def _store(env: dict[str, str]) -> JobStore:
    return JobStore.open(env)


ENTRY_POINTS: dict[str, Callable[[dict[str, str], str], Any]] = {
    "service.status_reply": lambda env, bad: service.status_reply(bad, env=env),
    "service.cancel thread": lambda env, bad: service.cancel(bad, GOOD, env=env),
    "service.cancel job": lambda env, bad: service.cancel(GOOD, bad, env=env),
    "service.schedule": lambda env, bad: asyncio.run(service.schedule(bad, HANDOFF, env=env)),
    "service.probe": lambda env, bad: asyncio.run(service.probe(bad, env=env)),
    "service.status_reply_with_trail": lambda env, bad: service.status_reply_with_trail(bad, env=env),
    "connect_thread": lambda env, bad: asyncio.run(connect_thread(bad, env=env)),
    "store.journal_path": lambda env, bad: _store(env).journal_path(GOOD, bad),
    "store.handoff_path": lambda env, bad: _store(env).handoff_path(bad, GOOD),
    "store.log_path": lambda env, bad: _store(env).log_path(GOOD, bad),
    "store.cancel_path": lambda env, bad: _store(env).cancel_path(bad, GOOD),
    "store.create_job": lambda env, bad: _store(env).create_job(bad, handoff=None, user_fingerprint=None),
    "store.open_lifecycle": lambda env, bad: _store(env).open_lifecycle(GOOD, bad),
    "store.request_cancel": lambda env, bad: _store(env).request_cancel(bad, GOOD),
    "store.verify_handoff": lambda env, bad: _store(env).verify_handoff(GOOD, bad, "00"),
    "store.find": lambda env, bad: _store(env).find(bad),
    "store.reap_if_dead": lambda env, bad: _store(env).reap_if_dead(bad),
    "explain": lambda env, bad: build_explanation(_store(env), bad),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_bad_id_is_refused_at_every_entry_point_naming_the_field_and_nothing_is_created(tmp_path: Path,
                                                                                          entry: str):
    env = {"REKALL_JOBS_DIR": str(tmp_path / "jobs"), "CODEX_HOME": str(tmp_path / "home")}
    JobStore.open(env)
    for bad in BAD_IDS:
        with nothing_created(tmp_path), pytest.raises(InvalidInput) as caught:
            ENTRY_POINTS[entry](env, bad)
        assert caught.value.field in ("threadId", "jobId") and caught.value.code == "invalid_id"
        LEDGER.fault("bad id")


CLI_FORMS = [["status", "{}"], ["schedule", "{}"], ["probe", "{}"], ["cancel", GOOD, "--thread", "{}"],
             ["cancel", "{}", "--thread", GOOD], ["explain", "{}"], ["history", "--thread", "{}"]]


@pytest.mark.parametrize("form", CLI_FORMS, ids=lambda f: " ".join(f).replace("{}", "BAD"))
def test_a_bad_id_on_the_command_line_exits_2_with_a_json_error(tmp_path: Path, form: list[str], capsys,
                                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("REKALL_JOBS_DIR", str(tmp_path / "jobs"))
    JobStore.open()  # the store directory itself may be created by any verb; nothing else may
    for bad in (b for b in BAD_IDS if b):  # an empty id means "not given" (tests/surfaces/test_cli.py)
        with nothing_created(tmp_path):
            assert main([part.replace("{}", bad) for part in form] + ["--json"]) == 2
        error = json.loads(capsys.readouterr().out)["error"]
        assert error["code"] == "invalid_id" and error["field"] in ("threadId", "jobId")


@pytest.mark.parametrize("pair", [("../x", GOOD), (GOOD, "../../x"), (GOOD, GOOD)], ids=["thread", "job", "unknown"])
def test_the_hidden_worker_verb_refuses_bad_or_unknown_ids_without_a_traceback(tmp_path: Path, pair):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CODEX_"))}
    env.update(REKALL_JOBS_DIR=str(home / "jobs"), CODEX_HOME=str(home))
    done = subprocess.run([sys.executable, "-m", "rekall", "worker", *pair], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr
    assert {path.split("/")[0] for path in tree(home)} <= {"jobs"}  # nothing outside the jobs directory


def test_a_bad_id_through_the_mcp_server_is_a_clear_tool_error(tmp_path: Path):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "CODEX_HOME": str(tmp_path),
           "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
    server = RawMcp(env)
    try:
        with nothing_created(tmp_path / "jobs"):
            for bad in BAD_IDS[:4]:
                for tool, args in (("compaction_status", {"threadId": bad}), ("probe_compaction", {"threadId": bad}),
                                   ("schedule_compaction", {"threadId": bad}),
                                   ("cancel_compaction", {"threadId": bad, "jobId": GOOD}),
                                   ("cancel_compaction", {"threadId": GOOD, "jobId": bad})):
                    result = server.call_tool(tool, args)["result"]
                    assert result["isError"], (tool, bad)
                    text = result["content"][0]["text"]
                    assert text.startswith(("[invalid_id] ", "[invalid_arguments] ")), text
    finally:
        assert server.close() == 0
    assert "Traceback" not in server.stderr


# --- insecure IPC endpoints, end to end ----------------------------------------------------------

def _ipc_dir(job: ChaosJob) -> Path:
    return Path(job.env["CODEX_HOME"]) / "ipc"


@pytest.mark.parametrize("damage", ["dir_0755", "socket_0666", "symlinked_dir"])
def test_schedule_refuses_an_insecure_ipc_endpoint_and_creates_no_job(tmp_path: Path, damage: str):
    with ChaosJob(tmp_path, codex_home=True) as job:
        ipc = _ipc_dir(job)
        if damage == "dir_0755":
            os.chmod(ipc, 0o755)
        elif damage == "socket_0666":
            os.chmod(ipc / "ipc.sock", 0o666)
        else:
            os.rename(ipc, ipc.with_name("real-ipc"))
            ipc.symlink_to(ipc.with_name("real-ipc"))
        with pytest.raises(RekallError) as caught:
            job.schedule()
        assert caught.value.code == "endpoint_insecure"
        assert not list(job.jobs_dir.glob("*.journal.jsonl"))
        assert job.counts() == (0, 0) and job.sim.call(lambda owner: owner.connections) == 0
        LEDGER.fault(f"insecure endpoint ({damage})")


def test_an_endpoint_made_insecure_after_scheduling_fails_the_job_before_any_request(tmp_path: Path, mocker):
    # A real endpoint means a real Codex binary for the schema check; that check is not the point here.
    mocker.patch.object(service, "public_schema_report", return_value={"status": "not_checked"})
    with ChaosJob(tmp_path, codex_home=True) as job:
        ipc = _ipc_dir(job)

        def spawn_after_damage(thread_id: str, job_id: str, **kwargs: Any) -> int:
            os.chmod(ipc, 0o755)  # someone loosens the directory between schedule and the worker's connect
            return spawn_worker(thread_id, job_id, **kwargs)

        job.schedule(spawn=spawn_after_damage)
        end = job.finish()
        assert (end["state"], end["errorCode"], end["outcomeMayBeUnknown"]) == ("failed", "endpoint_insecure", False)
        result = audit(job)
        assert job.job_counts() == (0, 0)
        assert not result.data_lost and not result.problems
        LEDGER.fault("insecure endpoint (after scheduling)")
        LEDGER.job(result, "insecure endpoint")


# --- private files ------------------------------------------------------------------------------

@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): oct(stat.S_IMODE(p.lstat().st_mode)) for p in [root, *root.rglob("*")]}


def test_every_file_a_job_leaves_is_private_even_under_umask_0(tmp_path: Path):
    with umask(0), ChaosJob(tmp_path, runtime="active") as job:  # the worker inherits the umask
        follows = job.sim.follow_count
        job.schedule()
        job.wait_followed(follows)
        locks = job.store.lock_root
        # the lock (in the lock directory), journal, handoff, status and log while it runs
        during = {**modes(job.jobs_dir), **{f"locks/{k}": v for k, v in modes(locks).items()}}
        assert any(name.endswith(".lock") for name in during)
        job.sim.complete_turn("completed")
        job.finish()
        job.sim.set_runtime("active")
        follows = job.sim.follow_count
        job.schedule()
        job.wait_followed(follows)
        job.cancel()  # leaves a cancel marker
        job.finish()
        after = {**modes(job.jobs_dir), **{f"locks/{k}": v for k, v in modes(locks).items()}}
    for kind in (".json", ".journal.jsonl", ".handoff.json", ".log", ".cancel", ".guard"):
        assert any(name.endswith(kind) for name in after), f"no {kind} file to check"
    loose = {name: mode for name, mode in {**during, **after}.items()
             if mode != ("0o700" if name in (".", "locks/.") else "0o600")}
    assert not loose, loose


def test_every_directory_rekall_creates_is_private_even_under_umask_0(tmp_path: Path):
    with umask(0):
        JobStore.open({"REKALL_JOBS_DIR": str(tmp_path / "a" / "b" / "jobs")})
    assert modes(tmp_path / "a") == {".": "0o700", "b": "0o700", "b/jobs": "0o700"}


# --- no handoff text and no secret in what rekall says or logs --------------------------------------

CANARY = "canary-7f3a9c"
CANARY_HANDOFF = {"summary": f"summary {CANARY}-s", "preserve": [f"keep {CANARY}-p"], "discard": [f"drop {CANARY}-d"],
                  "nextStep": f"next {CANARY}-n", "resume": True}


def test_no_handoff_text_appears_in_logs_status_explain_or_history(tmp_path: Path, capsys,
                                                                 monkeypatch: pytest.MonkeyPatch):
    with ChaosJob(tmp_path) as job:
        job.schedule(CANARY_HANDOFF)
        end = job.finish()
        assert end["state"] == "resumed"
        sent = job.sim.call(lambda owner: json.dumps(owner.start_turn_requests[0].params))
        assert f"{CANARY}-n" in sent  # the continuation does carry it: that is its purpose
        monkeypatch.setenv("REKALL_JOBS_DIR", str(job.jobs_dir))
        for argv in (["status", job.thread_id, "--json"], ["explain", job.job_id, "--json"], ["history", "--json"],
                     ["status", job.thread_id], ["explain", job.job_id]):
            assert main(argv) == 0
        printed = capsys.readouterr().out
        said = {
            "worker log": job.log_text(),
            "status": json.dumps(job.status()),
            "explain": json.dumps(build_explanation(job.store, job.job_id)),
            "history": json.dumps(collect_history(job.store)),
            "journal": job.store.journal_path(job.thread_id, job.job_id).read_text(encoding="utf-8"),
            "status file": job.store.status_path(job.thread_id).read_text(encoding="utf-8"),
            "cli output": printed,
        }
    leaks = [where for where, text in said.items() if CANARY in text]
    assert not leaks, leaks


SECRET = "ghp_" + "Zx9" * 12


def test_a_handoff_holding_a_secret_is_refused_everywhere_without_a_trace(tmp_path: Path, capsys,
                                                                        monkeypatch: pytest.MonkeyPatch):
    leaky = {**HANDOFF, "preserve": [f"the token is {SECRET}"]}
    with ChaosJob(tmp_path) as job:
        with pytest.raises(InvalidInput) as caught:
            job.schedule(leaky)
        assert caught.value.field == "handoff.preserve[0]" and SECRET not in str(caught.value.to_dict())
        handoff_file = tmp_path / "handoff.json"
        handoff_file.write_text(json.dumps(leaky), encoding="utf-8")
        for name, value in job.env.items():
            monkeypatch.setenv(name, value)
        assert main(["schedule", job.thread_id, "--handoff", str(handoff_file), "--json"]) == 2
        cli = capsys.readouterr()
        server = RawMcp(job.env)
        try:
            reply = server.call_tool("schedule_compaction", {"threadId": job.thread_id, "handoff": leaky})
        finally:
            server.close()
        assert reply["result"]["isError"]
        on_disk = "".join(path.read_text(encoding="utf-8", errors="replace")
                          for path in job.jobs_dir.rglob("*") if path.is_file())
        outputs = {"cli": cli.out + cli.err, "mcp": json.dumps(reply), "mcp stderr": server.stderr, "jobs dir": on_disk}
        assert not [where for where, text in outputs.items() if SECRET in text]
        assert not list(job.jobs_dir.glob("*.journal.jsonl")) and job.counts() == (0, 0)
        LEDGER.fault("secret in a handoff", 3)
