"""``rekall doctor``: one row per concern, against the simulated owner and broken installations.

The simulated owner with ``codex_home=True`` listens on ``$CODEX_HOME/ipc/ipc.sock``, so the
real endpoint resolution and its filesystem checks run. Each RED or AMBER cause is made for
real on disk (a mode, a symlink, a stale lock written through the store, a second extension
on PATH) and the row that must catch it is checked, with its hint.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import anyio
import pytest

from rekall.usecases import service
from rekall.usecases.doctor import Report, Row, diagnose
from rekall.sim import SimulatedOwner, start_sim_in_thread
from rekall.sim import protocol as p
from rekall.store import JobStore, process_start_time
from tests.codexkit import real_codex
from tests.support.account_home import account_env
from tests.mcpkit import wait_for_worker_exit
from tests.support.bundles import build_table, install_extension, minified
from tests.usecases.test_hook_doctor import install_hook

pytestmark = pytest.mark.anyio

EXTENSION_VERSION = "26.901.22334"
SCHEMA_EXCERPT = Path(__file__).resolve().parents[2] / "fixtures" / "schema" / "codex-0.171.0"
ALL_ROWS = ["sandbox", "settings", "handoff_delivery", "codex_home", "ipc_endpoint", "extension_protocol", "router",
            "owner", "codex_binary", "public_schema", "app_server_socket", "app_server", "app_server_version",
            "app_server_thread", "app_server_schema", "session_hook_installed", "session_hook_enabled",
            "session_hook_trusted", "session_hook_not_managed_only", "checkpoint_plan", "jobs_dir",
            "recorded_jobs_dirs", "locks", "workers"]


# --- helpers ------------------------------------------------------------------------------


def fake_extension(root: Path, script: str, version: str = EXTENSION_VERSION) -> Path:
    """An ``openai.chatgpt`` extension folder whose ``bin/<platform>/codex`` runs ``script``."""
    extension = root / f"openai.chatgpt-{version}-linux-x64"
    bin_dir = extension / "bin" / "linux-x86_64"
    bin_dir.mkdir(parents=True)
    (extension / "package.json").write_text(json.dumps({"publisher": "openai", "name": "chatgpt",
                                                        "version": version}))
    (extension / "out").mkdir()
    (extension / "out" / "extension.js").write_text(minified(p.TABLES[p.DEFAULT_GENERATION]))
    codex = bin_dir / "codex"
    codex.write_text("#!/bin/sh\n" + script)
    codex.chmod(0o755)
    return codex


def wrapping(real_codex: Path) -> str:
    """A launcher script that runs the real Codex."""
    return f'exec "{real_codex}" "$@"\n'


def serving_schema(schema_dir: Path) -> str:
    """A stand-in Codex that reports 0.171.0 and "generates" the schema in ``schema_dir``."""
    return ('case "$1 $2" in\n'
            '  "--version "*) echo "codex-cli 0.171.0" ;;\n'
            f'  "app-server generate-json-schema") cp "{schema_dir}"/*.json "$4" ;;\n'
            '  *) exit 2 ;;\n'
            'esac\n')


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No inherited rekall or Codex settings, no extension on PATH, no legacy socket in TMPDIR."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)), "TMPDIR": str(tmp),
           "REKALL_JOBS_DIR": str(tmp_path / "jobs"), **account_env()}
    env.update(extra)
    return env


def by_name(report: Report) -> dict[str, Row]:
    return {row.name: row for row in report.rows}


def run_cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rekall", "doctor", *args], env={**env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
async def sim_home() -> AsyncIterator[SimulatedOwner]:
    """The simulated owner behind ``$CODEX_HOME/ipc/ipc.sock``."""
    async with SimulatedOwner(codex_home=True) as sim:
        yield sim


@pytest.fixture
def codex_binary() -> Path:
    """The real Codex (as in tests/codex); skipped with the reason when it is not installed (failed in CI)."""
    return real_codex()


@pytest.fixture
def excerpt_codex(tmp_path: Path) -> Path:
    """An extension-bundled stand-in for Codex that serves the stored 0.171.0 schema excerpt."""
    return fake_extension(tmp_path / "extensions", serving_schema(SCHEMA_EXCERPT))


# --- healthy ------------------------------------------------------------------------------


@pytest.mark.codex
def test_a_healthy_installation_is_green_on_every_row_with_the_real_codex(codex_binary: Path, tmp_path: Path) -> None:
    codex = fake_extension(tmp_path / "extensions", wrapping(codex_binary))
    with start_sim_in_thread(codex_home=True) as sim:
        install_hook(Path(sim.env["CODEX_HOME"]))
        thread = sim.thread_id
        env = base_env(tmp_path, **sim.env, CODEX_THREAD_ID=thread, PATH=f"{codex.parent}:/usr/bin:/bin")
        done = run_cli(env, "--json")
        people = run_cli(env)

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "GREEN"
    assert [r["name"] for r in report["rows"]] == ALL_ROWS
    assert report["serves"] == ["the VS Code extension"] and report["next"] == "nothing: rekall is ready"
    assert all(set(r) == {"name", "level", "detail", "hint"} and r["level"] == "GREEN" and r["hint"] is None
               for r in report["rows"]), report
    rows = {r["name"]: r["detail"] for r in report["rows"]}
    assert "primary socket" in rows["ipc_endpoint"] and "directory 0700, socket 0600" in rows["ipc_endpoint"]
    assert "initialize answered" in rows["router"] and "matches ours" in rows["router"]
    assert thread in rows["owner"] and "generation 26.9xx (" in rows["owner"]
    assert f"openai.chatgpt {EXTENSION_VERSION}" in rows["codex_binary"] and "from PATH" in rows["codex_binary"]
    assert "Codex 0.171.0: all 7 checks pass" in rows["public_schema"]
    assert "item_completed.context_compaction" in rows["public_schema"]

    assert people.returncode == 0, people.stderr
    assert people.stdout.splitlines()[:2] == ["verdict: rekall can serve the VS Code extension (not terminal sessions "
                                              "on the shared app-server)", "next: nothing: rekall is ready"]
    assert all(name in people.stdout for name in ALL_ROWS)


async def test_a_test_endpoint_is_named_and_its_filesystem_checks_are_skipped(tmp_path: Path) -> None:
    async with SimulatedOwner() as sim:
        report = await diagnose(base_env(tmp_path, **sim.env, CODEX_THREAD_ID=sim.thread_id))
    rows = by_name(report)
    assert rows["ipc_endpoint"].level == "AMBER"
    assert f"test endpoint {sim.socket_path} (from REKALL_PIPE)" in rows["ipc_endpoint"].detail
    assert "checks are skipped" in rows["ipc_endpoint"].detail and "REKALL_PIPE" in rows["ipc_endpoint"].hint
    assert rows["router"].level == "GREEN" and rows["owner"].level == "GREEN"
    # No extension behind a test endpoint: probe and schedule skip the schema, so a missing binary is a warning.
    assert rows["codex_binary"].level == "AMBER" and "not needed with the test endpoint" in rows["codex_binary"].detail
    assert rows["public_schema"].level == "AMBER"
    assert report.verdict == "AMBER"


async def test_without_codex_thread_id_there_is_no_owner_row_on_either_platform(sim_home: SimulatedOwner, tmp_path: Path,
                                                             excerpt_codex: Path) -> None:
    install_hook(Path(sim_home.env["CODEX_HOME"]))
    report = await diagnose(base_env(tmp_path, **sim_home.env, PATH=f"{excerpt_codex.parent}:/usr/bin"))
    assert [r.name for r in report.rows] == [n for n in ALL_ROWS if n not in ("owner", "app_server_thread")]
    assert report.verdict == "GREEN", report


# --- the IPC endpoint ----------------------------------------------------------------------


async def test_a_group_readable_ipc_directory_is_red_and_the_router_is_not_contacted(
        sim_home: SimulatedOwner, tmp_path: Path) -> None:
    ipc_dir = sim_home.socket_path.parent
    ipc_dir.chmod(0o750)
    report = await diagnose(base_env(tmp_path, **sim_home.env))
    rows = by_name(report)
    assert rows["ipc_endpoint"].level == "RED"
    assert f"{ipc_dir} has mode 0750" in rows["ipc_endpoint"].detail
    assert f"chmod 700 {ipc_dir}" in rows["ipc_endpoint"].hint
    assert rows["router"].level == "AMBER" and rows["router"].detail.startswith("not checked")
    assert sim_home.connections == 0 and report.verdict == "RED"


async def test_a_symlinked_socket_is_red(sim_home: SimulatedOwner, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "ipc").mkdir(parents=True, mode=0o700)
    (home / "ipc" / "ipc.sock").symlink_to(sim_home.socket_path)
    rows = by_name(await diagnose(base_env(tmp_path, CODEX_HOME=str(home))))
    assert rows["ipc_endpoint"].level == "RED"
    assert "is a symbolic link; refusing to follow it" in rows["ipc_endpoint"].detail
    assert sim_home.connections == 0


async def test_a_missing_socket_is_amber_as_an_absent_host_and_names_both_places_looked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "ipc").mkdir(parents=True, mode=0o700)
    report = await diagnose(base_env(tmp_path, CODEX_HOME=str(home)))
    row = by_name(report)["ipc_endpoint"]
    assert row.level == "AMBER" and report.verdict == "AMBER" and not report.ok
    assert by_name(report)["codex_binary"].level == "AMBER"  # the extension's binary: the same absent host
    assert f"{home}/ipc/ipc.sock does not exist" in row.detail and "legacy" in row.detail
    assert "open the thread in the Codex VS Code extension" in row.hint


@pytest.mark.parametrize("raw", ["abc", "-5", "nan", "1e309"])
async def test_an_invalid_setting_is_the_first_red_row_naming_the_variable_and_its_range(tmp_path: Path, raw: str):
    report = await diagnose(base_env(tmp_path, REKALL_IDLE_STABLE_MS=raw))
    row = next(row for row in report.rows if row.level == "RED")
    assert row.name == "settings" and row.level == "RED" and report.verdict == "RED"
    assert "REKALL_IDLE_STABLE_MS must be a number greater than 0 and at most 600000" in row.detail
    assert raw not in row.detail and "unset it" in row.hint


async def test_a_relative_codex_home_is_red(tmp_path: Path) -> None:
    rows = by_name(await diagnose(base_env(tmp_path, CODEX_HOME="relative/home")))
    assert rows["codex_home"].level == "RED" and "not an absolute path" in rows["codex_home"].detail
    assert rows["ipc_endpoint"].level == "RED"


async def test_a_thread_nobody_owns_is_red_on_the_owner_row(sim_home: SimulatedOwner, tmp_path: Path) -> None:
    stranger = "0199a5c2-0000-7000-8000-000000000001"
    rows = by_name(await diagnose(base_env(tmp_path, **sim_home.env, CODEX_THREAD_ID=stranger)))
    assert rows["router"].level == "GREEN"
    assert rows["owner"].level == "RED" and f"no client owns thread {stranger}" in rows["owner"].detail
    assert "never guess an owner" in rows["owner"].hint


# --- the codex binary and schema --------------------------------------------------------


async def test_a_missing_codex_binary_is_red_outside_a_test_endpoint(sim_home: SimulatedOwner,
                                                                     tmp_path: Path) -> None:
    report = await diagnose(base_env(tmp_path, **sim_home.env))
    rows = by_name(report)
    assert rows["codex_binary"].level == "RED"
    assert "no extension-bundled Codex binary found" in rows["codex_binary"].detail
    assert "REKALL_CODEX_BINARY" in rows["codex_binary"].hint
    assert rows["public_schema"].level == "AMBER" and report.verdict == "RED"


async def test_two_extension_versions_on_path_are_red_as_ambiguous(tmp_path: Path, excerpt_codex: Path) -> None:
    newer = fake_extension(tmp_path / "newer", serving_schema(SCHEMA_EXCERPT), version="26.999.1")
    path = f"{excerpt_codex.parent}:{newer.parent}:/usr/bin"
    rows = by_name(await diagnose(base_env(tmp_path, PATH=path)))
    assert rows["codex_binary"].level == "RED"
    assert "2 extension-bundled Codex binaries" in rows["codex_binary"].detail
    assert str(excerpt_codex) in rows["codex_binary"].detail and str(newer) in rows["codex_binary"].detail


async def test_a_standalone_codex_override_is_amber(tmp_path: Path) -> None:
    standalone = tmp_path / "codex"
    standalone.write_text("#!/bin/sh\n" + serving_schema(SCHEMA_EXCERPT))
    standalone.chmod(0o755)
    rows = by_name(await diagnose(base_env(tmp_path, REKALL_CODEX_BINARY=str(standalone))))
    assert rows["codex_binary"].level == "AMBER" and "not inside an extension folder" in rows["codex_binary"].detail
    assert rows["public_schema"].level == "GREEN"


async def test_a_drifted_schema_is_red_naming_the_failing_checks_and_is_cached(tmp_path: Path) -> None:
    from tests.codex.drift import remove_context_compaction

    drifted = tmp_path / "drifted"
    shutil.copytree(SCHEMA_EXCERPT, drifted)
    remove_context_compaction(drifted)
    codex = fake_extension(tmp_path / "extensions", serving_schema(drifted))
    env = base_env(tmp_path, CODEX_HOME=str(tmp_path / "home"), PATH=f"{codex.parent}:/usr/bin")

    first = by_name(await diagnose(env))["public_schema"]
    assert first.level == "RED"
    assert "item_started.context_compaction" in first.detail and "item_completed.context_compaction" in first.detail
    assert "item_started.params" not in first.detail  # only the checks the drift broke
    assert "generated now" in first.detail and "schedule refuses" in first.hint
    again = by_name(await diagnose(env))["public_schema"]
    assert again.level == "RED" and "from the cache" in again.detail


# --- the jobs directory, locks and workers ----------------------------------------------


async def test_a_group_readable_jobs_directory_is_amber_and_left_as_it_is(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o750)
    jobs.chmod(0o750)
    row = by_name(await diagnose(base_env(tmp_path)))["jobs_dir"]
    assert row.level == "AMBER" and "mode 0750" in row.detail and f"chmod 700 {jobs}" in row.hint
    assert jobs.stat().st_mode & 0o777 == 0o750  # the doctor changes nothing


async def test_a_readable_file_in_a_private_jobs_directory_is_amber(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    (jobs / "notes.json").write_text("{}")
    (jobs / "notes.json").chmod(0o644)
    row = by_name(await diagnose(base_env(tmp_path)))["jobs_dir"]
    assert row.level == "AMBER" and "notes.json" in row.detail


def test_a_hostile_file_name_reaches_the_doctors_output_escaped_and_its_json_unchanged(tmp_path: Path) -> None:
    # It used to reach the terminal as it was: an escape sequence recoloured (or cleared) the report.
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    hostile = "\x1b[2J\x1b[31mok\u202etxt.\x9b1m"
    (jobs / hostile).symlink_to(tmp_path)
    people = run_cli(base_env(tmp_path))
    assert hostile not in people.stdout and not any(c in people.stdout for c in "\x1b\u202e\x9b")
    assert "\\x1b[2J\\x1b[31mok\\u202etxt.\\x9b1m" in people.stdout
    scripts = run_cli(base_env(tmp_path), "--json")
    assert not any(c in scripts.stdout for c in "\x1b\u202e\x9b")
    row = next(row for row in json.loads(scripts.stdout)["rows"] if row["name"] == "jobs_dir")
    assert hostile in row["detail"]  # a script reads the name as it is


@pytest.fixture
def read_only_mount(tmp_path: Path):
    """A read-only tmpfs holding an existing private ``jobs`` folder (mounting needs root)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root; the mode 0500 test covers a normal user")
    steps = [["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount)],
             ["mkdir", "-m", "0700", str(mount / "jobs")], ["mount", "-o", "remount,ro", str(mount)]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)
            pytest.skip(f"cannot prepare a read-only tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("where", ["jobs", "jobs/not-yet"])
async def test_a_jobs_directory_on_a_read_only_filesystem_is_red(tmp_path: Path, read_only_mount: Path,
                                                                where: str) -> None:
    env = base_env(tmp_path, REKALL_JOBS_DIR=str(read_only_mount / where))
    row = by_name(await diagnose(env))["jobs_dir"]
    assert row.level == "RED" and "Read-only file system" in row.detail, row
    assert os.listdir(read_only_mount / "jobs") == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes through mode 0500")
async def test_a_jobs_directory_mode_0500_is_red_for_a_normal_user(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o500)
    jobs.chmod(0o500)
    try:
        row = by_name(await diagnose(base_env(tmp_path)))["jobs_dir"]
    finally:
        jobs.chmod(0o700)
    assert row.level == "RED" and "Permission denied" in row.detail


async def test_the_doctor_never_advises_a_chmod_that_would_follow_a_symlink(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's file")
    outside.chmod(0o644)
    (jobs / "0199a5c2-1111-7000-8000-000000000009.json").symlink_to(outside)
    (jobs / "notes.json").write_text("{}")
    (jobs / "notes.json").chmod(0o644)
    row = by_name(await diagnose(base_env(tmp_path)))["jobs_dir"]
    assert row.level == "AMBER" and "symbolic link" in row.detail
    assert "*" not in row.hint and "chmod 600" not in row.hint
    assert outside.stat().st_mode & 0o777 == 0o644


async def test_the_chmod_the_doctor_advises_names_regular_files_only(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    (jobs / "notes.json").write_text("{}")
    (jobs / "notes.json").chmod(0o644)
    row = by_name(await diagnose(base_env(tmp_path)))["jobs_dir"]
    assert row.hint == f"run: chmod 600 -- {jobs / 'notes.json'}"


async def test_a_jobs_path_that_is_a_file_is_red_and_its_locks_are_not_checked(tmp_path: Path) -> None:
    (tmp_path / "jobs").write_text("not a directory")
    report = await diagnose(base_env(tmp_path))
    rows = by_name(report)
    assert rows["jobs_dir"].level == "RED" and "is not a directory" in rows["jobs_dir"].detail
    assert rows["locks"].detail.startswith("not checked") and rows["workers"].detail.startswith("not checked")
    assert report.verdict == "RED"


def dead_process() -> tuple[int, str | None]:
    """The pid and start time of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = process_start_time(child.pid)
    child.communicate(b"", timeout=30)
    return child.pid, started


async def test_a_stale_lock_is_amber_until_status_records_its_job_as_worker_lost(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    store = JobStore.open(env)
    thread = "0199a5c2-1111-7000-8000-000000000002"
    job = store.create_job(thread, handoff=None, user_fingerprint=None).job_id
    store.set_lock_holder(thread, job, *dead_process())

    row = by_name(await diagnose(env))["locks"]
    assert row.level == "AMBER"
    assert f"stale (its worker is gone): thread {thread} (job {job}" in row.detail
    assert f"rekall status {thread}" in row.hint and "worker_lost" in row.hint
    assert store.lock_path(thread).exists()  # the doctor reaps nothing

    recorded = service.status_reply(thread, env=env)  # what the hint says to do
    assert recorded["state"] == "failed" and recorded["errorCode"] == "worker_lost"
    assert by_name(await diagnose(env))["locks"] == Row.green("locks", "no locks")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker scan is checked on Linux")
async def test_a_worker_whose_job_does_not_hold_the_lock_is_orphaned(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    JobStore.open(env)
    thread, job = "0199a5c2-2222-7000-8000-000000000003", "0199a5c2-3333-7000-8000-000000000004"
    # Looks like `python -m rekall worker THREAD JOB` to the scan, and waits for its stdin to close.
    impostor = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-m", "rekall", "worker",
                                 thread, job], stdin=subprocess.PIPE, env=env)
    elsewhere = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-m", "rekall", "worker",
                                  thread, job], stdin=subprocess.PIPE, env={**env, "REKALL_JOBS_DIR": str(tmp_path)})
    try:
        row = by_name(await diagnose(env))["workers"]
    finally:
        for child in (impostor, elsewhere):
            child.communicate(b"", timeout=30)
    assert row.level == "AMBER"
    assert f"1 orphaned worker(s): pid {impostor.pid} (thread {thread}, job {job}; the thread has no lock)" in row.detail
    assert str(elsewhere.pid) not in row.detail  # another jobs directory's worker is not ours to judge
    assert row.hint.endswith(f"kill {impostor.pid}")


@pytest.mark.slow
async def test_a_running_job_holds_a_live_lock_and_its_worker_is_not_an_orphan(tmp_path: Path) -> None:
    async with SimulatedOwner(runtime="active") as sim:
        env = base_env(tmp_path, **sim.env, REKALL_IDLE_STABLE_MS="50")
        scheduled = await service.schedule(sim.thread_id, env=env)
        with anyio.fail_after(20):
            while service.status_reply(sim.thread_id, env=env)["state"] != "waiting_for_idle":
                await anyio.sleep(0.02)
        rows = by_name(await diagnose(env))
        service.cancel(sim.thread_id, scheduled["jobId"], env=env)
        await wait_for_worker_exit(scheduled["pid"])
    assert rows["jobs_dir"].level == "GREEN" and "files private" in rows["jobs_dir"].detail
    assert rows["locks"] == Row.green("locks", "1 lock(s), each held by a live worker")
    if sys.platform.startswith("linux"):
        assert rows["workers"] == Row.green("workers", "1 worker(s) running, each holding its thread's lock")
    assert service.status_reply(sim.thread_id, env=env)["state"] == "cancelled"


# --- the verb ----------------------------------------------------------------------------


def test_on_a_fresh_account_the_verb_leads_with_neither_host_and_setup_as_the_next_step_and_exits_1(
        tmp_path: Path) -> None:
    (tmp_path / "codex").mkdir()
    env = base_env(tmp_path, CODEX_HOME=str(tmp_path / "codex"))
    done = run_cli(env, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "AMBER" and report["serves"] == [] and "RED" not in {r["level"] for r in report["rows"]}
    assert report["next"] == "run `rekall setup` (it installs the plugin and trusts its hook)"
    assert all((r["level"] == "GREEN") == (r["hint"] is None) for r in report["rows"])

    people = run_cli(env)
    assert people.returncode == 1
    assert people.stdout.splitlines()[:2] == [
        "verdict: rekall can serve neither the VS Code extension nor terminal sessions on the shared app-server here yet",
        "next: run `rekall setup` (it installs the plugin and trusts its hook)"]
    assert "note" not in people.stderr


async def test_a_red_row_names_itself_in_the_verdict_and_gives_the_next_step(tmp_path: Path) -> None:
    report = await diagnose(base_env(tmp_path, REKALL_IDLE_STABLE_MS="abc"))
    assert report.answer == "rekall cannot work here (settings is RED)" and not report.ok
    assert report.next_step == next(r.hint for r in report.rows if r.name == "settings")


def test_a_row_must_carry_a_hint_exactly_when_it_is_not_green() -> None:
    with pytest.raises(ValueError):
        Row("x", "AMBER", "detail")
    with pytest.raises(ValueError):
        Row("x", "GREEN", "detail", "hint")


async def test_with_no_extension_installed_the_extension_protocol_row_is_amber_not_green(tmp_path: Path) -> None:
    report = await diagnose(base_env(tmp_path, PATH="/usr/bin:/bin"))
    row = by_name(report)["extension_protocol"]
    assert row.level == "AMBER" and row.detail.startswith("no installed extension found")
    assert "terminal sessions" in str(row.hint)


# --- what earlier runs left behind ---------------------------------------------------------


def test_the_lock_of_a_vanished_jobs_directory_is_removed_once_and_never_noted(tmp_path: Path) -> None:
    gone = tmp_path / "demo-jobs"
    env = base_env(tmp_path, REKALL_JOBS_DIR=str(gone))
    store = JobStore.open(env)
    thread = "0199a5c2-1111-7000-8000-000000000009"
    job = store.create_job(thread, handoff=None, user_fingerprint=None).job_id
    store.set_lock_holder(thread, job, *dead_process())
    shutil.rmtree(gone)  # what `rekall demo` and test runs do to their folders
    here = base_env(tmp_path)

    first = run_cli(here, "--json")
    second = run_cli(here, "--json")

    assert not store.lock_path(thread).exists()
    assert "note" not in first.stderr + second.stderr, first.stderr
    locks = {r["name"]: r for r in json.loads(first.stdout)["rows"]}["locks"]
    assert (locks["level"], locks["detail"]) == ("GREEN", "no locks; removed 1 stale lock(s) of jobs directories "
                                                          "that no longer exist")
    recorded = {r["name"]: r for r in json.loads(first.stdout)["rows"]}["recorded_jobs_dirs"]
    assert recorded["level"] == "GREEN" and "removed 1 that no longer exist" in recorded["detail"]
    again = {r["name"]: r for r in json.loads(second.stdout)["rows"]}
    assert again["locks"]["detail"] == "no locks" and "removed" not in again["recorded_jobs_dirs"]["detail"]


def test_a_live_workers_lock_of_a_vanished_jobs_directory_is_left_alone(tmp_path: Path) -> None:
    gone = tmp_path / "gone-jobs"
    store = JobStore.open(base_env(tmp_path, REKALL_JOBS_DIR=str(gone)))
    thread = "0199a5c2-1111-7000-8000-00000000000a"
    job = store.create_job(thread, handoff=None, user_fingerprint=None).job_id
    store.set_lock_holder(thread, job, os.getpid(), process_start_time(os.getpid()))
    shutil.rmtree(gone)

    locks = {r["name"]: r for r in json.loads(run_cli(base_env(tmp_path), "--json").stdout)["rows"]}["locks"]

    assert store.lock_path(thread).exists() and locks["detail"] == "1 lock(s), each held by a live worker"


async def test_a_corrupt_jobs_dirs_list_is_amber_and_left_as_it_is(tmp_path: Path, user_home: Path) -> None:
    listed = user_home / ".rekall" / "jobs-dirs.json"
    listed.parent.mkdir(mode=0o700)
    listed.write_text('["/a", ')
    row = by_name(await diagnose(base_env(tmp_path)))["recorded_jobs_dirs"]
    assert row.level == "AMBER" and f"{listed} is corrupt: not JSON" in row.detail
    assert f"mv {listed} {listed}.bad" in str(row.hint)
    assert listed.read_text() == '["/a", '


# --- the daemon's Codex against the CLI's -------------------------------------------------


def codex_reporting(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True)
    codex = folder / "codex"
    codex.write_text(f'#!/bin/sh\necho "codex-cli {version}"\n')
    codex.chmod(0o755)
    return codex


def test_a_daemon_older_than_the_cli_on_path_names_both_and_says_to_restart_it(tmp_path: Path) -> None:
    from rekall.adapters.app_server.platform import RESTART_DAEMON, version_row
    from rekall.adapters.app_server.serving_binary import ServedBy

    codex = codex_reporting(tmp_path / "bin", "0.172.0")
    daemon = ServedBy(1234, "/daemon/codex", "the daemon's managedCodexPath")

    row = version_row({"PATH": str(codex.parent)}, daemon, "0.171.0")
    same = version_row({"PATH": str(codex.parent)}, daemon, "0.172.0")

    assert row.level == "AMBER" and row.hint == RESTART_DAEMON
    assert "the daemon runs Codex 0.171.0" in row.detail and f"({codex}) is Codex 0.172.0" in row.detail
    assert "`codex app-server daemon stop`, then start any `codex`" in RESTART_DAEMON
    assert same == Row.green("app_server_version", f"the daemon and the `codex` on PATH ({codex}) are both Codex 0.172.0")
    by_hand = ServedBy(None, str(codex), "the `codex` on PATH")
    assert version_row({"PATH": str(codex.parent)}, by_hand, "0.171.0").level == "GREEN"
