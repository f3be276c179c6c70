"""The adapter contract is a typing.Protocol that mypy holds every adapter module to."""

from __future__ import annotations

import types
from pathlib import Path

import attrs
import pytest
from mypy import api as mypy_api

from rekall.adapters import v11
from rekall.adapters.session import ThreadSession
from rekall.thread import V11
from rekall.transports import Endpoint

THREAD = "019a0000-0000-7000-8000-000000000001"

REPO_ROOT = Path(__file__).resolve().parents[2]


def _check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, adapter_source: str) -> tuple[str, int]:
    """mypy's verdict on assigning the module ``adapter_source`` to an ``Adapter``."""
    (tmp_path / "candidate.py").write_text(adapter_source)
    (tmp_path / "check.py").write_text("import candidate\nfrom rekall.adapters.contract import Adapter\n\n"
                                       "ADAPTER: Adapter = candidate\n")
    monkeypatch.setenv("MYPYPATH", f"{REPO_ROOT}:{tmp_path}")
    out, err, status = mypy_api.run(["--config-file", str(tmp_path / "none.ini"), "--follow-imports=silent",
                                     "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                                     str(tmp_path / "check.py")])
    return out + err, status


@pytest.fixture
def v11_source() -> str:
    return (REPO_ROOT / "rekall" / "adapters" / "v11.py").read_text(encoding="utf-8")


def test_the_v11_module_satisfies_the_adapter_contract(tmp_path, monkeypatch, v11_source):
    (tmp_path / "none.ini").write_text("[mypy]\n")
    output, status = _check(tmp_path, monkeypatch, v11_source)
    assert status == 0, output


@pytest.mark.parametrize(("change", "why"), [
    (("LAYOUT = V11\n", ""), "a missing layout"),
    (("def compact_params(thread_id: str)", "def compact_params(thread_id: int)"), "another signature"),
])
def test_an_adapter_module_that_breaks_the_contract_fails_the_type_check(tmp_path, monkeypatch, v11_source,
                                                                         change, why):
    (tmp_path / "none.ini").write_text("[mypy]\n")
    old, new = change
    assert old in v11_source
    output, status = _check(tmp_path, monkeypatch, v11_source.replace(old, new))
    assert status == 1 and "Incompatible types in assignment" in output, why


def test_the_session_reads_the_thread_with_its_adapters_layout(tmp_path):
    renamed = attrs.evolve(V11, requests="pendingRequests")
    generation = types.SimpleNamespace(**{name: getattr(v11, name) for name in dir(v11)})
    generation.LAYOUT = renamed
    endpoint = Endpoint(kind="test", path=str(tmp_path / "ipc.sock"))
    assert ThreadSession(THREAD, endpoint=endpoint).mirror.layout is v11.LAYOUT is V11
    session = ThreadSession(THREAD, endpoint=endpoint, adapter=generation)  # type: ignore[arg-type]
    assert session.mirror.layout is renamed
    state = {"threadRuntimeStatus": {"type": "idle"}, "turns": [], "pendingRequests": [{"id": "r"}]}
    session.mirror.load_snapshot(state, 1)
    assert session.mirror.busy_reason == "pending_requests" and session.mirror.layout_problem is None
