"""A thread-safe, synchronous handle on a :class:`SimulatedOwner` running in its own thread.

For tests that spawn a worker *process*, and for ``rekall demo``::

    with start_sim_in_thread(compaction_delay_s=0.2) as sim:
        env = {**os.environ, **sim.env}           # REKALL_PIPE=<socket>
        ...spawn the worker...
        sim.wait_until(lambda s: len(s.compact_requests) == 1, timeout=10)
        sim.user_turn("new input")                  # scripting runs on the simulator's loop

Scripting methods of the owner (``fail_next``, ``move_owner``, …) and of the scripted
backend (``user_turn``, ``steer``, ``set_telemetry``, …) are available on the handle and
run on the simulator's event loop; predicates given to :meth:`SimHandle.wait_until` and
functions given to :meth:`SimHandle.call` run there too, so they may read anything.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from rekall.sim.owner import SimError, SimulatedOwner

T = TypeVar("T")

_OWNER_SCRIPTS = frozenset({
    "fail_next", "delay_next", "silence_next", "drop_connection_on", "reply_next", "send_garbage",
    "disconnect_all", "drop_updates", "ignore_follows", "send_inapplicable_patch", "broadcast_foreign_state",
    "move_owner", "probe_clients", "publish_snapshot", "send_foreign_batch",
})
_BACKEND_SCRIPTS = frozenset({
    "change", "set_runtime", "user_turn", "complete_turn", "stop_turn", "steer", "agent_message", "mcp_tool_call",
    "cosmetic_edit", "add_request", "resolve_request", "add_unconfirmed_submission", "confirm_submission",
    "set_telemetry", "page_in_history", "load_thread", "answer_request",
})


class SimHandle:
    def __init__(self, owner_factory: Callable[[], SimulatedOwner]) -> None:
        self._factory = owner_factory
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owner: SimulatedOwner | None = None
        self._stop: asyncio.Event | None = None
        self._started: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, name="rekall-sim", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self._owner = await self._factory().start()
        except BaseException as exc:
            self._started.set_exception(exc)
            return
        self._started.set_result(None)
        try:
            await self._stop.wait()
        finally:
            await self._owner.stop()

    def start(self, timeout: float = 10.0) -> SimHandle:
        self._thread.start()
        self._started.result(timeout)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- running things on the simulator's loop -------------------------------------------

    def call(self, fn: Callable[[SimulatedOwner], T], timeout: float = 10.0) -> T:
        """Run ``fn(owner)`` on the simulator's loop and return its result (awaited if async)."""
        if self._loop is None or self._owner is None:
            raise SimError("the simulator is not running", hint="call start() first")
        owner = self._owner

        async def run() -> Any:
            result = fn(owner)
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def wait_until(self, predicate: Callable[[SimulatedOwner], bool], timeout: float = 10.0) -> None:
        """Block until ``predicate(owner)`` holds (checked on every change). TimeoutError after ``timeout``."""
        self.call(lambda owner: owner.wait_until(predicate, timeout), timeout + 5.0)

    def __getattr__(self, name: str) -> Any:
        if name in _OWNER_SCRIPTS:
            return lambda *args, **kwargs: self.call(lambda owner: getattr(owner, name)(*args, **kwargs))
        if name in _BACKEND_SCRIPTS:
            return lambda *args, **kwargs: self.call(lambda owner: getattr(owner.backend, name)(*args, **kwargs))
        raise AttributeError(name)

    # -- read-only views (copied on the simulator's loop) -------------------------------

    @property
    def socket_path(self) -> str:
        return self.call(lambda owner: str(owner.socket_path))

    @property
    def thread_id(self) -> str:
        return self.call(lambda owner: owner.thread_id)

    @property
    def owner_id(self) -> str:
        return self.call(lambda owner: owner.owner_id)

    @property
    def env(self) -> dict[str, str]:
        return self.call(lambda owner: owner.env)

    @property
    def compact_requests(self) -> list[Any]:
        return self.call(lambda owner: list(owner.compact_requests))

    @property
    def start_turn_requests(self) -> list[Any]:
        return self.call(lambda owner: list(owner.start_turn_requests))

    @property
    def follow_count(self) -> int:
        return self.call(lambda owner: owner.follow_count)

    @property
    def followers(self) -> int:
        return self.call(lambda owner: owner.followers)

    def set_option(self, name: str, value: Any) -> None:
        """Change an owner or backend attribute (e.g. ``mode``, ``state_version``,
        ``telemetry_after``, ``compaction_delay_s``) on the simulator's loop."""
        def apply(owner: SimulatedOwner) -> None:
            target = owner if hasattr(owner, name) else owner.backend
            if not hasattr(target, name):
                raise SimError(f"unknown simulator option {name!r}")
            setattr(target, name, value)

        self.call(apply)


def start_sim_in_thread(**options: Any) -> SimHandle:
    """Start a :class:`SimulatedOwner` (same options) on a private thread and return its handle."""
    return SimHandle(lambda: SimulatedOwner(**options)).start()
