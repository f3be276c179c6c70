"""Incremental maintenance of the mirror's derived facts.

:func:`rekall.thread.facts.derive_facts` states the rules by walking the whole state.
:class:`FactIndex` keeps the same facts current from the stream of applied changes
(:class:`~rekall.thread.patches.Change`), with work proportional to each change:

* Top-level fields (runtime status, requests, submissions, telemetry) are re-read when a
  change touches them; they are small.
* Every turn (live, or a history entity) has a :class:`_TurnEntry`, keyed by the
  turn object's identity (the entry keeps the object alive, so the id stays unique). The
  state comes from JSON, so no object appears in it twice; patch values are not copied, so
  callers must not reuse them either. An
  entry knows the turn's relevant items (user messages, compaction items; most items are
  irrelevant and are not stored), its layout problem and, lazily, its boundary fingerprint.
* Aggregates are counters: completed (and running) compaction id → number of items, layout problem →
  number of places. Adding or removing a subtree adds or subtracts its entries, so work is
  proportional to the value the patch carries, not to the thread.
* The latest user-bearing turn is found by scanning from the end (live turns, then the
  history order); that stops at the first user turn, which in practice is the last or the
  one before. Its fingerprint is recomputed only when that turn's header or user messages
  change, so streaming agent output into the current turn costs a few dict look-ups.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

from rekall.thread import facts as f
from rekall.thread.fields import FieldNames, V11
from rekall.thread.patches import MISSING, Change


class _TurnEntry:
    __slots__ = ("turn", "in_history", "problem", "items", "user_messages", "user_list", "fingerprint")

    def __init__(self, turn: Any, in_history: bool) -> None:
        self.turn = turn
        self.in_history = in_history
        self.problem: str | None = None
        self.items: dict[int, tuple[Any, f.ItemFacts]] = {}  # relevant items only
        self.user_messages = 0
        self.user_list: list[str] | None = None  # digests of the user messages in order, lazily
        self.fingerprint: str | None = None  # lazily

    def user_bearing(self, lay: FieldNames) -> bool:
        return self.problem is None and (self.user_messages > 0 or f.has_user_input(self.turn, lay))


class FactIndex:
    def __init__(self, layout: FieldNames = V11) -> None:
        self._lay = layout
        self._relevant_kinds = f.relevant_item_kinds(layout)
        self._runtime_fields = frozenset({layout.runtime_status, layout.requests, layout.submissions})
        self._root: Any = MISSING
        self._turns: dict[int, _TurnEntry] = {}
        self._history_scalars = 0  # history entities that are not objects (each one a problem)
        self._completed: Counter[str] = Counter()
        self._running: Counter[str] = Counter()
        self._problems: Counter[str] = Counter()
        self._static_problems: dict[str, tuple[str, ...]] = {}
        self._runtime = f.runtime_facts(MISSING, layout)
        self._telemetry: tuple[int | None, int | None] = (None, None)
        self._latest: _TurnEntry | None = None
        self._facts = f.EMPTY
        self._dirty_runtime = self._dirty_telemetry = self._dirty_latest = self._dirty_sets = False
        self._completed_ids: frozenset[str] = frozenset()
        self._running_ids: frozenset[str] = frozenset()
        self._problem_text: str | None = None

    # -- the mirror's interface --------------------------------------------------------

    def rebuild(self, root: Any) -> None:
        """Index a whole snapshot (O(state), once)."""
        self._root = root
        self._turns.clear()
        self._completed.clear()
        self._running.clear()
        self._problems.clear()
        self._static_problems.clear()
        self._history_scalars = 0
        for turn in self._live_turns():
            self._add_turn(turn, False)
        self._index_history()
        self._check_turns_container()
        self._dirty_runtime = self._dirty_telemetry = self._dirty_latest = self._dirty_sets = True
        self.settle(root)

    def observe(self, change: Change) -> None:
        """Account for one applied change (called by ``apply_patches``)."""
        path = change.path
        if not path:
            self.rebuild(change.new)
            return
        head, lay = path[0], self._lay
        if head in self._runtime_fields:
            self._dirty_runtime = True
        elif head == lay.token_usage:
            self._dirty_telemetry = True
        elif head == lay.turns:
            self._observe_turns(change)
        elif head == lay.turn_history:
            self._observe_history(change)

    def settle(self, root: Any) -> None:
        """Bring the facts up to date after a batch of changes."""
        self._root = root
        if self._dirty_runtime:
            self._runtime = f.runtime_facts(root, self._lay)
            self._set_static("runtime", self._runtime.problems)
            self._dirty_runtime = False
        if self._dirty_telemetry:
            self._telemetry = f.telemetry(root, self._lay)
            self._dirty_telemetry = False
        if self._dirty_latest:
            self._latest = self._find_latest()
            self._dirty_latest = False
        if self._dirty_sets:
            self._completed_ids = frozenset(k for k, n in self._completed.items() if n > 0)
            self._running_ids = frozenset(k for k, n in self._running.items() if n > 0)
            problems = [k for k, n in self._problems.items() if n > 0]
            for group in self._static_problems.values():
                problems += group
            self._problem_text = f.join_problems(problems)
            self._dirty_sets = False
        self._facts = self._assemble()

    def facts(self) -> f.ThreadFacts:
        return self._facts

    # -- assembling ------------------------------------------------------------------

    def _assemble(self) -> f.ThreadFacts:
        runtime = self._runtime
        if not isinstance(self._root, dict):
            return f.ThreadFacts(layout_problem=f.join_problems(runtime.problems))
        fingerprint, interrupted, turn_running, latest_id = f.NO_USER_INPUT, False, False, None
        latest, lay = self._latest, self._lay
        if latest is not None:
            if latest.fingerprint is None:
                if latest.user_list is None:
                    latest.user_list = [f.message_digest(m, lay) for m in f.user_messages(latest.turn, lay)]
                latest.fingerprint = f.fingerprint_of(latest.turn, latest.user_list, lay)
            fingerprint, interrupted = latest.fingerprint, f.stopped(latest.turn, lay)
            turn_running = f.running(latest.turn, lay)
            latest_id = f.turn_identity(latest.turn, lay)
        tokens, window = self._telemetry
        return f.ThreadFacts(
            runtime_status=runtime.runtime_status,
            busy_reason=runtime.busy_reason,
            pending_requests=runtime.pending_requests,
            unconfirmed_submissions=runtime.unconfirmed_submissions,
            completed_compaction_ids=self._completed_ids,
            running_compaction_ids=self._running_ids,
            boundary_fingerprint=fingerprint,
            interrupted=interrupted,
            user_turn_running=turn_running,
            latest_user_turn_id=latest_id,
            tokens=tokens,
            window=window,
            layout_problem=self._problem_text,
        )

    def _find_latest(self) -> _TurnEntry | None:
        lay = self._lay
        for turn in reversed(self._live_turns()):
            entry = self._turns.get(id(turn))
            if entry is not None and entry.user_bearing(lay):
                return entry
        inner, _ = f.history_container(self._root, lay)
        entities = inner.get(lay.entities) if inner is not None else None
        islands = inner.get(lay.islands) if inner is not None else None
        if not isinstance(entities, dict) or not isinstance(islands, list):
            return None
        for island in reversed(islands):
            entries = island.get(lay.island_entries) if isinstance(island, dict) else None
            for ref in reversed(entries) if isinstance(entries, list) else ():
                key = ref.get(lay.entry_key) if isinstance(ref, dict) else None
                if isinstance(key, str) and key in entities:
                    entry = self._turns.get(id(entities[key]))
                    if entry is not None and entry.user_bearing(lay):
                        return entry
        return None

    # -- static (top-level) problems ----------------------------------------------------

    def _set_static(self, group: str, problems: tuple[str, ...]) -> None:
        if self._static_problems.get(group, ()) != problems:
            self._static_problems[group] = problems
            self._dirty_sets = True

    def _check_turns_container(self) -> None:
        root = self._root
        broken = isinstance(root, dict) and not isinstance(root.get(self._lay.turns), list)
        self._set_static("turns", (f.problems_of(self._lay).turns_not_array,) if broken else ())

    # -- turns and items ---------------------------------------------------------------

    def _live_turns(self) -> list[Any]:
        turns = self._root.get(self._lay.turns) if isinstance(self._root, dict) else None
        return turns if isinstance(turns, list) else []

    def _count(self, counter: Counter[str], key: str | None, delta: int) -> None:
        if key is not None:
            counter[key] += delta
            self._dirty_sets = True

    def _add_item(self, entry: _TurnEntry, item: Any, *, appended: bool = False) -> None:
        facts = f.item_facts(item, in_history=entry.in_history, lay=self._lay)
        if facts is f.NOT_RELEVANT:
            return
        entry.items[id(item)] = (item, facts)
        self._count(self._completed, facts.completed_id, 1)
        self._count(self._running, facts.running_id, 1)
        self._count(self._problems, facts.problem, 1)
        if facts.is_user_message:
            entry.user_messages += 1
            entry.fingerprint = None
            if appended and entry.user_list is not None:  # steering appends: extend the list
                entry.user_list.append(f.message_digest(item, self._lay))
            else:
                entry.user_list = None

    def _remove_item(self, entry: _TurnEntry, item: Any) -> None:
        found = entry.items.pop(id(item), None)
        if found is None:
            return
        facts = found[1]
        self._count(self._completed, facts.completed_id, -1)
        self._count(self._running, facts.running_id, -1)
        self._count(self._problems, facts.problem, -1)
        if facts.is_user_message:
            entry.user_messages -= 1
            entry.fingerprint = None
            entry.user_list = None

    def _add_turn(self, turn: Any, in_history: bool) -> None:
        self._dirty_latest = True
        if not isinstance(turn, dict):  # not indexed by identity: equal scalars may be one object
            self._count(self._problems, f.TURN_NOT_OBJECT, 1)
            self._history_scalars += in_history
            return
        entry = _TurnEntry(turn, in_history)
        self._turns[id(turn)] = entry
        self._index_items(entry)
        self._dirty_latest = True

    def _index_items(self, entry: _TurnEntry) -> None:
        entry.problem = f.turn_problem(entry.turn, self._lay)
        self._count(self._problems, entry.problem, 1)
        lay, kinds = self._lay, self._relevant_kinds
        for item in f.turn_items(entry.turn, lay) or []:
            if isinstance(item, dict) and item.get(lay.item_type) not in kinds:
                continue  # most items (a snapshot's load visits every one): not relevant, no call
            self._add_item(entry, item)
        entry.fingerprint = None
        entry.user_list = None

    def _unindex_items(self, entry: _TurnEntry) -> None:
        for item, _ in list(entry.items.values()):
            self._remove_item(entry, item)
        self._count(self._problems, entry.problem, -1)
        entry.problem = None
        entry.fingerprint = None
        entry.user_list = None

    def _remove_turn(self, turn: Any, in_history: bool) -> None:
        if not isinstance(turn, dict):
            self._count(self._problems, f.TURN_NOT_OBJECT, -1)
            self._history_scalars -= in_history
            self._dirty_latest = True
            return
        entry = self._turns.pop(id(turn), None)
        if entry is not None:
            self._unindex_items(entry)
            self._dirty_latest = True

    def _replace_value(self, change: Change, in_history: bool) -> None:
        """A whole turn was added, replaced or removed."""
        if change.old is not MISSING:
            self._remove_turn(change.old, in_history)
        if change.new is not MISSING:
            self._add_turn(change.new, in_history)

    def _observe_turns(self, change: Change) -> None:
        path = change.path
        if len(path) == 1:  # the whole array
            for turn in change.old if isinstance(change.old, list) else []:
                self._remove_turn(turn, False)
            for turn in change.new if isinstance(change.new, list) else []:
                self._add_turn(turn, False)
            self._check_turns_container()
            self._dirty_latest = True
            return
        turns = self._root.get(self._lay.turns) if isinstance(self._root, dict) else None
        if not isinstance(turns, list):
            return  # no live turns are indexed while `turns` is not an array
        if len(path) == 2:
            self._replace_value(change, False)
            return
        self._observe_in_turn(turns[cast(int, path[1])], path[2:], change)  # an index: normalised by patches

    def _observe_in_turn(self, turn: Any, rest: tuple[Any, ...], change: Change) -> None:
        """A change inside one turn; ``rest`` is the path relative to the turn."""
        entry = self._turns.get(id(turn))
        if entry is None or not isinstance(turn, dict):
            return
        if rest[0] == self._lay.turn_status:
            return  # `interrupted` and `user_turn_running` are read from the turn on every settle
        self._dirty_latest = True  # user-bearing-ness may have changed
        if rest[0] != self._lay.items:
            entry.fingerprint = None  # header: id, input
            return
        if len(rest) == 1:  # the items array itself
            self._unindex_items(entry)
            self._index_items(entry)
            return
        items = turn.get(self._lay.items)
        if not isinstance(items, list) or entry.problem is not None:
            return
        if len(rest) == 2:  # one item added, replaced or removed
            if change.old is not MISSING:
                self._remove_item(entry, change.old)
            if change.new is not MISSING:
                self._add_item(entry, change.new, appended=change.inserted and rest[1] == len(items) - 1)
            return
        item = items[rest[1]]  # a change inside one item: re-read its few relevant fields
        self._remove_item(entry, item)
        self._add_item(entry, item)

    # -- history (read by its structure, whatever its kind) ------------------------------

    def _index_history(self) -> None:
        inner, problems = f.history_container(self._root, self._lay)
        self._set_static("history", tuple(problems))
        entities = inner.get(self._lay.entities) if inner is not None else None
        if isinstance(entities, dict):
            for entity in entities.values():
                self._add_turn(entity, True)
        self._dirty_latest = True

    def _drop_history(self) -> None:
        for key in [k for k, e in self._turns.items() if e.in_history]:
            entry = self._turns.pop(key)
            self._unindex_items(entry)
        self._count(self._problems, f.TURN_NOT_OBJECT, -self._history_scalars)
        self._history_scalars = 0
        self._dirty_latest = True

    def _entities(self) -> dict[str, Any] | None:
        inner, _ = f.history_container(self._root, self._lay)
        entities = inner.get(self._lay.entities) if inner is not None else None
        return entities if isinstance(entities, dict) else None

    def _observe_history(self, change: Change) -> None:
        path, lay = change.path, self._lay
        self._dirty_latest = True
        is_entities = len(path) >= 3 and path[1] == lay.history and path[2] == lay.entities
        if len(path) <= 2 or (len(path) == 3 and is_entities):  # the container: re-index history
            self._drop_history()
            self._index_history()
            return
        if len(path) == 3 and path[1] == lay.history and path[2] == lay.islands:
            self._set_static("history", tuple(f.history_container(self._root, lay)[1]))
            return
        entities = self._entities() if is_entities else None
        if entities is None:
            return  # islands entries (order only) or fields we do not read
        if len(path) == 4:
            self._replace_value(change, True)
            return
        self._observe_in_turn(entities[cast(str, path[3])], path[4:], change)  # an object key
