"""Codex's sandbox, recognised by what it refuses.

Codex runs an agent's shell commands under its Linux sandbox (``codex sandbox -- CMD`` runs one
the same way). Unless the user gave the sandbox network access, its seccomp filter refuses
``send()`` and ``connect()`` on sockets with ``EPERM``, while ``write()`` on the same socket
passes. Codex sets no variable that names the sandbox, so rekall recognises it by that effect:
one ``send()`` on a fresh socket pair (:func:`refuses_socket_send`). Two consequences, each
handled in one place:

- asyncio wakes its event loop with ``send()`` on a socket pair when a worker thread finishes:
  refused, ``asyncio.to_thread`` would never return. :func:`rekall.kernel.loop.run` wakes the
  loop with ``write()`` there.
- Nothing inside the sandbox can connect to Codex's sockets, nor can a worker it starts (the
  filter is inherited): the transport says so (``sandboxed``), and the CLI names the sandbox
  and the ways out for whichever verb met it (:func:`sandbox_error`).
"""

from __future__ import annotations

import errno
import functools
import socket

from rekall.kernel.errors import RekallError

#: What the sandbox refuses, as its errors' code.
CODE = "sandboxed"


def way_out(command: str) -> str:
    """The ways out of the sandbox for ``command`` (a rekall command line)."""
    return (f"an agent calls rekall's MCP tool for this instead (Codex runs MCP servers outside the sandbox); "
            f"or the user types `!{command}` in Codex's terminal UI, which runs it outside the sandbox")


class Sandboxed(RekallError):
    """The command runs inside Codex's sandbox, which refused what it needed."""

    code = CODE


@functools.cache
def refuses_socket_send() -> bool:
    """Whether this process may not ``send()`` on a socket: the mark of Codex's sandbox (cached:
    a process never leaves a seccomp filter)."""
    try:
        ends = socket.socketpair()
    except OSError:  # no socket pair at all: not the sandbox rekall knows
        return False
    try:
        ends[0].send(b"\0")
    except OSError as exc:
        return exc.errno == errno.EPERM
    finally:
        for end in ends:
            end.close()
    return False


def caused_by_sandbox(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, is a refusal the sandbox explains:
    a ``sandboxed`` error, or ``EPERM`` (a refused call) or ``EROFS`` (a write outside the folders it
    lets one write) in a process whose ``send()`` is refused."""
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, "code", None) == CODE:
            return True
        if isinstance(seen, OSError) and seen.errno in (errno.EPERM, errno.EROFS):
            return refuses_socket_send()
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return False


def sandbox_error(verb: str, error: RekallError) -> Sandboxed:
    """``error`` (which :func:`caused_by_sandbox` explains) as ``rekall VERB``'s: naming the sandbox
    and the ways out."""
    said = error.message if error.code == CODE else f"the sandbox refused it: {error.message}"
    return Sandboxed(f"`rekall {verb}` cannot work inside Codex's sandbox, where an agent's shell commands run; "
                     f"{said}", hint=way_out(f"rekall {verb}"))
