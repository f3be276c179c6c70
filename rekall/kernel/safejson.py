"""Decoding JSON from outside rekall without letting its shape hurt: depth is bounded first.

Python's decoder recurses once per nesting level, so a few kilobytes of ``[`` raise
``RecursionError`` (or worse, in the validators after it). :func:`loads` measures the
nesting of the text with one linear scan that skips strings, refuses anything deeper than
``max_depth`` and only then decodes. Its errors are ``ValueError``\\ s whose text names the
problem and the place, never the content. Callers bound the size before they get here.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

#: Far deeper than any MCP message or handoff rekall accepts (a handoff is 3 levels deep).
MAX_DEPTH = 64

_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class TooDeep(ValueError):
    def __init__(self, max_depth: int) -> None:
        super().__init__(f"nested deeper than {max_depth} levels")
        self.max_depth = max_depth


def exceeds_depth(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects in ``text`` nest deeper than ``max_depth`` (strings skipped).

    Regular expressions and ``accumulate`` keep the scan in C: it runs on every large body.
    """
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    if brackets.count("[") + brackets.count("{") <= max_depth:
        return False
    return max(accumulate(map(_STEP.__getitem__, brackets))) > max_depth


def decode_reason(exc: json.JSONDecodeError) -> str:
    """The decoder's reason alone. Some end in "at" ("Invalid control character at"), meant to be
    followed by the place; callers add the place themselves, so that it reads "at" once."""
    return exc.msg[:-3] if exc.msg.endswith(" at") else exc.msg


def decode_error_text(exc: json.JSONDecodeError) -> str:
    """``exc`` as words: the decoder's reason and where, without the document's text."""
    return f"{decode_reason(exc)} at line {exc.lineno} column {exc.colno}"


class DuplicateKey(ValueError):
    """An object names one key twice: JSON leaves its meaning open, and ``json`` would keep the last silently."""

    def __init__(self, key: str) -> None:
        from rekall.kernel.credentials import shown_key  # only when refusing: a key may be a value in disguise

        super().__init__(f"the key {shown_key(key)} twice in one object")
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return value


def loads(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)``, refusing nesting deeper than ``max_depth`` before decoding and a key
    repeated in one object.

    Raises :class:`TooDeep`, :class:`DuplicateKey` or ``json.JSONDecodeError`` (all ``ValueError``).
    """
    if exceeds_depth(text, max_depth):
        raise TooDeep(max_depth)
    return json.loads(text, object_pairs_hook=_unique_keys)


_TOP_LEVEL_ID = re.compile(r'\A\s*\{(?:\s*"(?:jsonrpc|method)"\s*:\s*"[^"\\]{0,200}"\s*,)*'
                           r'\s*"id"\s*:\s*(-?[0-9]{1,18}(?![0-9.eE])|"[^"\\]{0,200}")')


def top_level_id(text: str) -> int | str | None:
    """The JSON-RPC id of a message too deep to decode, when it comes before ``params`` (as clients
    write it); else ``None``."""
    match = _TOP_LEVEL_ID.match(text)
    return json.loads(match[1]) if match else None
