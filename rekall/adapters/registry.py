"""Known protocol adapters. Adding a protocol version means: one module (like
:mod:`rekall.adapters.v11`), its transcripts under ``fixtures/ipc/<name>/``, and one entry
here. See ``docs/adapters.md``."""

from __future__ import annotations

from types import ModuleType

from rekall.adapters import v11

#: Newest first. The session uses the first; the others are kept for reference and replay.
ADAPTERS: tuple[ModuleType, ...] = (v11,)
DEFAULT: ModuleType = ADAPTERS[0]


def adapter_named(name: str) -> ModuleType | None:
    return next((a for a in ADAPTERS if a.NAME == name), None)


def adapter_for_state_version(version: object) -> ModuleType | None:
    """The adapter whose ``thread-stream-state-changed`` has this version, if any."""
    return next((a for a in ADAPTERS if a.STATE_VERSION == version), None)


def known_state_versions() -> tuple[int, ...]:
    return tuple(a.STATE_VERSION for a in ADAPTERS)
