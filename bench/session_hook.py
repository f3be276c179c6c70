"""What the plugin's SessionStart(compact) hook costs Codex, against the interpreter's start-up.

Codex waits for the hook before the turn's model request, so its whole run counts: the
interpreter starting, rekall's imports, finding the job, reading its journal, verifying the
handoff, winning the claim and printing. Each run starts the installed ``rekall`` command (the
console script, as Codex runs it) with Codex's hook input on standard input, and is timed from
``spawn`` to exit. Three kinds alternate, each against a fresh jobs directory written by the real
store:

* ``startup``: ``python -c pass`` with the same interpreter (the baseline);
* ``deliver``: a ``resume: false`` job whose compaction completed: the hook prints the framed
  handoff (a new job each run: a claim is won once);
* ``nothing``: the thread has no job: the hook prints nothing;
* ``checkpoint``: the thread has no job but a checkpoint, and its transcript (a rollout of about
  ``TRANSCRIPT_KB`` kB, ending in a ``compacted`` record) shows a compaction: the hook prints the
  framed checkpoint with the plan (a new thread each run: a compaction's claim is won once).

The target: the hook's median at most the start-up's median + 50 ms (wall time). The child's CPU
time (user + system) is printed beside it: on a loaded machine the wall time mostly measures the
wait for a core.

    python bench/session_hook.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.installed import compile_rekall  # noqa: E402
from rekall.testing import FakeClock  # noqa: E402
from tests.jobkit import FINGERPRINT, handoff, new_thread, open_store, run_lifecycle, script  # noqa: E402

TARGET_MS = 50.0
REKALL = Path(sys.executable).with_name("rekall")


def hook_input(thread: str, transcript: Path | None = None) -> bytes:
    return json.dumps({"session_id": thread, "transcript_path": transcript and str(transcript), "cwd": "/tmp", "hook_event_name": "SessionStart",
                       "model": "mock-model", "permission_mode": "default", "source": "compact"}).encode()


TRANSCRIPT_KB = 512


def checkpointed_thread(jobs: Path, tmp: Path) -> tuple[str, Path]:
    """A thread with a saved checkpoint, and a rollout of ``TRANSCRIPT_KB`` kB whose last record is a compaction."""
    from rekall.store.checkpoint import checkpoint_handoff, save
    from rekall.store.fsio import FileOps

    thread = new_thread()
    jobs.mkdir(mode=0o700, exist_ok=True)
    save(jobs, thread, checkpoint_handoff({**handoff(False), "resume": False}), FileOps())
    plan = json.dumps({"plan": [{"step": "Port lexer.rs", "status": "in_progress"}]})
    item = json.dumps({"timestamp": "2099-01-01T00:00:00.000Z", "type": "response_item", "payload": {
        "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x" * 900}]}})
    lines = [item] * (TRANSCRIPT_KB * 1024 // (len(item) + 1))
    lines.append(json.dumps({"timestamp": "2099-01-01T00:00:01.000Z", "type": "response_item", "payload": {
        "type": "function_call", "name": "update_plan", "arguments": plan, "call_id": "c1"}}, separators=(",", ":")))
    lines.append('{"timestamp":"2099-01-01T00:00:02.000Z","ordinal":9,"type":"compacted","payload":{"message":""}}')
    transcript = tmp / f"{thread}.jsonl"
    transcript.write_text("\n".join(lines) + "\n")
    transcript.chmod(0o600)
    return thread, transcript


def completed_job(jobs: Path) -> str:
    store, clock, thread = open_store(jobs), FakeClock(), new_thread()
    created = store.create_job(thread, handoff=handoff(False), user_fingerprint=FINGERPRINT)
    with store.open_lifecycle(thread, created.job_id) as lifecycle:
        run_lifecycle(lifecycle, clock, script(created.job_id, "completed"))
    return thread


def timed(command: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, float, bytes]:
    """Wall time from spawn to exit, and the child's CPU time (user + system), in ms."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, input=stdin, capture_output=True, env=env, timeout=60, check=True)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    wall: dict[str, list[float]] = {"startup": [], "deliver": [], "nothing": [], "checkpoint": []}
    cpu: dict[str, list[float]] = {kind: [] for kind in wall}

    def record(kind: str, measured: tuple[float, float, bytes]) -> bytes:
        wall[kind].append(measured[0])
        cpu[kind].append(measured[1])
        return measured[2]

    compile_rekall()
    with tempfile.TemporaryDirectory() as tmp:
        jobs = Path(tmp) / "jobs"
        env = {**os.environ, "REKALL_JOBS_DIR": str(jobs), "HOME": tmp}
        for _ in range(args.runs):
            thread = completed_job(jobs)
            record("startup", timed([sys.executable, "-c", "pass"], b"", env))
            out = record("deliver", timed([str(REKALL), "hook", "session-start"], hook_input(thread), env))
            assert b"additionalContext" in out, out
            out = record("nothing", timed([str(REKALL), "hook", "session-start"], hook_input(new_thread()), env))
            assert out == b"", out
            checkpointed = hook_input(*checkpointed_thread(jobs, Path(tmp)))
            out = record("checkpoint", timed([str(REKALL), "hook", "session-start"], checkpointed, env))
            assert b"update_plan" in out, out
    over = {}
    for name, figures in (("wall", wall), ("cpu", cpu)):
        medians = {kind: statistics.median(values) for kind, values in figures.items()}
        for kind, values in figures.items():
            print(f"{name:4} {kind:8} median {medians[kind]:6.1f} ms  (min {min(values):.1f}, max {max(values):.1f}, "
                  f"{len(values)} runs)")
        over[name] = max(medians["deliver"], medians["nothing"], medians["checkpoint"]) - medians["startup"]
        print(f"{name:4} hook - start-up: {over[name]:.1f} ms ("
              f"{'within' if over[name] <= TARGET_MS else 'OVER'} the target of {TARGET_MS:g} ms)")
    print(f"load average while measuring: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return 0 if over["wall"] <= TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
