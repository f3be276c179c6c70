"""Ids people type: a unique prefix resolves, and an id that is not one is described, never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from rekall.surfaces.cli import main

#: A credential pasted where an id belongs (the shape of a GitHub token; not a real one).
PASTED = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0EdCbA9"


@pytest.mark.parametrize("argv", [
    ["cancel", PASTED], ["cancel", "0199a5c2-2222-4000-8000-000000000002", "--thread", PASTED],
    ["explain", PASTED], ["status", PASTED], ["history", "--thread", PASTED], ["cancel", PASTED, "--json"],
    ["explain", "\x1b]0;" + PASTED + "\x07"],
])
def test_an_id_that_failed_validation_is_described_and_never_printed(argv, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("REKALL_JOBS_DIR", str(tmp_path / "jobs"))
    assert main(argv) == 2
    out, err = capsys.readouterr()
    shown = out + err
    assert "invalid_id" in shown or "must be a UUID" in shown, shown
    assert "a string of" in shown and "characters" in shown
    for fragment in (PASTED, PASTED[4:14], PASTED[-10:], "\x1b"):
        assert fragment not in shown
    assert not (tmp_path / "jobs").exists()
