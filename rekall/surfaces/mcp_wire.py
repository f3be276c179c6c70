"""The wire of ``rekall mcp``: stdin and stdout claimed as the SDK claims them, and the line cap.

Both paths of the server read the same wire: the light path (:mod:`rekall.surfaces.mcp_light`) first,
then the SDK path (:mod:`rekall.surfaces.mcp_stdio`) if it takes the session over. Kept apart from
both, and free of the SDK, so that each may use it and neither imports the other's code.
"""

from __future__ import annotations

import os
from typing import BinaryIO

#: Far above any valid call (a handoff is at most 32,000 bytes), far below harm. A longer line goes to the SDK path,
#: which refuses it.
MAX_LINE_BYTES = 4 * 1024 * 1024


def claim_stdio() -> tuple[BinaryIO, BinaryIO]:
    """As the SDK path does: the wire on private descriptors, fd 0 the null device, fd 1 stderr."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return os.fdopen(wire_in, "rb"), os.fdopen(wire_out, "wb")
