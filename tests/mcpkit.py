"""Driving rekall end to end: the real ``rekall mcp`` over stdio (official mcp client), the
detached worker it spawns, and the simulated owner on a real Unix socket.

The worker is another process, so the test cannot await its transitions directly; it
watches the status through the MCP tool, with every wait bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from rekall.states import TERMINAL_STATES
from tests.support.codex_opening import codex_meta

TERMINAL = {state.value for state in TERMINAL_STATES}
WAIT_S = 20.0
POLL_S = 0.03

HANDOFF = {
    "summary": "Parser refactor; tests green; changelog outstanding.",
    "preserve": ["grammar lives in parse.py"],
    "discard": ["old benchmark logs"],
    "nextStep": "Write the changelog entry, run the parser tests, then stop.",
    "resume": True,
}


def job_env(sim_env: Mapping[str, str], jobs_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REKALL_", "CONTEXT_COMPACT_", "CODEX_"))}
    env.update(sim_env)
    env.update({"REKALL_JOBS_DIR": str(jobs_dir), "REKALL_IDLE_STABLE_MS": "60", "CODEX_HOME": str(jobs_dir.parent)})
    env.update(extra)
    return env


class Rekall:
    """An MCP client session with ``rekall mcp`` plus helpers for one thread."""

    def __init__(self, client: Client, thread_id: str) -> None:
        self.client = client
        self.thread_id = thread_id

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self._call(tool, arguments)
        if result.is_error:
            raise AssertionError(f"{tool} failed: {result.content[0].text}")
        content = result.structured_content or json.loads(result.content[0].text)
        # Every field of a status rekall derived is one the JobStatus record (and so the schema) describes.
        assert "fieldsNotShown" not in content, content
        return content

    async def call_error(self, tool: str, **arguments: Any) -> str:
        result = await self._call(tool, arguments)
        assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
        return result.content[0].text

    async def _call(self, tool: str, arguments: Mapping[str, Any]) -> Any:
        """As Codex calls a tool: from this thread, which its ``_meta`` names (``rekall.kernel.caller``)."""
        return await self.client.call_tool(tool, {"threadId": self.thread_id, **arguments},
                                           meta=codex_meta(self.thread_id))  # type: ignore[arg-type]

    async def schedule(self, handoff: Mapping[str, Any] | None = None) -> dict[str, Any]:
        arguments = {} if handoff is None else {"handoff": dict(handoff)}
        return await self.call("schedule_compaction", **arguments)

    async def status(self) -> dict[str, Any]:
        return await self.call("compaction_status")

    async def wait_for(self, states: Iterable[str], timeout: float = WAIT_S) -> dict[str, Any]:
        wanted = set(states)
        status: dict[str, Any] = {}
        with anyio.fail_after(timeout):
            while True:
                status = await self.status()
                if status["state"] in wanted:
                    return status
                if status["state"] in TERMINAL:
                    raise AssertionError(f"ended {status['state']} while waiting for {wanted}: {status}")
                await anyio.sleep(POLL_S)

    async def wait_terminal(self, timeout: float = WAIT_S) -> dict[str, Any]:
        return await self.wait_for(TERMINAL, timeout)


@contextlib.asynccontextmanager
async def rekall_mcp(env: Mapping[str, str], thread_id: str) -> AsyncIterator[Rekall]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "rekall", "mcp"], env=dict(env))
    async with Client(params) as client:
        yield Rekall(client, thread_id)


async def wait_for_note(jobs_dir: Path, job_id: str, kind: str, timeout: float = WAIT_S) -> list[str]:
    """Wait until the worker journaled a note of ``kind`` (e.g. ``connected``: it holds its first
    snapshot); returns the kinds journaled so far."""
    from rekall.surfaces.explain import build_explanation
    from rekall.store import JobStore

    store = JobStore.open({"REKALL_JOBS_DIR": str(jobs_dir)})
    with anyio.fail_after(timeout):
        while True:
            explanation = build_explanation(store, job_id)
            kinds = [note["kind"] for note in explanation["notes"]]
            if kind in kinds:
                return kinds
            if explanation["terminal"]:
                raise AssertionError(f"ended {explanation['state']} before the note {kind!r}: {explanation['outcome']}")
            await anyio.sleep(POLL_S)


async def wait_for_worker_exit(pid: int, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            await anyio.sleep(POLL_S)


