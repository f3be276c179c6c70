"""How much of the task's frontier survives Codex's own compactions, with and without a checkpoint.

Real Codex (the pinned release, ``REKALL_TEST_CODEX`` or the scripts/install-codex cache) runs as
the shared app-server daemon with the loopback mock model, the plugin installed and its
``SessionStart(compact)`` hook trusted as a user trusts it. Two threads run the same script; in
one the agent saves a checkpoint, in the other it does not:

1. the user asks to plan the task; the agent's answer (only the agent's message) states N facts:
   constraints, decisions and the next step;
2. with a checkpoint: ``save_checkpoint`` (what the MCP tool runs) saves those facts;
3. a long answer passes the thread's ``model_auto_compact_token_limit``, so Codex compacts by
   itself before the next turn (its auto-compaction);
4. then the user's ``/compact`` (``thread/compact/start``) and one more turn.

Reported, per thread: how many of the N facts the first model request after each compaction
holds; the bytes the hook injected (its claim's ``contextBytes``) and tokens (bytes / 4, as
Codex's hook budget counts them); and the hook's own time as Codex reports it (``hook/completed``
``durationMs``). The mock model's compaction summary keeps nothing of the conversation, so the
"without" figure is the mechanical floor (what Codex's replacement history carries by itself,
the user's messages), not what a real model's summary would keep.

    python bench/frontier.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rekall.store.checkpoint import deliveries  # noqa: E402
from rekall.usecases.checkpoint import save_checkpoint  # noqa: E402
from tests.codex.daemonkit import PeerClient, peer_client, start_daemon, stop_daemon  # noqa: E402
from tests.codex.test_app_server_delivery import compaction_turn_ended  # noqa: E402
from tests.codex.test_app_server_job import FILLER, on_thread, run_turn  # noqa: E402
from tests.codex.test_registration import install_plugin  # noqa: E402
from tests.codex.test_session_hook_codex import REKALL_COMMAND, next_turn_request, trust_hook  # noqa: E402
from tests.codexkit import real_codex  # noqa: E402
from tests.support.codex_home import make_isolated_home  # noqa: E402
from tests.support.mock_model import MockModel  # noqa: E402

#: The facts, each with a marker no other text holds: (kind, fact).
FACTS = [
    ("constraint", "F1: never edit the generated files under vendor/"),
    ("constraint", "F2: the public API of parser.py stays exactly as it is"),
    ("constraint", "F3: no new dependencies, the user said so twice"),
    ("decision", "F4: port lexer.rs before ast.rs, because the AST depends on its tokens"),
    ("decision", "F5: keep Python's error messages word for word in the Rust port"),
    ("next step", "F6: next, port lexer.rs and run cargo test -p lexer, then stop and report"),
]
AUTO_COMPACT_LIMIT = 20_000
MOCK_SUMMARY_NOTE = ("The mock model's compaction summary keeps nothing of the conversation, so the figure "
                     "without a checkpoint is the mechanical floor, not a real model's.")


def facts_in(text: str) -> int:
    return sum(fact.split(":")[0] + ":" in text for _, fact in FACTS)


def checkpoint_of_facts() -> dict[str, Any]:
    return {"summary": "Port the Python parser to Rust, module by module.",
            "preserve": [fact for kind, fact in FACTS if kind != "next step"], "discard": [],
            "nextStep": next(fact for kind, fact in FACTS if kind == "next step")}


async def one_thread(user: PeerClient, model: MockModel, env: dict[str, str], jobs: Path,
                     with_checkpoint: bool) -> dict[str, Any]:
    thread_id = (await user.request("thread/start", {"approvalPolicy": "never", "config": {
        "model_auto_compact_token_limit": AUTO_COMPACT_LIMIT}}))["thread"]["id"]
    model.queue_text("Agreed. " + " ".join(fact + "." for _, fact in FACTS))
    await run_turn(user, thread_id, "Let's agree how we port the parser.")
    if with_checkpoint:
        saved = await save_checkpoint(thread_id, checkpoint_of_facts(), env=env)
        assert saved["hookCanDeliver"], saved
    start = len(user.messages)
    model.queue_text(FILLER)
    await run_turn(user, thread_id, "Tell me everything about the parser.")
    before_auto = model.requests[-1].seq
    await run_turn(user, thread_id, "Where are we?")
    seen = user.messages[start:]
    assert any(on_thread("item/completed", thread_id)(m) and m["params"]["item"]["type"] == "contextCompaction"
               for m in seen), "Codex did not compact by itself"
    begin = len(user.messages)
    await user.request("thread/compact/start", {"threadId": thread_id})
    await compaction_turn_ended(user, thread_id, begin)
    before_compact = model.requests[-1].seq
    await run_turn(user, thread_id, "And now?")
    seen = user.messages[start:]
    runs = [m["params"]["run"] for m in seen if on_thread("hook/completed", thread_id)(m)]
    claims = deliveries(jobs, thread_id)
    injected = [claim.get("contextBytes") or 0 for claim in claims]
    return {"factsAfterAutoCompaction": facts_in(next_turn_request(model, before_auto).text),
            "factsAfterCompact": facts_in(next_turn_request(model, before_compact).text),
            "deliveries": len(claims), "injectedBytes": injected,
            "injectedTokensApprox": [round(size / 4) for size in injected],
            "hookMs": [run.get("durationMs") for run in runs]}


async def measure(codex: Path, root: Path) -> dict[str, Any]:
    with MockModel() as model:
        home = make_isolated_home(root / "h", model.base_url, approval_policy="never")
        await anyio.to_thread.run_sync(install_plugin, codex, home)
        await trust_hook(codex, home)
        os.environ["PATH"] = f"{REKALL_COMMAND.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        for name in ("REKALL_JOBS_DIR", "CONTEXT_COMPACT_JOBS_DIR"):
            os.environ.pop(name, None)
        env = {**os.environ, "CODEX_HOME": str(home)}
        jobs = home / "tools" / "rekall" / "jobs"
        daemon = start_daemon(codex, home)
        try:
            async with peer_client(daemon.socket_path) as user:
                with_checkpoint = await one_thread(user, model, env, jobs, True)
                without = await one_thread(user, model, env, jobs, False)
        finally:
            stop_daemon(daemon)
    return {"facts": len(FACTS), "codex": str(codex), "autoCompactTokenLimit": AUTO_COMPACT_LIMIT,
            "withCheckpoint": with_checkpoint, "withoutCheckpoint": without, "note": MOCK_SUMMARY_NOTE}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rk-frontier-", dir="/tmp") as root:  # short: socket paths
        result = anyio.run(measure, real_codex(), Path(root))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    n = result["facts"]
    for label, key in (("with a checkpoint", "withCheckpoint"), ("without", "withoutCheckpoint")):
        row = result[key]
        print(f"{label}: {row['factsAfterAutoCompaction']}/{n} facts after Codex's auto-compaction, "
              f"{row['factsAfterCompact']}/{n} after /compact; injected {row['injectedBytes']} bytes "
              f"(~{row['injectedTokensApprox']} tokens); hook {row['hookMs']} ms")
    print(result["note"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
