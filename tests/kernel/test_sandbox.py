"""Codex's sandbox, recognised by its effect (rekall.kernel.sandbox), and the loop that wakes inside it.

The sandbox itself runs in tests/codex/test_sandbox.py (the real ``codex sandbox``); here, the rules."""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from rekall.kernel import sandbox
from rekall.kernel.errors import RekallError, StoreError
from rekall.kernel.loop import _WokenByWrite, run
from rekall.transports.base import SandboxRefused


@pytest.fixture(autouse=True)
def fresh_detection():
    sandbox.refuses_socket_send.cache_clear()
    yield
    sandbox.refuses_socket_send.cache_clear()


class _RefusingEnd:
    """One end of a socket pair as the sandbox leaves it: ``send()`` refused with ``EPERM``."""

    def send(self, data: bytes) -> int:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    def close(self) -> None:
        pass


@pytest.fixture
def in_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "socketpair", lambda: (_RefusingEnd(), _RefusingEnd()))


def test_a_process_that_may_send_on_a_socket_is_not_taken_for_the_sandbox():
    assert sandbox.refuses_socket_send() is False


def test_a_send_refused_with_eperm_is_the_mark_of_the_sandbox(in_the_sandbox):
    assert sandbox.refuses_socket_send() is True


def test_an_eperm_from_a_connection_is_the_sandbox_only_where_send_is_refused(monkeypatch):
    try:
        raise StoreError("cannot connect") from PermissionError(errno.EPERM, "Operation not permitted")
    except StoreError as exc:
        refused = exc
    assert sandbox.caused_by_sandbox(refused) is False
    monkeypatch.setattr(socket, "socketpair", lambda: (_RefusingEnd(), _RefusingEnd()))
    sandbox.refuses_socket_send.cache_clear()  # a process never enters the sandbox: the test stands in for one that did
    assert sandbox.caused_by_sandbox(refused) is True


def test_a_read_only_file_system_is_the_sandbox_there_but_a_plain_permission_error_is_not(in_the_sandbox):
    assert sandbox.caused_by_sandbox(OSError(errno.EROFS, "Read-only file system"))
    assert not sandbox.caused_by_sandbox(PermissionError(errno.EACCES, "Permission denied"))
    assert not sandbox.caused_by_sandbox(RekallError("nothing is listening"))


def test_a_suppressed_context_is_not_followed(in_the_sandbox):
    try:
        try:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        except OSError:
            raise RekallError("something else went wrong") from None
    except RekallError as exc:
        assert sandbox.caused_by_sandbox(exc) is False


def test_the_transports_sandbox_refusal_is_the_sandbox_wherever_it_is_met():
    assert sandbox.caused_by_sandbox(SandboxRefused("Codex's sandbox refused the connection to /x.sock"))


def test_the_sandbox_error_names_the_verb_the_sandbox_and_both_ways_out():
    error = sandbox.sandbox_error("probe", SandboxRefused("Codex's sandbox refused the connection to /x.sock"))
    assert error.code == "sandboxed" and error.exit_status == 1
    assert "`rekall probe`" in error.message and "Codex's sandbox refused the connection to /x.sock" in error.message
    assert "MCP tool" in error.hint and "`!rekall probe`" in error.hint and "terminal UI" in error.hint


def test_the_loop_woken_by_write_notices_a_finished_worker_thread():
    loop = _WokenByWrite()
    try:
        # Without a wake-up the loop would sleep in select() until the bound: the test would fail.
        assert loop.run_until_complete(asyncio.wait_for(asyncio.to_thread(lambda: 42), 10)) == 42
    finally:
        loop.close()


@pytest.mark.parametrize("sandboxed", [True, False])
def test_run_uses_the_loop_woken_by_write_only_in_the_sandbox(monkeypatch, sandboxed):
    import rekall.kernel.loop

    monkeypatch.setattr(rekall.kernel.loop, "refuses_socket_send", lambda: sandboxed)

    async def loop_type() -> type:
        await asyncio.to_thread(lambda: None)
        return type(asyncio.get_running_loop())

    assert (run(loop_type()) is _WokenByWrite) is sandboxed
