"""Characters a handoff must not carry: they would be replayed into the conversation as they are.

Terminal controls (C0 other than tab and newline, DEL, C1, and ESC, which starts an ANSI escape
sequence) can rewrite what a person sees; bidirectional controls reorder it (the "Trojan Source"
trick); zero-width characters hide text, or split a word so that a filter misses it. Each class
is named when a text is refused, never the text itself. :mod:`rekall.kernel.credentials` removes the
invisible ones before it matches.
"""

from __future__ import annotations

import re

#: Bidirectional embeddings, overrides, isolates and marks.
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
#: Zero-width spaces, joiners, the word joiner, invisible operators and the byte-order mark.
ZERO_WIDTH = "\u180e\u200b-\u200d\u2060-\u2064\ufeff"
#: Every character the filter removes before matching (the soft hyphen hides a break as well).
INVISIBLE = re.compile(f"[{BIDI}{ZERO_WIDTH}\u00ad]")

_CLASSES = (
    ("an escape character (ESC, which starts a terminal escape sequence)", "\x1b"),
    ("a C0 control character", "\x00-\x08\x0b-\x1a\x1c-\x1f\x7f"),
    ("a C1 control character", "\x80-\x9f"),
    ("a bidirectional control character", BIDI),
    ("a zero-width character", ZERO_WIDTH),
)
_UNSAFE = re.compile("|".join(f"(?P<c{i}>[{chars}])" for i, (_, chars) in enumerate(_CLASSES)))


def unsafe_character(text: str) -> str | None:
    """The class of the first character of ``text`` a handoff must not carry, with its position; else ``None``."""
    found = _UNSAFE.search(text)
    if found is None:
        return None
    index = int(found.lastgroup[1:])  # type: ignore[index]
    return f"{_CLASSES[index][0]}, U+{ord(found.group()):04X} at character {found.start() + 1}"


# --- printing what rekall did not write -----------------------------------------------------

#: What a terminal acts on or hides, tab and newline aside: every class above.
_UNPRINTABLE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI}{ZERO_WIDTH}]")
#: What ``json.dumps(..., ensure_ascii=False)`` leaves as it is of those (it escapes C0 itself).
_UNPRINTABLE_IN_JSON = re.compile(f"[\x7f-\x9f{BIDI}{ZERO_WIDTH}]")


def printable(text: str) -> str:
    """``text`` as rekall prints it for people: each control, bidirectional or zero-width character
    written as an escape (``\\x1b``, ``\\u202e``), so that a path or a name from the disk or the
    environment (a hostile file name) cannot move the cursor, recolour or reorder the output."""
    return _UNPRINTABLE.sub(lambda found: _escape(found.group()), text)


def printable_json(text: str) -> str:
    """JSON text with DEL, C1, bidirectional and zero-width characters as ``\\uXXXX`` escapes: the
    same value for a parser, nothing a terminal acts on for a person."""
    return _UNPRINTABLE_IN_JSON.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def _escape(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
