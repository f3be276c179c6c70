"""The adapter contract is a typing.Protocol that mypy holds the shared adapter to."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api as mypy_api

from rekall.adapters.extension import registry
from rekall.adapters.extension.generations import G26_9XX
from rekall.adapters.extension.ipc import IpcAdapter
from rekall.adapters.extension.session import ThreadSession
from rekall.thread import V11
from rekall.transports import Endpoint

THREAD = "019a0000-0000-7000-8000-000000000001"

REPO_ROOT = Path(__file__).resolve().parents[2]


def _check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, adapter_source: str) -> tuple[str, int]:
    """mypy's verdict on assigning ``IpcAdapter(...)`` from the module ``adapter_source`` to an ``Adapter``."""
    (tmp_path / "none.ini").write_text("[mypy]\n")
    (tmp_path / "candidate.py").write_text(adapter_source)
    (tmp_path / "check.py").write_text("import candidate\nfrom rekall.adapters.extension.contract import Adapter\n"
                                       "from rekall.adapters.extension.generations import G26_9XX\n\n"
                                       "ADAPTER: Adapter = candidate.IpcAdapter(G26_9XX)\n")
    monkeypatch.setenv("MYPYPATH", f"{REPO_ROOT}:{tmp_path}")
    out, err, status = mypy_api.run(["--config-file", str(tmp_path / "none.ini"), "--follow-imports=silent",
                                     "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                                     str(tmp_path / "check.py")])
    return out + err, status


@pytest.fixture
def ipc_source() -> str:
    return (REPO_ROOT / "rekall" / "adapters" / "extension" / "ipc.py").read_text(encoding="utf-8")


def test_the_shared_adapter_satisfies_the_adapter_contract(tmp_path, monkeypatch, ipc_source):
    output, status = _check(tmp_path, monkeypatch, ipc_source)
    assert status == 0, output


@pytest.mark.parametrize(("change", "why"), [
    (("        self.LAYOUT: Layout = generation.layout\n", ""), "a missing layout"),
    (("def compact_params(self, thread_id: str)", "def compact_params(self, thread_id: int)"), "another signature"),
])
def test_an_adapter_that_breaks_the_contract_fails_the_type_check(tmp_path, monkeypatch, ipc_source, change, why):
    old, new = change
    assert old in ipc_source
    output, status = _check(tmp_path, monkeypatch, ipc_source.replace(old, new))
    assert status == 1 and "Incompatible types in assignment" in output, why


def test_every_known_generation_gets_the_shared_adapter():
    assert [a.NAME for a in registry.ADAPTERS] == ["26.9xx", "26.721"]
    assert all(isinstance(a, IpcAdapter) for a in registry.ADAPTERS)


def test_the_session_reads_the_thread_with_its_adapters_layout(tmp_path):
    renamed = V11._replace(requests="pendingRequests")
    generation = IpcAdapter(G26_9XX._replace(name="renamed", layout=renamed))
    endpoint = Endpoint(kind="test", path=str(tmp_path / "ipc.sock"))
    assert ThreadSession(THREAD, endpoint=endpoint).mirror.layout is V11
    session = ThreadSession(THREAD, endpoint=endpoint, adapter=generation)
    assert session.mirror.layout is renamed
    state = {"threadRuntimeStatus": {"type": "idle"}, "turns": [], "pendingRequests": [{"id": "r"}]}
    session.mirror.load_snapshot(state, 1)
    assert session.mirror.busy_reason == "pending_requests" and session.mirror.layout_problem is None
