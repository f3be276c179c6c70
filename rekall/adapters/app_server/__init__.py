"""The shared Codex app-server as a platform (``codex app-server daemon``).

- :mod:`rekall.adapters.app_server.rpc`: the JSON-RPC core (requests, replies, the message stream);
- :mod:`rekall.adapters.app_server.client`: a client of the shared app-server over its control socket;
- :mod:`rekall.adapters.app_server.thread_model`: an app-server thread's facts, from its notifications;
- :mod:`rekall.adapters.app_server.platform`: the platform (follow, observe, act) and its doctor rows;
- :mod:`rekall.adapters.app_server.serving_binary`: who serves the socket, and its schema report.

Submodules are imported on use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rekall.adapters.contract import Platform
    from rekall.adapters.resume import ResumeToken

#: What the journal records (the registry's name for this platform).
NAME = "app-server"
#: How a message for people names the owner of a thread on this platform.
OWNER = "the shared app-server"


def open_platform(env: Mapping[str, str], resume: ResumeToken | None) -> Platform:
    """The platform; it keeps no record at schedule (``thread/resume`` finds the thread again)."""
    from rekall.adapters.app_server.platform import SharedAppServerPlatform

    return SharedAppServerPlatform(env)


__all__ = ["NAME", "OWNER", "open_platform"]
