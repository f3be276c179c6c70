"""The thread model: what a conversation thread *is*, apart from any protocol.

Sans-I/O. An adapter's session hands it the owner's state (a snapshot, then patches);
it keeps the state, derives the facts the worker needs and returns domain events for
the facts that changed::

    mirror = ThreadMirror(layout)                    # layout: the field names it reads
    events = mirror.load_snapshot(state, revision)
    events = mirror.apply_patches(patches, base_revision=r, revision=r + 1)
    mirror.facts.idle, .boundary_fingerprint, .completed_compaction_ids, ...

Modules: :mod:`~rekall.thread.fields` (the field names), :mod:`~rekall.thread.facts` (the
rules, stated once), :mod:`~rekall.thread.index` (the same facts kept incrementally),
:mod:`~rekall.thread.patches` (applying patches in place), :mod:`~rekall.thread.mirror`
(the three together, and the domain events).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from rekall.thread.fields import FieldNames, V11

if TYPE_CHECKING:
    from rekall.thread.facts import ThreadFacts, derive_facts
    from rekall.thread.mirror import RevisionGap, ThreadMirror
    from rekall.thread.patches import PatchError, apply_patches

#: Loaded on first use: a generation's record needs only the layout, and the worker's first
#: follow is made before the rest of the model is imported (:mod:`rekall.adapters.extension.first_follow`).
_ON_USE = {"ThreadFacts": "facts", "derive_facts": "facts", "RevisionGap": "mirror", "ThreadMirror": "mirror",
           "PatchError": "patches", "apply_patches": "patches"}


def __getattr__(name: str) -> Any:
    if name not in _ON_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_ON_USE[name]}"), name)
    globals()[name] = value
    return value

__all__ = [
    "V11",
    "FieldNames",
    "PatchError",
    "RevisionGap",
    "ThreadFacts",
    "ThreadMirror",
    "apply_patches",
    "derive_facts",
]
