"""A fake shared app-server for fault tests: a local ``websockets`` server on a private Unix socket."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection, unix_serve

from rekall.adapters.app_server.releases import NEWEST

Behaviour = Callable[[ServerConnection, dict], Awaitable[None]]


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rksf", dir="/tmp"))
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


#: The version the fake states by default: the newest release rekall supports.
FAKE_VERSION = NEWEST


@asynccontextmanager
async def fake_app_server(path: Path, after_initialize: Behaviour | None = None, *,
                          version: str = FAKE_VERSION, methods: list[str] | None = None) -> AsyncIterator[None]:
    """Answers ``initialize`` like the daemon (stating ``version``), then hands each later request
    to ``after_initialize``. ``methods`` collects the method of every message received, in order."""

    async def serve(ws: ServerConnection) -> None:
        async for raw in ws:
            message = json.loads(raw)
            if methods is not None and "method" in message:
                methods.append(message["method"])
            if message.get("method") == "initialize":
                await ws.send(json.dumps({"id": message["id"], "result": {"userAgent": f"fake/{version} (test)"}}))
            elif "id" in message and after_initialize is not None:
                await after_initialize(ws, message)

    async with unix_serve(serve, str(path), max_size=None):
        os.chmod(path, 0o600)
        yield


def env_for(path: Path) -> dict[str, str]:
    return {"REKALL_APP_SERVER_SOCKET": str(path)}
