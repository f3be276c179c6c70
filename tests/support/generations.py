"""A third generation for tests of what the owner's answer can tell apart."""

from __future__ import annotations

from rekall.adapters.extension.generations import COMPACT, G26_9XX
from rekall.adapters.extension.ipc import IpcAdapter

#: With owner discovery like 26.9xx, derived from it by what differs (the trial's 26.1201).
G26_1201 = IpcAdapter(G26_9XX._replace(name="26.1201", base_versions={**G26_9XX.base_versions, COMPACT: 2}))
