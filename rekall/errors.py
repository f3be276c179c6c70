"""rekall's own error types.

Every error that can reach a person or an agent is a :class:`RekallError` with a stable
``code`` (for scripts and the status file), a message that names the field or value at
fault, and a ``hint`` that says what to do next. Lower-level exceptions (``OSError``,
``json.JSONDecodeError``, ``transitions.MachineError``) are translated into these at the
boundary of the module that meets them; nothing else leaks out.
"""

from __future__ import annotations


class RekallError(Exception):
    """Base class. ``code`` is stable; ``message`` and ``hint`` are for people."""

    code: str = "error"
    #: Exit status the CLI uses for this error (1: the operation failed or was refused).
    exit_status: int = 1

    def __init__(self, message: str, *, hint: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"

    def to_dict(self) -> dict[str, str]:
        out = {"code": self.code, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        return out


class UsageError(RekallError):
    """The caller's arguments are wrong: a missing thread id, an unknown option."""

    code = "usage"
    exit_status = 2


class InvalidInput(RekallError):
    """A value supplied by the caller failed validation (an id, a handoff field, a date)."""

    code = "invalid_input"
    exit_status = 2

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message, hint=hint, code=code)
        self.field = field

    def to_dict(self) -> dict[str, str]:
        out = super().to_dict()
        if self.field:
            out["field"] = self.field
        return out


class StoreError(RekallError):
    """The job store could not be read or written, or holds data it cannot trust."""

    code = "store_error"


class IpcError(RekallError):
    """Anything that went wrong between rekall and the extension's IPC router."""

    code = "ipc_error"


class CodexError(RekallError):
    """The Codex binary could not be found, run, or its schema is incompatible."""

    code = "codex_error"
