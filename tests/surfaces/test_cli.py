"""The command line: exit codes, --json, the thread default, and a job watched live."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rekall.surfaces.cli import main
from rekall.sim import start_sim_in_thread
from rekall.store import FileOps

THREAD = "0199a5c2-2222-4000-8000-000000000002"


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rekall", *args], capture_output=True, text=True,
                          env=env if env is not None else dict(os.environ), timeout=timeout)


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "jobs"
    monkeypatch.setenv("REKALL_JOBS_DIR", str(path))
    return path


def test_a_missing_thread_is_a_usage_error_and_is_never_guessed(jobs, capsys):
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert "no thread id" in err and "CODEX_THREAD_ID" in err


def test_the_thread_defaults_to_codex_thread_id(jobs, monkeypatch, capsys):
    monkeypatch.setenv("CODEX_THREAD_ID", THREAD)
    assert main(["status", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["threadId"] == THREAD and out["state"] == "not_scheduled"


def test_a_path_like_thread_id_is_rejected_with_exit_2(jobs, capsys):
    assert main(["status", "../../etc/passwd"]) == 2
    assert "threadId must be a UUID" in capsys.readouterr().err
    assert not jobs.exists() or not any(jobs.iterdir())


def test_errors_are_json_for_scripts(jobs, capsys):
    assert main(["cancel", "0199a5c2-2222-4000-8000-0000000000ff", "--thread", THREAD, "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "job_identity_mismatch" and "hint" in error


def test_an_unknown_verb_or_option_exits_2():
    assert main(["frobnicate"]) == 2
    assert main(["status", "--bogus"]) == 2


def test_an_unknown_sim_generation_is_a_usage_error_before_anything_listens(tmp_path, capsys):
    socket_path = tmp_path / "sim.sock"
    assert main(["sim", "--generation", "99", "--socket", str(socket_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown generation '99'" in err and "26.9xx" in err and not socket_path.exists()


def test_mcp_refuses_json_as_a_usage_error_it_always_speaks_json_rpc(capsys):
    assert main(["mcp", "--json"]) == 2
    assert "unrecognized arguments: --json" in capsys.readouterr().out


def test_a_handoff_file_that_is_not_json_is_refused_before_anything_happens(jobs, tmp_path, capsys):
    bad = tmp_path / "handoff.json"
    bad.write_bytes(b"\xff\xfe not utf-8")
    assert main(["schedule", THREAD, "--handoff", str(bad)]) == 2
    assert "UTF-8" in capsys.readouterr().err
    assert not jobs.exists() or not list(jobs.glob("*.journal.jsonl"))


def test_schedule_then_watch_status_until_the_job_ends(tmp_path):
    handoff = tmp_path / "handoff.json"
    handoff.write_text(json.dumps({"summary": "s", "preserve": [], "discard": [], "nextStep": "stop after tests",
                                   "resume": True}), encoding="utf-8")
    with start_sim_in_thread() as sim:
        env = {**os.environ, **sim.env, "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "REKALL_IDLE_STABLE_MS": "50",
               "CODEX_THREAD_ID": sim.thread_id}
        scheduled = run("schedule", "--handoff", str(handoff), "--json", env=env)
        assert scheduled.returncode == 0, scheduled.stderr
        assert json.loads(scheduled.stdout)["state"] == "scheduled"
        watched = run("status", "--watch", "--json", env=env)
        assert watched.returncode == 0, watched.stderr
        final = json.loads(watched.stdout)
        assert final["state"] == "resumed"
        people = run("status", env=env)
        assert "resumed" in people.stdout and "tokens after" in people.stdout
        live = run("status", "--watch", env=env)  # a finished job: the whole path, then the table
        assert "scheduled → waiting_for_idle → requesting → accepted" in live.stdout
        assert "resuming → resumed" in live.stdout
        explained = json.loads(run("explain", sim.thread_id, "--json", env=env).stdout)
        assert explained["jobId"] == final["jobId"]
        assert explained["path"][-1] == "resumed" and explained["outcome"].startswith("Resumed")


def test_the_demo_ends_resumed_and_leaves_no_process_behind():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CODEX_", "CONTEXT_COMPACT_"))}
    done = run("demo", "--json", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)
    assert final["state"] == "resumed" and final["tokensReclaimed"] == 80000
    with pytest.raises(ProcessLookupError):
        os.kill(final["pid"], 0)
    assert not Path(final["handoffPath"]).exists()  # the demo's private directory is gone


# --- bad input never hurts: refused up front, and never a traceback ---------------------------


@pytest.fixture
def sim_env(jobs, monkeypatch):
    """A live simulated owner, so that only rekall's own checks stand between a command and a job."""
    with start_sim_in_thread() as sim:
        for name, value in sim.env.items():
            monkeypatch.setenv(name, value)
        yield sim


def no_job_files(jobs: Path) -> bool:
    return not jobs.exists() or not any(jobs.glob("*.journal.jsonl"))


@pytest.mark.parametrize("raw", ["abc", "-5", "nan", "1e309"])
@pytest.mark.parametrize("verb", ["schedule", "probe"])
def test_an_invalid_setting_is_refused_up_front_naming_the_variable_and_its_range(
        sim_env, jobs, monkeypatch, capsys, raw, verb):
    monkeypatch.setenv("REKALL_DEADLINE_S", raw)
    assert main([verb, sim_env.thread_id, "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "invalid_setting" and error["field"] == "REKALL_DEADLINE_S"
    assert "greater than 0 and at most 604800 (seconds)" in error["message"] and "unset" in error["hint"]
    assert no_job_files(jobs)


def test_a_handoff_file_holding_null_is_refused_and_nothing_is_scheduled(sim_env, jobs, tmp_path, capsys):
    null = tmp_path / "handoff.json"
    null.write_text("null")
    assert main(["schedule", sim_env.thread_id, "--handoff", str(null)]) == 2
    assert "holds JSON null, not an object" in capsys.readouterr().err
    assert no_job_files(jobs)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_deeply_nested_handoff_file_is_a_clear_error_not_a_traceback(jobs, tmp_path, capsys, as_json):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 1500 + "]" * 1500)
    assert main(["schedule", THREAD, "--handoff", str(deep), *(["--json"] if as_json else [])]) == 2
    out, err = capsys.readouterr()
    assert "nested deeper than 64 levels" in (out + err) and "Traceback" not in out + err


def test_a_never_ending_handoff_file_is_refused_after_a_bounded_read(jobs, capsys):
    done = run("schedule", THREAD, "--handoff", "/dev/zero", timeout=60)
    assert done.returncode == 2 and "larger than 1000000 bytes" in done.stderr and "Traceback" not in done.stderr


def test_a_handoff_of_dash_is_read_from_standard_input(sim_env, jobs):
    handoff = {"summary": "s", "preserve": [], "discard": [], "nextStep": "", "resume": False}
    done = subprocess.run([sys.executable, "-m", "rekall", "schedule", sim_env.thread_id, "--handoff", "-", "--json"],
                          input=json.dumps(handoff), capture_output=True, text=True, env=dict(os.environ), timeout=60)
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    assert job["handoff"] == handoff and job["state"] in ("scheduled", "waiting_for_idle")


def test_argument_errors_are_json_with_json(capsys):
    assert main(["cancel", "--json"]) == 2
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error["code"] == "usage" and "JOB" in error["message"] and "--help" in error["hint"]
    assert "usage:" not in out + err


def test_a_symlinked_journal_is_a_clear_error_on_every_verb_that_reads_it(store, jobs, monkeypatch, capsys):
    monkeypatch.setenv("REKALL_JOBS_DIR", str(store.root))
    job = store.create_job(THREAD, handoff=None, user_fingerprint=None, extra={}).job_id
    (journal,) = store.root.glob("*.journal.jsonl")
    journal.rename(store.root / "elsewhere.jsonl")
    journal.symlink_to(store.root / "elsewhere.jsonl")
    for argv in (["explain", job], ["explain", THREAD], ["status", THREAD], ["history"]):
        code = main([*argv, "--json"])
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err
        if code:
            error = json.loads(out)["error"]
            assert error["code"] and error["hint"] and "/" not in error["code"], argv


@pytest.mark.parametrize(("failure", "code"), [(errno.ENOSPC, "no_space"), (errno.EROFS, "read_only"),
                                               (errno.EACCES, "permission_denied")])
def test_a_full_or_read_only_jobs_directory_fails_schedule_with_a_code_and_a_next_step(
        sim_env, jobs, monkeypatch, capsys, failure, code):
    def refuse(fd, data):
        raise OSError(failure, os.strerror(failure))

    monkeypatch.setattr("rekall.store.jobstore.FileOps", lambda: FileOps(write=refuse))
    for as_json in (True, False):
        assert main(["schedule", sim_env.thread_id, *(["--json"] if as_json else [])]) == 1
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err
        if as_json:
            error = json.loads(out)["error"]
            assert error["code"] == code and error["hint"]
        else:
            assert err.startswith("rekall: ") and "  next: " in err


@pytest.mark.parametrize("as_json", [False, True])
def test_an_unexpected_exception_is_reported_by_type_with_a_code_and_no_traceback(jobs, monkeypatch, capsys, as_json):
    def broken(thread_id):
        raise ValueError(f"secret detail about {thread_id}")

    monkeypatch.setattr("rekall.usecases.service.status_reply", broken)
    assert main(["status", THREAD, *(["--json"] if as_json else [])]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "secret detail" not in out + err
    assert "unexpected ValueError" in out + err and ("internal_error" in out if as_json else "next:" in err)


def test_the_cli_names_its_own_verbs_where_the_service_names_mcp_tools(sim_env, jobs, capsys):
    assert main(["cancel", "0199a5c2-2222-4000-8000-0000000000ff", "--thread", sim_env.thread_id]) == 1
    err = capsys.readouterr().err
    assert "`rekall status`" in err and "compaction_status" not in err



def test_each_printer_is_a_reference_an_editor_can_follow_not_a_string_naming_it():
    import ast
    import importlib

    import rekall.surfaces.cli

    tree = ast.parse(Path(rekall.surfaces.cli.__file__).read_text(encoding="utf-8"))
    named = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and node.value.startswith("rekall.") and ":" in node.value]
    assert named == [], "a printer named by a 'module:function' string"
    assert not any(isinstance(node, ast.Import) and any(a.name == "importlib" for a in node.names)
                   for node in ast.walk(tree))
    printers = [(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names if alias.name.startswith("print_")]
    assert {name for _, name in printers} >= {"print_probe", "print_scheduled", "print_job", "print_cancelled",
                                              "print_explanation", "print_prune", "print_report", "print_history"}
    for module, name in printers:
        assert callable(getattr(importlib.import_module(module), name)), (module, name)


@pytest.mark.parametrize("as_json", [True, False])
def test_status_loads_rich_only_to_print_for_people(jobs, as_json):
    code = ("import json, sys\nfrom rekall.surfaces.cli import main\n"
            f"code = main(['status', {THREAD!r}{', ' + repr('--json') if as_json else ''}])\n"
            "print(json.dumps({'code': code, 'rich': any(m.split('.')[0] == 'rich' for m in sys.modules)}), "
            "file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                         timeout=60)
    assert json.loads(out.stderr.strip().splitlines()[-1]) == {"code": 0, "rich": not as_json}, out.stderr
    if as_json:
        assert json.loads(out.stdout)["state"] == "not_scheduled"
    else:
        assert "state  not_scheduled" in out.stdout
