"""Settings read from the environment, each in one place with its default and its check.

An empty variable counts as unset everywhere in rekall.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from rekall.kernel.errors import InvalidInput
from rekall.kernel.environment import env_value

#: A setting's text: ASCII digits with at most one decimal point. ``float`` alone would also take
#: ``1_000``, other scripts' digits, exponents and surrounding spaces.
_PLAIN_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\Z", re.ASCII)

#: Reconnect delays after a lost connection (the backoff); the last one repeats until the
#: reconnect window is spent.
RECONNECT_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


#: Names the shared app-server's Unix socket (as given to ``codex app-server --listen unix://PATH``).
APP_SERVER_SOCKET_VAR = "REKALL_APP_SERVER_SOCKET"
#: Where the shared app-server listens by default, relative to ``CODEX_HOME``.
DEFAULT_APP_SERVER_SOCKET = Path("app-server-control") / "app-server-control.sock"


def app_server_socket(env: Mapping[str, str]) -> Path | None:
    """``REKALL_APP_SERVER_SOCKET`` as an absolute path, or ``None`` for the default socket.

    ``unix://PATH`` is accepted as Codex writes it, and a bare ``unix://`` means the default,
    as it does for ``--listen``. Remote ``ws://``/``wss://`` endpoints are refused: they have no
    peer uid to check.
    """
    raw = env_value(env, APP_SERVER_SOCKET_VAR)
    if raw is None:
        return None
    if raw.startswith(("ws://", "wss://")):
        raise InvalidInput(f"{APP_SERVER_SOCKET_VAR} names a remote endpoint; rekall only "
                           "connects to a local Unix socket, whose owner and peer it can check",
                           field=APP_SERVER_SOCKET_VAR,
                           hint="start the app-server with --listen unix://PATH and name PATH")
    path = raw.removeprefix("unix://")
    if not path:
        return None
    if "\0" in path or not os.path.isabs(path):
        raise InvalidInput(f"{APP_SERVER_SOCKET_VAR} must be an absolute socket path or unix://PATH",
                           field=APP_SERVER_SOCKET_VAR,
                           hint=f"unset it to use $CODEX_HOME/{DEFAULT_APP_SERVER_SOCKET.as_posix()}")
    return Path(path)


class NumberSetting(NamedTuple):
    """A ``REKALL_*`` number: its default, its allowed range ``(0, maximum]`` and its check.

    Every setting is declared here, in :data:`SETTINGS`; :func:`check_settings` checks them
    all, so that ``schedule``, ``probe`` and ``doctor`` refuse a bad value up front instead
    of queueing a job whose worker would die of it. An empty variable counts as unset.
    """

    name: str
    default: float
    maximum: float
    unit: str

    @property
    def allowed(self) -> str:
        return (f"a number greater than 0 and at most {self.maximum:g} ({self.unit}), "
                "written with the digits 0-9 and at most one decimal point")

    def read(self, env: Mapping[str, str]) -> float:
        raw = env_value(env, self.name)
        if raw is None:
            return self.default
        value = float(raw) if _PLAIN_NUMBER.match(raw) else math.nan
        if not (math.isfinite(value) and 0 < value <= self.maximum):
            # The value is not repeated: errors name the variable and the rule.
            raise InvalidInput(f"{self.name} must be {self.allowed}", field=self.name, code="invalid_setting",
                               hint=f"fix {self.name}, or unset it to use the default ({self.default:g})")
        return value


#: Idle must hold this long before rekall acts (compaction request, continuation).
IDLE_STABLE_MS = NumberSetting("REKALL_IDLE_STABLE_MS", 750, 600_000, "milliseconds")
#: The worker gives up (``timed_out``) after this long, waiting included.
DEADLINE_S = NumberSetting("REKALL_DEADLINE_S", 15 * 60, 7 * 24 * 3600, "seconds")
#: How long the router and rekall wait for the owner's answer to one request.
REQUEST_TIMEOUT_S = NumberSetting("REKALL_REQUEST_TIMEOUT_S", 10.0, 600, "seconds")
#: A thread whose runtime status stays ``systemError`` this long after the user's turn ended
#: ends the job (``failed``, ``thread_system_error``) instead of waiting for the deadline.
SYSTEM_ERROR_WINDOW_S = NumberSetting("REKALL_SYSTEM_ERROR_WINDOW_S", 60.0, 24 * 3600, "seconds")
#: How long the worker keeps reconnecting to a vanished owner (a VS Code window reload) before
#: the job fails ``connection_lost``.
RECONNECT_WINDOW_S = NumberSetting("REKALL_RECONNECT_WINDOW_S", 60.0, 24 * 3600, "seconds")
#: When a request's outcome is unknown, how long the owner must show the thread idle with no
#: compaction in progress before the job settles as ``failed`` (outcome unknown).
SETTLE_S = NumberSetting("REKALL_SETTLE_S", 60.0, 24 * 3600, "seconds")
SETTINGS: tuple[NumberSetting, ...] = (IDLE_STABLE_MS, DEADLINE_S, REQUEST_TIMEOUT_S, SYSTEM_ERROR_WINDOW_S,
                                       RECONNECT_WINDOW_S, SETTLE_S)


class SwitchSetting(NamedTuple):
    """A ``REKALL_*`` switch: ``on`` or ``off`` (also ``1``/``0``, ``true``/``false``, ``yes``/``no``)."""

    name: str
    default: bool

    _ON = ("on", "1", "true", "yes")
    _OFF = ("off", "0", "false", "no")

    def read(self, env: Mapping[str, str]) -> bool:
        raw = env_value(env, self.name)
        if raw is None:
            return self.default
        if raw.strip().lower() in self._ON:
            return True
        if raw.strip().lower() in self._OFF:
            return False
        raise InvalidInput(f"{self.name} must be on or off", field=self.name, code="invalid_setting",
                           hint=f"set {self.name} to on or off, or unset it to use the default "
                                f"({'on' if self.default else 'off'})")

    def shown(self, env: Mapping[str, str]) -> str:
        """``on``/``off``, and whether that is the default (``doctor`` shows it)."""
        value = self.read(env)
        return f"{self.name}={'on' if value else 'off'}" + (" (the default)" if env_value(env, self.name) is None
                                                            else "")


#: After a compaction that no continuation turn follows (resume false, skipped for headroom, or overtaken by
#: the user's input), inject the verified handoff into the thread's context where the platform has a way in.
INJECT_HANDOFF = SwitchSetting("REKALL_INJECT_HANDOFF", True)
#: With a thread's checkpoint, the hook also delivers the latest plan (Codex's ``update_plan``) its transcript holds.
CHECKPOINT_PLAN = SwitchSetting("REKALL_CHECKPOINT_PLAN", True)

DEFAULT_IDLE_STABLE_MS = IDLE_STABLE_MS.default
DEFAULT_DEADLINE_S = DEADLINE_S.default


def check_settings(env: Mapping[str, str] | None = None) -> None:
    """Raise ``InvalidInput`` for the first declared setting that is set to a value outside its range.

    The worker's settings are built too, so that a variable read there joins this check.
    """
    env = os.environ if env is None else env
    for setting in SETTINGS:
        setting.read(env)
    INJECT_HANDOFF.read(env)
    CHECKPOINT_PLAN.read(env)
    WorkerSettings.from_env(env)


class WorkerSettings(NamedTuple):
    idle_stable_s: float
    deadline_s: float
    request_timeout_s: float = REQUEST_TIMEOUT_S.default
    reconnect_delays_s: tuple[float, ...] = RECONNECT_DELAYS_S
    system_error_window_s: float = SYSTEM_ERROR_WINDOW_S.default
    reconnect_window_s: float = RECONNECT_WINDOW_S.default
    settle_s: float = SETTLE_S.default
    inject_handoff: bool = INJECT_HANDOFF.default

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        env = os.environ if env is None else env
        return cls(
            idle_stable_s=IDLE_STABLE_MS.read(env) / 1000,
            deadline_s=DEADLINE_S.read(env),
            request_timeout_s=REQUEST_TIMEOUT_S.read(env),
            system_error_window_s=SYSTEM_ERROR_WINDOW_S.read(env),
            reconnect_window_s=RECONNECT_WINDOW_S.read(env),
            settle_s=SETTLE_S.read(env),
            inject_handoff=INJECT_HANDOFF.read(env),
        )
