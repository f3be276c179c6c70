"""A faster parse of large frame bodies (snapshots) that gives exactly what ``json.loads`` gives.

``msgspec`` parses a large thread snapshot straight from the bytes, faster than
``str(body, "utf-8")`` plus ``json.loads``. It is stricter: it refuses what ``json.loads``
accepts in places that matter (lone surrogate escapes such as ``"\\ud83d"``, which Node's
``JSON.stringify`` emits for broken UTF-16; ``NaN`` and ``Infinity``; numbers beyond a double,
such as ``1e400``), and everything it refuses is handed back to ``json.loads`` (see
:func:`rekall.transports.framing.decode_body`), so errors keep their wording and those values
still parse. Where it accepts, the value is the one ``json.loads`` returns (the same types,
float bits, big integers, key order and last-one-wins for duplicate keys), which
``tests/transports/test_fastdecode.py`` checks with hypothesis.

Nesting: both parsers raise ``RecursionError`` near the interpreter's recursion limit, but
not at the same depth (msgspec goes a few levels deeper on 3.11). So msgspec runs with
:data:`NESTING_MARGIN` levels of ``json.loads``' own nesting budget already spent: whatever
it then accepts, ``json.loads`` accepts too, and a body nested deeper falls back to
``json.loads``, which decides as it always did.

The cyclic garbage collector is paused while msgspec builds the tree, and the new objects go
to the oldest generation without being scanned (``gc.freeze()`` then ``gc.unfreeze()``): a
parsed JSON tree holds no reference cycle, and the full pass the allocations set off is a
large share of a large body's load. The collector is left as it was found (disabled, or with objects
someone froze: then it is not touched).

Imported only for large bodies: small frames stay on ``json`` and the fast paths never load
``msgspec``.
"""

from __future__ import annotations

import gc
import json
from typing import Any

import msgspec

#: Levels of json.loads' nesting budget spent before msgspec runs (json.loads and msgspec
#: count nesting a little differently; this leaves room for the difference).
NESTING_MARGIN = 16

#: Returned when msgspec refuses the body: parse it with json.loads instead.
REFUSED: Any = object()

_DECODE = msgspec.json.Decoder().decode
_SPEND = "[" * NESTING_MARGIN + "{}" + "]" * NESTING_MARGIN


def decode_large(body: bytes | bytearray | memoryview) -> Any:
    """The parsed body, or :data:`REFUSED` when msgspec will not parse it."""
    collecting = gc.isenabled() and not gc.get_freeze_count()
    if collecting:  # a parsed JSON tree holds no reference cycle: looking for one is wasted work
        gc.disable()
    try:
        nested = json.loads(_SPEND, object_pairs_hook=lambda _pairs: _DECODE(body))
    except (msgspec.DecodeError, RecursionError):
        return REFUSED
    finally:
        if collecting:  # the new objects go to the oldest generation as they are, without a pass
            gc.freeze()
            gc.unfreeze()
            gc.enable()
    for _ in range(NESTING_MARGIN):
        nested = nested[0]
    return nested
