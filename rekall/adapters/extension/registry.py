"""The known protocol generations, each spoken by the shared adapter.

Adding a generation means one record in :mod:`rekall.adapters.extension.generations` and its
transcripts under ``fixtures/ipc/<name>/``. See ``docs/adapters.md``. Which adapter a
connection uses is chosen from evidence (:mod:`rekall.adapters.extension.choice`), never from order.
"""

from __future__ import annotations

from rekall.adapters.extension.contract import Adapter
from rekall.adapters.extension.generations import GENERATIONS
from rekall.adapters.extension.ipc import IpcAdapter

#: mypy checks the shared adapter against :class:`~rekall.adapters.extension.contract.Adapter` here.
ADAPTERS: tuple[Adapter, ...] = tuple(IpcAdapter(g) for g in GENERATIONS)


def adapter_named(name: str) -> Adapter | None:
    return next((a for a in ADAPTERS if a.NAME == name), None)
