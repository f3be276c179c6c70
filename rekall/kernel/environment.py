"""Where rekall looks, from the environment: ``HOME``, ``CODEX_HOME``, and absolute paths only.

Kept apart from :mod:`rekall.kernel.settings` (whose settings are attrs records) so that the read
paths that must start fast (``rekall status --json``) can resolve their folders cheaply.
An empty variable counts as unset.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from rekall.kernel.errors import InvalidInput


def env_value(env: Mapping[str, str], *names: str) -> str | None:
    """The first of ``names`` that is set to a non-empty value."""
    for name in names:
        value = env.get(name)
        if value:
            return value
    return None


def user_home(env: Mapping[str, str]) -> Path:
    """``HOME`` from ``env``, else this process's home directory."""
    return Path(env_value(env, "HOME") or Path.home())


def account_home() -> Path:
    """This account's home as the password database records it: no environment variable moves it
    (``HOME`` is whatever the process that started us chose). Where there is no password
    database (Windows), the profile directory."""
    try:
        import pwd
    except ImportError:  # Windows
        return Path.home()
    try:
        return Path(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:  # a uid without an entry (a container started with --user N): HOME is all there is
        return Path.home()


def expand_home(value: str, env: Mapping[str, str]) -> Path:
    """``value`` with a leading ``~`` replaced by :func:`user_home`: one rule for every path rekall reads."""
    if value == "~" or value.startswith(("~/", "~" + os.sep)):
        return user_home(env) / value[2:]
    return Path(value)


def codex_home(env: Mapping[str, str]) -> Path:
    """``CODEX_HOME`` (``~`` expanded), else ``~/.codex``. May be relative: see :func:`absolute_codex_home`."""
    value = env_value(env, "CODEX_HOME")
    if value:
        return expand_home(value, env)
    return user_home(env) / ".codex"


def codex_home_origin(env: Mapping[str, str]) -> str:
    """Which ``CODEX_HOME`` rekall used and where it came from, for an error that says where it looked.

    An MCP server registered by hand gets only the variables its registration forwards, so the
    default may not be the folder the user's Codex runs with: saying so names the likely mistake."""
    if env_value(env, "CODEX_HOME"):
        return f"CODEX_HOME {codex_home(env)}, from this process's environment"
    return (f"CODEX_HOME {codex_home(env)}, the default, as CODEX_HOME is not set in this process's environment; "
            "if Codex runs with another one, forward it to rekall (env_vars in its MCP registration)")


def absolute_path(env: Mapping[str, str], name: str, value: Path) -> Path:
    """Refuse a relative path: the MCP server and a shell have different working directories,
    so a relative path would name two different folders."""
    if not value.is_absolute():
        raise InvalidInput(f"{name} must be an absolute path; got {str(value)!r}", field=name,
                           hint=f"set {name} to an absolute path (a leading ~ is allowed), or unset it")
    return value


def absolute_codex_home(env: Mapping[str, str]) -> Path:
    """:func:`codex_home`, refused when relative (every verb applies this, not only ``probe``)."""
    return absolute_path(env, "CODEX_HOME", codex_home(env))
