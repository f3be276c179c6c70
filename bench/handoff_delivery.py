"""How fast and how large the handoff's delivery is, on the REAL shared app-server daemon.

One ``codex app-server daemon`` (isolated ``CODEX_HOME``, the loopback mock model) serves every
run. Per run a ``websockets`` client plays the user's terminal: it fills a thread, rekall
(``rekall.usecases.service.schedule``, a detached worker) compacts it, and then the user sends the next
message. Three kinds of run alternate:

* ``injected``: ``resume: false``; the worker injects the handoff with ``thread/inject_items``.
  ``injectDelayMs`` is the job's own figure: the compaction's completion as the worker saw it →
  the server's acknowledgement of the injection;
* ``continuation`` (the baseline for the delay): ``resume: true``; ``resumeDelayMs`` is the
  completion → the started continuation turn, minus the idle debounce the continuation waits for;
* ``off`` (the baseline for the size): ``resume: false`` with ``REKALL_INJECT_HANDOFF=off``.

The handoff's size as the model received it: the developer message's text in the model request
of the user's next turn (UTF-8 bytes, read from the mock model's record of that request), and the
server's reported input tokens for that request (``thread/tokenUsage/updated``, ``last.inputTokens``)
against the same request without the injection (``off``).

    python bench/handoff_delivery.py [--runs N] [--idle-stable-ms MS]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.app_server_jobs import FILLER, TIMEOUT_S, bench_daemon, run_job  # noqa: E402
from tests.codex.daemonkit import PeerClient, peer_client  # noqa: E402
from tests.support.mock_model import MockModel  # noqa: E402

HANDOFF = {"summary": "Benchmark thread on the shared app-server: the parser was refactored, its tests pass.",
           "preserve": ["grammar lives in parse.py", "the changelog entry is still to write"],
           "discard": ["the filler answer"], "nextStep": "Write the changelog entry, then stop.", "resume": False}
KINDS = ("injected", "continuation", "off")


def _on_thread(message: dict[str, Any], method: str, thread_id: str) -> bool:
    return message.get("method") == method and message.get("params", {}).get("threadId") == thread_id


async def _turn(user: PeerClient, thread_id: str, text: str) -> tuple[str, int]:
    """Run one user turn; its id and the index of the first message seen after it started."""
    start = len(user.messages)
    turn = (await user.request("turn/start", {"threadId": thread_id,
                                              "input": [{"type": "text", "text": text}]}))["turn"]
    await user.wait_for(lambda m: _on_thread(m, "turn/completed", thread_id)
                        and m["params"]["turn"]["id"] == turn["id"], start=start, timeout=TIMEOUT_S)
    return turn["id"], start


def _developer_text(body: dict[str, Any] | None, marker: str) -> str | None:
    for item in (body or {}).get("input", []):
        if isinstance(item, dict) and item.get("role") == "developer":
            for part in item.get("content") or []:
                if isinstance(part, dict) and marker in str(part.get("text", "")):
                    return part["text"]
    return None


async def _one_run(socket_path: Path, model: MockModel, env: dict[str, str], kind: str, index: int) -> dict[str, Any]:
    handoff = {**HANDOFF, "resume": kind == "continuation"}
    run_env = {**env, "REKALL_INJECT_HANDOFF": "off" if kind == "off" else "on"}
    with anyio.fail_after(TIMEOUT_S):
        async with peer_client(socket_path, name="bench-terminal") as user:
            thread_id = (await user.request("thread/start", {}))["thread"]["id"]
            model.queue_text(FILLER)
            await _turn(user, thread_id, "Fill it.")
            status = await run_job(thread_id, handoff, run_env)
            if kind == "continuation":
                await user.wait_for(lambda m: _on_thread(m, "turn/completed", thread_id)
                                    and m["params"]["turn"]["id"] == status.get("resumeTurnId"), timeout=TIMEOUT_S)
            before = model.requests[-1].seq
            turn_id, start = await _turn(user, thread_id, "What were we doing?")
            usage = [m["params"]["tokenUsage"] for m in user.messages[start:]
                     if _on_thread(m, "thread/tokenUsage/updated", thread_id) and m["params"].get("turnId") == turn_id]
    (request,) = [r for r in model.requests if r.seq > before and r.kind == "turn"]
    marker = f"[Handoff saved through rekall before a context compaction; job {status['jobId']}"
    received = _developer_text(request.body, marker)
    return {
        "run": index, "kind": kind, "state": status["state"], "handoffDelivery": status.get("handoffDelivery"),
        "injectDelayMs": status.get("injectDelayMs"),
        "continuationOverheadMs": (round(status["resumeDelayMs"] - float(env["REKALL_IDLE_STABLE_MS"]), 1)
                                   if status.get("resumeDelayMs") is not None else None),
        "injectedBytes": status.get("injectedBytes"),
        "receivedBytes": None if received is None else len(received.encode()),
        "copiesInNextRequest": request.text.count(marker),
        "nextRequestInputTokens": usage[-1]["last"]["inputTokens"] if usage else None,
    }


def _median(runs: list[dict[str, Any]], kind: str, key: str) -> float | None:
    values = [r[key] for r in runs if r["kind"] == kind and r.get(key) is not None]
    return statistics.median(values) if values else None


async def measure(binary: Path, runs: int, idle_stable_ms: int) -> dict[str, Any]:
    with MockModel() as model, bench_daemon(binary, model, idle_stable_ms) as (socket_path, env):
        results = [await _one_run(socket_path, model, env, kind, n) for n in range(1, runs + 1) for kind in KINDS]
    inject_ms = _median(results, "injected", "injectDelayMs")
    resume_ms = _median(results, "continuation", "continuationOverheadMs")
    with_tokens = _median(results, "injected", "nextRequestInputTokens")
    without_tokens = _median(results, "off", "nextRequestInputTokens")
    return {
        "codex": subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout.strip(),
        "idleStableMs": idle_stable_ms, "runsPerKind": runs, "runs": results,
        "median": {
            "injectDelayMs": inject_ms,
            "continuationOverheadMs": resume_ms,
            "injectToContinuationRatio": (round(inject_ms / resume_ms, 3)
                                          if inject_ms is not None and resume_ms else None),
            "injectedBytes": _median(results, "injected", "injectedBytes"),
            "receivedBytes": _median(results, "injected", "receivedBytes"),
            "nextRequestInputTokens": with_tokens,
            "nextRequestInputTokensWithoutInjection": without_tokens,
            "handoffTokens": (with_tokens - without_tokens
                              if with_tokens is not None and without_tokens is not None else None),
        },
        "deliveredOnceEveryRun": all(r["copiesInNextRequest"] == (1 if r["kind"] == "injected" else 0)
                                     for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind (default 3)")
    parser.add_argument("--idle-stable-ms", type=int, default=100)
    args = parser.parse_args()
    from tests.codexkit import real_codex

    print(json.dumps(anyio.run(measure, real_codex(), args.runs, args.idle_stable_ms), indent=2))


if __name__ == "__main__":
    main()
