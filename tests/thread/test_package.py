"""The thread model stays sans-I/O and apart from the protocol: data flows into it from the
adapter's session, never the other way."""

from __future__ import annotations

import subprocess
import sys

#: What the thread model must never pull in: I/O, and the layers above or beside it.
FORBIDDEN = ("asyncio", "socket", "selectors", "anyio", "rekall.adapters", "rekall.transports", "rekall.store",
             "rekall.worker.reactor", "rekall.usecases.service")


def test_importing_the_thread_model_loads_no_io_and_no_protocol_module():
    probe = ("import sys, rekall.thread, rekall.thread.index; "
             f"print(sorted(m for m in {FORBIDDEN!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_fingerprint_of_a_thread_without_user_input_is_the_digest_it_names():
    import hashlib

    from rekall.thread.facts import NO_USER_INPUT

    assert NO_USER_INPUT == hashlib.sha256(b"no-user-input").hexdigest()
