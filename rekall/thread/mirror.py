"""ThreadMirror: the owner's conversation state, kept in place, with derived facts.

The mirror holds the state exactly as the owner describes it (a snapshot, then patches
applied in place; see :mod:`rekall.thread.patches`) and the facts the worker needs
(:class:`~rekall.thread.facts.ThreadFacts`). Each accepted change returns the domain
events for the facts that changed, in this order: layout, user boundary, user turn running,
telemetry, completed compactions, idle/busy.

Ordering: a ``patches`` change applies only on top of the revision it was made for
(``baseRevision``) and both revisions must be integers; otherwise :class:`RevisionGap`
is raised and the state is left as it was, for the session to resync.
"""

from __future__ import annotations

from typing import Any

from rekall.kernel import events as ev
from rekall.kernel.records import EMPTY, ThreadFacts
from rekall.thread.index import FactIndex
from rekall.thread.fields import FieldNames, V11
from rekall.thread.patches import MISSING, apply_patches
from rekall.kernel.errors import IpcError


class RevisionGap(IpcError):
    """A patch was made for another revision than the one we hold."""

    code = "revision_gap"


def _is_revision(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def diff_events(old: ThreadFacts, new: ThreadFacts, revision: int | None) -> list[ev.DomainEvent]:
    out: list[ev.DomainEvent] = []
    if new.layout_problem is not None and new.layout_problem != old.layout_problem:
        out.append(ev.LayoutIncompatible(new.layout_problem, revision))
    if (new.boundary_fingerprint, new.interrupted) != (old.boundary_fingerprint, old.interrupted):
        out.append(ev.UserBoundaryChanged(new.boundary_fingerprint, new.interrupted, revision))
    if new.user_turn_running != old.user_turn_running:
        out.append(ev.UserTurnRunning(new.user_turn_running, revision))
    if new.goal != old.goal:
        out.append(ev.GoalChanged(new.goal, revision))
    if (new.tokens, new.window) != (old.tokens, old.window):
        out.append(ev.Telemetry(new.tokens, new.window, revision))
    for compaction_id in sorted(new.completed_compaction_ids - old.completed_compaction_ids):
        out.append(ev.CompactionCompleted(compaction_id, revision))
    if new.busy_reason != old.busy_reason:
        out.append(ev.ThreadIdle(revision) if new.idle else ev.ThreadBusy(new.busy_reason or "", revision))
    return out


class ThreadMirror:
    """One thread's state and facts. Read the facts through the properties.

    ``layout`` names the fields the rules read (the protocol adapter's ``LAYOUT``)."""

    def __init__(self, layout: FieldNames = V11) -> None:
        self.layout = layout
        self._state: Any = MISSING
        self._index = FactIndex(layout)
        self._facts: ThreadFacts = EMPTY
        self.revision: int | None = None
        self.snapshots = 0
        self.patches_applied = 0

    # -- reading ---------------------------------------------------------------------

    @property
    def has_state(self) -> bool:
        return self._state is not MISSING

    @property
    def state(self) -> Any:
        """The live state object (read it, never change it); ``None`` before a snapshot."""
        return None if self._state is MISSING else self._state

    @property
    def facts(self) -> ThreadFacts:
        return self._facts

    idle = property(lambda self: self._facts.idle)
    busy_reason = property(lambda self: self._facts.busy_reason)
    runtime_status = property(lambda self: self._facts.runtime_status)
    pending_requests = property(lambda self: self._facts.pending_requests)
    unconfirmed_submissions = property(lambda self: self._facts.unconfirmed_submissions)
    completed_compaction_ids = property(lambda self: self._facts.completed_compaction_ids)
    running_compaction_ids = property(lambda self: self._facts.running_compaction_ids)
    boundary_fingerprint = property(lambda self: self._facts.boundary_fingerprint)
    interrupted = property(lambda self: self._facts.interrupted)
    user_turn_running = property(lambda self: self._facts.user_turn_running)
    latest_user_turn_id = property(lambda self: self._facts.latest_user_turn_id)
    tokens = property(lambda self: self._facts.tokens)
    window = property(lambda self: self._facts.window)
    layout_problem = property(lambda self: self._facts.layout_problem)

    # -- changing --------------------------------------------------------------------

    def load_snapshot(self, state: Any, revision: Any) -> list[ev.DomainEvent]:
        """Replace everything with a full snapshot; returns events for what changed."""
        self._state = state
        self._index.rebuild(state)
        self.revision = revision if _is_revision(revision) else None
        self.snapshots += 1
        return self._publish()

    def apply_patches(self, patches: Any, *, base_revision: Any, revision: Any) -> list[ev.DomainEvent]:
        """Apply one ``patches`` change. Raises :class:`RevisionGap` or
        :class:`~rekall.thread.patches.PatchError`, leaving the mirror unchanged."""
        if not self.has_state:
            raise RevisionGap("patches arrived before any snapshot", hint="the session asks for a snapshot")
        if not (_is_revision(base_revision) and _is_revision(revision)):
            raise RevisionGap(f"patches without integer revisions (baseRevision={base_revision!r}, "
                              f"revision={revision!r})", hint="the session asks for a snapshot")
        if base_revision != self.revision:
            raise RevisionGap(f"patches for revision {base_revision} but the mirror holds {self.revision}",
                              hint="the session asks for a snapshot")
        self._state = apply_patches(self._state, patches, self._index.observe)
        self._index.settle(self._state)
        self.revision = revision
        self.patches_applied += len(patches)
        return self._publish()

    def forget(self) -> None:
        """Drop the state (the facts stay readable until the next snapshot)."""
        self._state = MISSING
        self.revision = None

    def _publish(self) -> list[ev.DomainEvent]:
        old, self._facts = self._facts, self._index.facts()
        return diff_events(old, self._facts, self.revision)
