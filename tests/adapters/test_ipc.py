"""The shared adapter speaks every known generation from its record."""

from __future__ import annotations

from rekall.adapters.extension import ipc
from rekall.adapters.extension.generations import G26_9XX, GENERATIONS
from rekall.adapters.extension.ipc import IpcAdapter
from rekall.adapters.extension.session import ThreadSession
from rekall.thread import V11
from rekall.transports import Endpoint

THREAD = "019a0000-0000-7000-8000-000000000001"


def test_every_known_generation_gets_the_shared_adapter_in_the_same_order():
    assert [a.generation for a in ipc.ADAPTERS] == list(GENERATIONS)
    assert all(ipc.adapter_named(g.name).generation is g for g in GENERATIONS)
    assert ipc.adapter_named("27.1") is None


def test_the_session_reads_the_thread_with_its_adapters_layout(tmp_path):
    renamed = V11._replace(requests="pendingRequests")
    generation = IpcAdapter(G26_9XX._replace(name="renamed", layout=renamed))
    endpoint = Endpoint(kind="test", path=str(tmp_path / "ipc.sock"))
    # Undecided, the mirror reads with the first candidate's layout until the owner's answer decides.
    assert ThreadSession(THREAD, endpoint=endpoint).mirror.layout is ipc.ADAPTERS[0].LAYOUT
    session = ThreadSession(THREAD, endpoint=endpoint, adapter=generation)
    assert session.mirror.layout is renamed
    state = {"threadRuntimeStatus": {"type": "idle"}, "turns": [], "pendingRequests": [{"id": "r"}]}
    session.mirror.load_snapshot(state, 1)
    assert session.mirror.busy_reason == "pending_requests" and session.mirror.layout_problem is None
