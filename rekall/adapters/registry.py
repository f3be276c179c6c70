"""Known protocol adapters. Adding a protocol version means: one module (like
:mod:`rekall.adapters.v11`), its transcripts under ``fixtures/ipc/<name>/``, and one entry
here. See ``docs/adapters.md``."""

from __future__ import annotations

from rekall.adapters import v11
from rekall.adapters.contract import Adapter

#: Newest first. The session uses the first; the others are kept for reference and replay.
#: mypy checks each module against :class:`~rekall.adapters.contract.Adapter` here.
ADAPTERS: tuple[Adapter, ...] = (v11,)
DEFAULT: Adapter = ADAPTERS[0]


def adapter_named(name: str) -> Adapter | None:
    return next((a for a in ADAPTERS if a.NAME == name), None)


def adapter_for_state_version(version: object) -> Adapter | None:
    """The adapter whose ``thread-stream-state-changed`` has this version, if any."""
    return next((a for a in ADAPTERS if a.STATE_VERSION == version), None)


def known_state_versions() -> tuple[int, ...]:
    return tuple(a.STATE_VERSION for a in ADAPTERS)
