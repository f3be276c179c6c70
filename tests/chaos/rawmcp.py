"""A raw line-level client for a real ``rekall mcp`` process, for sending what no SDK would.

Replies are read on a thread into a queue, so every wait is bounded; stderr is collected so
that a traceback the server logs is visible to the test.
"""

from __future__ import annotations

import itertools
import json
import queue
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REPLY_S = 30.0


class RawMcp:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "rekall", "mcp"], cwd=ROOT, env=dict(env),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._stderr: list[bytes] = []
        self._early: dict[Any, dict[str, Any]] = {}
        #: Error replies without an id (to lines the server could not read as a request).
        self.anonymous_errors: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        threading.Thread(target=self._pump, args=(self.process.stdout, self._lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.process.stderr, self._stderr.append), daemon=True).start()
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "chaos", "version": "0"}})
        self.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})

    @staticmethod
    def _pump(stream: Any, put: Any) -> None:
        for line in iter(stream.readline, b""):
            put(line)
        put(b"")  # EOF

    @property
    def stderr(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    def next_id(self) -> str:
        return f"req-{next(self._ids)}"  # strings, so a number inside fuzzed input never collides

    def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send_json(self, message: Any) -> None:
        self.send_raw(json.dumps(message).encode("utf-8") + b"\n")

    def reply(self, request_id: Any, timeout: float = REPLY_S) -> dict[str, Any]:
        """The reply to ``request_id`` (AssertionError if the server dies or stays silent)."""
        while request_id not in self._early:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no reply to request {request_id!r} within {timeout:g} s") from None
            if not line:
                raise AssertionError(f"the server closed stdout; stderr: {self.stderr[-3000:]}")
            message = json.loads(line)
            if isinstance(message, dict) and isinstance(message.get("id"), (str, int)):
                self._early[message["id"]] = message
            elif isinstance(message, dict) and message.get("id") is None and "error" in message:
                self.anonymous_errors.append(message)
        return self._early.pop(request_id)

    def request(self, method: str, params: Any = None) -> dict[str, Any]:
        request_id = self.next_id()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send_json(message)
        return self.reply(request_id)

    def call_tool(self, name: str, arguments: Any) -> dict[str, Any]:
        """As Codex calls it: from the thread the arguments name, when they name one (``rekall.kernel.caller``)."""
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if isinstance(arguments, dict) and isinstance(arguments.get("threadId"), str):
            params["_meta"] = {"threadId": arguments["threadId"]}
        return self.request("tools/call", params)

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            return self.process.wait(timeout=30)
        finally:
            self.process.kill()
