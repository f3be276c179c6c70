"""Conversation-state patches: apply in place, all or nothing.

The owner sends ``{op, path, value}`` patches (``op`` is ``add``, ``replace`` or
``remove``; ``path`` is an array of keys). The rules, from the extension's behaviour:

* An empty path replaces the whole state (``remove`` leaves no state).
* Every key before the last must exist: an object key, or an in-range array index.
* On an array, the last key is an index: ``-`` means append (``add`` only), a number
  must be an integer, a string must be canonical decimal (``0`` or no leading zero).
  ``add`` may target ``0..len`` and inserts; ``replace`` and ``remove`` need
  ``0..len-1``.
* On an object, ``replace`` and ``remove`` need the key to exist; ``add`` assigns.
* ``__proto__``, ``prototype`` and ``constructor`` are refused as keys (as in the Node
  client; harmless in Python, but a peer sending them is not the extension).

A batch is atomic: if patch *k* is inapplicable, patches *0..k-1* are undone in reverse
and :class:`PatchError` is raised, so the state is exactly what it was. Every applied
step (and every undo step) is reported as a :class:`Change` to an optional observer;
that is what lets the mirror keep its derived facts up to date with work proportional
to the patch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rekall.kernel.errors import IpcError

OPS = ("add", "replace", "remove")
_FORBIDDEN_KEYS = frozenset({"__proto__", "prototype", "constructor"})
_CANONICAL_INDEX = re.compile(r"\A(?:0|[1-9][0-9]*)\Z")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: "No value here": the old value of an added key, the new value of a removed one.
MISSING: Any = _Missing()

Key = str | int


class PatchError(IpcError):
    """A patch does not fit the state it was sent for. The mirror resyncs; nothing is lost."""

    code = "patch_inapplicable"


@attrs.frozen
class Change:
    """One applied step. ``path`` is normalised: array indices are ``int`` (``-`` resolved),
    object keys are ``str``. ``inserted`` is true when an array grew (add) or shrank (remove)
    at ``path[-1]``; ``old``/``new`` are :data:`MISSING` where there is no value."""

    op: str
    path: tuple[Key, ...]
    old: Any
    new: Any
    inserted: bool = False


Observer = Callable[[Change], None]


def _fail(message: str, index: int) -> PatchError:
    return PatchError(f"state patch {index}: {message}", hint="the mirror asks the owner for a fresh snapshot")


def _array_index(key: Any, length: int, op: str, index: int) -> int:
    if key == "-" and op == "add":
        return length
    if isinstance(key, bool):
        raise _fail(f"invalid array index {key!r}", index)
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    if isinstance(key, str) and _CANONICAL_INDEX.match(key):
        key = int(key)
    if not isinstance(key, int):
        raise _fail(f"invalid array index {key!r}", index)
    limit = length if op == "add" else length - 1
    if not 0 <= key <= limit:
        raise _fail(f"array index {key} out of range for {op} on length {length}", index)
    return key


def _object_key(key: Any, index: int) -> str:
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise _fail(f"invalid path element {key!r}", index)
    return key if isinstance(key, str) else str(key)


def _check_path(path: Any, index: int) -> Sequence[Any]:
    if not isinstance(path, list):
        raise _fail("path must be an array", index)
    for key in path:
        if isinstance(key, str) and key in _FORBIDDEN_KEYS:
            raise _fail(f"forbidden path element {key!r}", index)
        if isinstance(key, bool) or not isinstance(key, (str, int, float)):
            raise _fail(f"invalid path element {key!r}", index)
    return path


def _walk(state: Any, path: Sequence[Any], index: int) -> tuple[Any, list[Key]]:
    """The parent of the target, and the normalised keys leading to it."""
    node, keys = state, list[Key]()
    for key in path:
        if isinstance(node, dict):
            name = _object_key(key, index)
            if name not in node:
                raise _fail(f"path element {key!r} does not exist in the state", index)
            node = node[name]
            keys.append(name)
        elif isinstance(node, list):
            position = _array_index(key, len(node), "replace", index)  # "-" is only valid last
            node = node[position]
            keys.append(position)
        else:
            raise _fail(f"path element {key!r} goes through a non-container", index)
    return node, keys


def _apply_one(state: Any, patch: Any, index: int) -> tuple[Any, Change]:
    if not isinstance(patch, dict):
        raise _fail("patch is not an object", index)
    op = patch.get("op")
    if op not in OPS:
        raise _fail(f"unsupported op {op!r}", index)
    path = _check_path(patch.get("path"), index)
    # JSON has no `undefined`: a JS patch setting a value to undefined arrives without "value".
    value = None if op == "remove" else patch.get("value")
    if not path:
        return (MISSING if op == "remove" else value), Change(op, (), state, MISSING if op == "remove" else value)
    parent, keys = _walk(state, path[:-1], index)
    last = path[-1]
    if isinstance(parent, list):
        position = _array_index(last, len(parent), op, index)
        key_path = (*keys, position)
        if op == "add":
            parent.insert(position, value)
            return state, Change(op, key_path, MISSING, value, inserted=True)
        old = parent[position]
        if op == "replace":
            parent[position] = value
            return state, Change(op, key_path, old, value)
        del parent[position]
        return state, Change(op, key_path, old, MISSING, inserted=True)
    if not isinstance(parent, dict):
        raise _fail(f"target of {op} is not an object or array", index)
    name = _object_key(last, index)
    key_path = (*keys, name)
    old = parent.get(name, MISSING)
    if op != "add" and old is MISSING:
        raise _fail(f"{op} of missing key {name!r}", index)
    if op == "remove":
        del parent[name]
        return state, Change(op, key_path, old, MISSING)
    parent[name] = value
    return state, Change(op, key_path, old, value)


def _undo(state: Any, change: Change) -> tuple[Any, Change]:
    """Reverse one applied change; returns the inverse change for the observer."""
    if not change.path:
        return change.old, Change("replace", (), change.new, change.old)
    parent = state
    for key in change.path[:-1]:
        parent = parent[key]
    key = change.path[-1]
    if change.inserted:  # an array insert or delete
        if change.op == "add":
            del parent[key]
            return state, Change("remove", change.path, change.new, MISSING, inserted=True)
        parent.insert(key, change.old)
        return state, Change("add", change.path, MISSING, change.old, inserted=True)
    if change.old is MISSING:
        del parent[key]
        return state, Change("remove", change.path, change.new, MISSING)
    parent[key] = change.old
    return state, Change("add" if change.new is MISSING else "replace", change.path, change.new, change.old)


def apply_patches(state: Any, patches: Any, observer: Observer | None = None) -> Any:
    """Apply ``patches`` to ``state`` in place and return the (possibly new) root.

    Raises :class:`PatchError` with the state unchanged if any patch does not apply.
    The root is ``MISSING`` after a ``remove`` of the empty path.
    """
    if not isinstance(patches, list):
        raise PatchError("state patches must be an array", hint="the mirror asks for a fresh snapshot")
    applied: list[Change] = []
    try:
        for index, patch in enumerate(patches):
            state, change = _apply_one(state, patch, index)
            applied.append(change)
            if observer is not None:
                observer(change)
    except PatchError:
        for change in reversed(applied):
            state, inverse = _undo(state, change)
            if observer is not None:
                observer(inverse)
        raise
    return state
