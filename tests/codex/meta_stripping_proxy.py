"""Test-only: ``rekall mcp`` behind a proxy that strips ``_meta`` from every request Codex sends it.

What a Codex release that stops naming the caller would send (openai/codex PR #31328): the tool
calls reach rekall without ``_meta``. Everything else passes through unchanged, line for line, both
ways; when Codex closes the proxy's stdin, rekall's is closed and the proxy exits with its status.

    python tests/codex/meta_stripping_proxy.py   (as an [mcp_servers.rekall] command)
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import IO


def stripped(line: bytes) -> bytes:
    try:
        message = json.loads(line)
    except ValueError:
        return line
    if isinstance(message, dict) and "method" in message and isinstance(message.get("params"), dict) \
            and "_meta" in message["params"]:
        del message["params"]["_meta"]
        return json.dumps(message).encode() + b"\n"
    return line


def pump(source: IO[bytes], sink: IO[bytes], *, strip: bool) -> None:
    for line in iter(source.readline, b""):
        sink.write(stripped(line) if strip else line)
        sink.flush()


def main() -> int:
    server = subprocess.Popen([sys.executable, "-m", "rekall", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    replies = threading.Thread(target=pump, args=(server.stdout, sys.stdout.buffer),
                               kwargs={"strip": False}, daemon=True)
    replies.start()
    pump(sys.stdin.buffer, server.stdin, strip=True)
    server.stdin.close()
    code = server.wait()
    replies.join(timeout=10)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
