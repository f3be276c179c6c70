"""The worker's first follow, made on a blocking socket before the event loop exists.

A new worker spends most of its start importing (asyncio, the session, the policy). Following
the thread only reads it, so the worker follows first: it connects with the same checks
(:meth:`~rekall.transports.unix.UnixTransport.connect_blocking`: uid, mode and symlink
checks of the endpoint, then the peer's uid), runs the same handshake
(:mod:`rekall.adapters.extension.handshake`) under the same generation decision
(:func:`~rekall.adapters.extension.choice.decide`), and sends the follow. The owner then sends the
thread's snapshot while the rest of the worker loads; the session goes on from this
connection (:meth:`FirstFollow.adopt`), handling first what arrived meanwhile that was not an
answer to the handshake (:attr:`FirstFollow.backlog`).

Nothing here acts on the thread, and nothing is tried twice: if the first follow fails, the
job fails with its error once the worker has claimed it, as a failed follow always did.
This module does not import asyncio (a test keeps it so).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from rekall.adapters.extension import choice
from rekall.adapters.extension import messages as m
from rekall.adapters.extension.errors import (
    RESPONSE_MARGIN_S,
    ConnectionLostError,
    HandshakeFailed,
    lost_while_sending,
    lost_while_waiting,
    not_answered,
)
from rekall.adapters.extension.handshake import Ask, Handshaken, handshake
from rekall.kernel.errors import IpcError
from rekall.transports.endpoint import Endpoint, resolve_endpoint
from rekall.transports.framing import HEADER_BYTES, decode_body, encode_message, frame_length
from rekall.transports.unix import UnixTransport

if TYPE_CHECKING:
    from rekall.transports.socketstream import SocketStream


class FirstFollow(NamedTuple):
    """A connection that has run the handshake and sent the follow; the session goes on from it."""

    thread_id: str
    #: With the peer check the connection passed.
    endpoint: Endpoint
    decision: choice.Decision
    handshaken: Handshaken
    sock: socket.socket
    #: Messages that arrived during the handshake and were not its answers, with when each arrived.
    backlog: list[tuple[Any, float]]

    async def adopt(self) -> SocketStream:
        """The connection, now on the running event loop."""
        from rekall.transports.socketstream import adopt_socket

        return await adopt_socket(self.sock, self.endpoint.peer_check)

    def close(self) -> None:
        self.sock.close()


def follow_first(thread_id: str, env: Mapping[str, str], *, at_schedule: Any, request_timeout_s: float,
                 client_type: str = "codex-rekall") -> FirstFollow | None:
    """Follow ``thread_id`` now, through a Unix socket; ``None`` where the router is a named
    pipe (the event loop's connect follows). ``at_schedule``: the generation record schedule
    journaled (``generationAtSchedule``). Raises what connecting would raise."""
    endpoint = resolve_endpoint(env)
    if endpoint.is_pipe:
        return None
    decision = choice.decide(env, thread_id, router=endpoint.path, write_cache=True,
                             at_schedule=choice.Settled.from_json(at_schedule))
    sock, peer_check = UnixTransport(endpoint.path).connect_blocking()
    try:
        link = _BlockingLink(sock, thread_id, request_timeout_s)
        steps = handshake(thread_id, client_type, decision.adapter, () if decision.adapter else decision.candidates)
        try:
            ask = next(steps)
            while True:
                ask = steps.send(link.exchange(ask))
        except StopIteration as done:
            handshaken: Handshaken = done.value
        follow = handshaken.adapter.follow_broadcast(thread_id, source=handshaken.client_id,
                                                     owner=handshaken.owner_id)
        try:
            link.send(encode_message(follow))
        except OSError as exc:
            raise ConnectionLostError(f"connection lost before the first snapshot: {exc.strerror or exc}",
                                      hint="reconnect") from exc
    except BaseException:
        sock.close()
        raise
    return FirstFollow(thread_id, endpoint._replace(peer_check=peer_check), decision, handshaken, sock, link.backlog)


class _BlockingLink:
    """Requests and their answers on a blocking socket, frame by frame: nothing is read past
    the last frame asked for, so the session starts from a clean frame boundary."""

    def __init__(self, sock: socket.socket, thread_id: str, request_timeout_s: float) -> None:
        self.sock = sock
        self.thread_id = thread_id
        self.request_timeout_s = request_timeout_s
        self.backlog: list[tuple[Any, float]] = []

    def send(self, frame: bytes) -> None:
        self.sock.settimeout(self.request_timeout_s)
        self.sock.sendall(frame)

    def exchange(self, ask: Ask) -> m.Response:
        """Send ``ask`` and return the router's answer; what else arrives meanwhile is kept."""
        request_id = str(uuid.uuid4())
        try:
            self.send(encode_message(ask.adapter.request(
                ask.method, ask.params, request_id=request_id, source=ask.source,
                timeout_ms=int(self.request_timeout_s * 1000))))
        except OSError as exc:
            raise HandshakeFailed.because(lost_while_sending(ask.method, exc.strerror or str(exc))) from exc
        waited = self.request_timeout_s + RESPONSE_MARGIN_S
        deadline = time.monotonic() + waited
        while True:
            try:
                body = self._read(frame_length(self._read(HEADER_BYTES, deadline)), deadline)
                received_at = time.monotonic()
                message = decode_body(body)
            except TimeoutError:
                raise HandshakeFailed.because(not_answered(ask.method, waited)) from None
            except ConnectionError as exc:
                raise HandshakeFailed.because(lost_while_waiting(ask.method, str(exc))) from exc
            except IpcError as exc:  # a malformed frame: the connection cannot go on
                raise HandshakeFailed.because(lost_while_waiting(ask.method, exc.message)) from exc
            inbound = ask.adapter.classify(message, thread_id=self.thread_id, owner_id=None)
            if isinstance(inbound, m.Response) and inbound.request_id == request_id:
                return inbound
            self.backlog.append((message, received_at))

    def _read(self, count: int, deadline: float) -> bytearray:
        data = bytearray(count)
        view, got = memoryview(data), 0
        while got < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            try:
                n = self.sock.recv_into(view[got:])
            except TimeoutError:
                raise
            except OSError as exc:
                raise ConnectionError(exc.strerror or str(exc)) from exc
            if not n:
                raise ConnectionError("the router closed the connection")
            got += n
        return data

