"""rekall's own error types.

Every error that can reach a person or an agent is a :class:`RekallError` with a stable
``code`` (for scripts and the status file), a message that names the field or value at
fault, and a ``hint`` that says what to do next. Lower-level exceptions (``OSError``,
``json.JSONDecodeError``, ``transitions.MachineError``) are translated into these at the
boundary of the module that meets them; nothing else leaks out.
"""

from __future__ import annotations

import errno


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


class InternalError(RekallError):
    """An exception rekall did not expect: reported by type, with no traceback and no values."""

    code = "internal_error"


#: errno → (code, what it means, what to do next), for the file-system errors a surface can meet.
_OS_ERRORS: dict[int, tuple[str, str, str]] = {
    errno.ENOSPC: ("no_space", "no space left on the device", "free some space and try again"),
    errno.EDQUOT: ("no_space", "the disk quota is exhausted", "free some space and try again"),
    errno.EROFS: ("read_only", "the file system is read-only",
                  "point REKALL_JOBS_DIR (or CODEX_HOME) at a writable directory"),
    errno.EACCES: ("permission_denied", "permission denied",
                   "check the owner and permissions, or point REKALL_JOBS_DIR at a directory of your own"),
    errno.EPERM: ("permission_denied", "operation not permitted",
                  "check the owner and permissions, or point REKALL_JOBS_DIR at a directory of your own"),
    errno.ELOOP: ("symlink_refused", "a symbolic link where rekall expects a real file or directory",
                  "replace the link with the real file or directory; rekall does not follow links in its store"),
}


def as_rekall_error(exc: BaseException) -> RekallError:
    """Any exception as a :class:`RekallError` for a surface (CLI, MCP) to show.

    rekall's own errors pass unchanged. An ``OSError`` gets a code by its errno and names the
    path (rekall's own, never a caller's secret); anything else is an ``internal_error`` that
    names only the exception's type, since its text may carry input.
    """
    if isinstance(exc, RekallError):
        return exc
    if isinstance(exc, OSError):
        code, meaning, hint = _OS_ERRORS.get(exc.errno or 0, ("os_error", exc.strerror or "an operating system error",
                                                               "check the path and try again"))
        where = f" ({exc.filename})" if exc.filename else ""
        return RekallError(f"{meaning}{where}", code=code, hint=hint)
    if isinstance(exc, RecursionError):
        return InvalidInput("the input is nested too deeply", code="too_deep",
                            hint="send flat JSON: a handoff is an object of strings and lists of strings")
    return InternalError(f"unexpected {type(exc).__name__} inside rekall",
                         hint="nothing was retried; this is a bug in rekall, report it with the command you ran")


def tool_error_text(error: RekallError) -> str:
    """The one form every MCP tool error takes: ``[code] message. Next: hint``."""
    hint = error.hint or "check compaction_status before doing anything else"
    return f"[{error.code}] {error.message}. Next: {hint}"
