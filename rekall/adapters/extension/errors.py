"""Errors of the protocol layer. Each is an :class:`~rekall.kernel.errors.IpcError` with a stable code."""

from __future__ import annotations

from rekall.kernel.errors import IpcError
from rekall.kernel.records import ConnectionLostError as ConnectionLostError  # shared: every platform's connection can be lost
from rekall.kernel.records import Delivery as Delivery

#: How much longer than the ``timeoutMs`` we send we wait for a response ourselves, so that the
#: router's own ``request-timeout`` (which is more informative) normally arrives first.
RESPONSE_MARGIN_S = 2.0
NOTHING_RETRIED = "check the thread before scheduling again; nothing was retried"


class RequestFailed(IpcError):
    """A request to the owner did not succeed.

    ``code`` is the router's error string (``no-client-found``, ``request-version-mismatch``,
    ``no-handler-for-request``, ``client-disconnected``, ``request-timeout``, …) or ours
    (``request_timeout``, ``connection_lost``, ``bad_ack``). ``delivery`` says what we know:
    ``"not_delivered"`` when the failure proves the owner never acted on it, ``"unknown"``
    when it may have. Nothing is ever retried.
    """

    code = "request_failed"

    def __init__(self, message: str, *, code: str, delivery: Delivery, method: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint, code=code)
        self.delivery: Delivery = delivery
        self.method = method

    @property
    def outcome_unknown(self) -> bool:
        return self.delivery == "unknown"

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), "delivery": self.delivery, "method": self.method}


def lost_while_sending(method: str, detail: str) -> RequestFailed:
    return RequestFailed(f"{method}: connection lost while sending ({detail}); outcome unknown",
                         code="connection_lost", delivery="unknown", method=method, hint=NOTHING_RETRIED)


def lost_while_waiting(method: str, detail: str) -> RequestFailed:
    return RequestFailed(f"{method}: connection lost while waiting for the response ({detail}); outcome unknown",
                         code="connection_lost", delivery="unknown", method=method, hint=NOTHING_RETRIED)


def not_answered(method: str, waited_s: float) -> RequestFailed:
    return RequestFailed(f"{method}: no response within {waited_s:g} s; outcome unknown", code="request_timeout",
                         delivery="unknown", method=method, hint=NOTHING_RETRIED)


class HandshakeFailed(IpcError):
    code = "handshake_failed"

    @classmethod
    def because(cls, failed: RequestFailed) -> HandshakeFailed:
        """A handshake request that failed (a timeout, a dropped connection)."""
        return cls(f"handshake with the IPC router failed: {failed.message}", code=failed.code, hint=failed.hint)


class NoOwner(IpcError):
    """No client owns the thread (router error ``no-client-found`` on owner discovery)."""

    code = "no_owner"


class VersionMismatch(IpcError):
    """The extension speaks a protocol version we have no adapter for."""

    code = "version_mismatch"


class SnapshotTimeout(IpcError):
    code = "snapshot_timeout"


class SessionClosed(IpcError):
    code = "session_closed"
