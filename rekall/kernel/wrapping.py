"""Text for a terminal, wrapped between words so that no path, id or command is ever split.

A word here is a run of non-blank characters, or a span in backticks (a command such as
`codex app-server daemon start`, with whatever punctuation follows it). Words move to the next
line whole; one longer than a line stands alone on its own line, whole, and the terminal wraps
it there: a copy of it still pastes as one.

Kept free of rich so that the error path of every verb stays light.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TextIO

_WORD = re.compile(r"`[^`\n]*`\S*|\S+")


def line_spans(text: str, width: int | None, first_width: int | None = None) -> list[tuple[int, int]]:
    """Where each line of ``text`` starts and ends (its first word to its last) when wrapped at
    ``width``, the first line at ``first_width`` (default ``width``); ``None``: one line. Line
    breaks in ``text`` are kept."""
    spans: list[tuple[int, int]] = []
    limit = width if first_width is None else first_width
    offset = 0
    for paragraph in text.split("\n"):
        start = end = None
        for word in _WORD.finditer(paragraph):
            if start is not None and end is not None and limit is not None \
                    and word.end() - start > limit:
                spans.append((offset + start, offset + end))
                start, limit = None, width
            start = word.start() if start is None else start
            end = word.end()
        if start is not None and end is not None:
            spans.append((offset + start, offset + end))
            limit = width
        offset += len(paragraph) + 1
    return spans or [(0, 0)]


def longest_word(text: str) -> int:
    """The length of the longest run of non-blank characters in ``text`` (0 for none): a box or
    column narrower than that would cut the word."""
    return max(map(len, text.split()), default=0)


def wrap(text: str, width: int | None, *, first: str = "", rest: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` characters (``None``: as it is), the first starting
    with ``first`` and the others with ``rest``."""
    spans = line_spans(text, None if width is None else width - len(rest),
                       None if width is None else width - len(first))
    return [(first if i == 0 else rest) + text[start:end] for i, (start, end) in enumerate(spans)]


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The width to wrap ``stream``'s text at: ``COLUMNS`` when set, else the terminal's; ``None``
    when it is no terminal (a log or a pipe keeps each message on one line, for grep)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isascii() and columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stderr if stream is None else stream
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None
