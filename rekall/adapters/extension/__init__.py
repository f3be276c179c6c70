"""The VS Code extension's IPC router as a platform. Protocol adapters: from frames to protocol
messages, and commands back; the session feeds the thread model (:mod:`rekall.thread`) and hands on
its domain events.

Public surface::

    session = await connect_thread(thread_id)        # handshake, follow, first snapshot
    session.mirror.idle, .completed_compaction_ids, .boundary_fingerprint, .tokens, ...
    async for event in session.events(): ...         # rekall.kernel.events domain events
    await session.compact()                          # thread-follower-compact-thread
    turn = await session.start_turn(text, job_id)    # thread-follower-start-turn
    await session.reconnect(); await session.aclose()

Failures are :class:`~rekall.kernel.errors.IpcError` subclasses; failed commands raise
:class:`RequestFailed` with ``delivery`` ``"not_delivered"`` or ``"unknown"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rekall.adapters.extension.first_follow import FirstFollow
    from rekall.adapters.extension.errors import (
        ConnectionLostError,
        HandshakeFailed,
        NoOwner,
        RequestFailed,
        SessionClosed,
        SnapshotTimeout,
        VersionMismatch,
    )
    from rekall.adapters.extension.ipc import ADAPTERS, adapter_named
    from rekall.adapters.contract import Platform
    from rekall.adapters.extension.errors import RESPONSE_MARGIN_S
    from rekall.adapters.extension.session import StartedTurn, ThreadSession, connect_thread
    from rekall.adapters.resume import ResumeToken

#: What the journal records (the registry's name for this platform).
NAME = "extension-ipc"
#: How a message for people names the owner of a thread on this platform.
OWNER = "the extension"


def open_platform(env: Mapping[str, str], resume: ResumeToken | None) -> Platform:
    """The platform, going on from what ``schedule`` settled and the worker's first follow."""
    from rekall.adapters.extension.choice import Settled
    from rekall.adapters.extension.platform import ExtensionIpc

    if resume is None:
        return ExtensionIpc(env)
    return ExtensionIpc(env, settled=Settled.from_json(resume.settled), first_follow=resume.first_follow)


def follow_first(thread_id: str, env: Mapping[str, str], resume: ResumeToken, *,
                 request_timeout_s: float) -> FirstFollow | None:
    """The worker's first follow, on a blocking socket before the event loop
    (:mod:`rekall.adapters.extension.first_follow`)."""
    from rekall.adapters.extension.first_follow import follow_first as follow

    return follow(thread_id, env, at_schedule=resume.settled, request_timeout_s=request_timeout_s)


#: Re-exported on first use, from the module that defines each: the registry lists this package
#: wherever platforms are looked up (``rekall status`` and ``history`` too), and the session needs
#: asyncio, which the worker's first follow is made without (:mod:`rekall.adapters.extension.first_follow`).
_ON_USE = {
    **dict.fromkeys(("ConnectionLostError", "HandshakeFailed", "NoOwner", "RequestFailed", "SessionClosed",
                     "SnapshotTimeout", "VersionMismatch"), "rekall.adapters.extension.errors"),
    **dict.fromkeys(("ADAPTERS", "adapter_named"), "rekall.adapters.extension.ipc"),
    **dict.fromkeys(("RESPONSE_MARGIN_S", "StartedTurn", "ThreadSession", "connect_thread"),
                    "rekall.adapters.extension.session"),
}


def __getattr__(name: str) -> Any:
    if name not in _ON_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_ON_USE[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "ADAPTERS",
    "NAME",
    "OWNER",
    "RESPONSE_MARGIN_S",
    "ConnectionLostError",
    "HandshakeFailed",
    "NoOwner",
    "RequestFailed",
    "SessionClosed",
    "SnapshotTimeout",
    "StartedTurn",
    "ThreadSession",
    "VersionMismatch",
    "adapter_named",
    "connect_thread",
    "follow_first",
    "open_platform",
]
