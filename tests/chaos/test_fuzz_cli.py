"""Random command lines: every one ends with exit status 0, 1 or 2 and a message, never a traceback.

The verbs that start long-running servers (``mcp``, ``sim``, ``demo``) and the hidden
``worker`` are left out of the in-process fuzz; ``worker`` with bad ids runs as a real
process in tests/chaos/test_security.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rekall.surfaces.cli import main
from tests.chaos.ledger import LEDGER

pytestmark = pytest.mark.chaos

VERBS = ("probe", "schedule", "status", "cancel", "explain", "history", "states", "doctor", "--version", "--help",
         "-h", "bogus", "")
OPTIONS = ("--json", "--watch", "--thread", "--since", "--format", "--handoff", "--socket", "--backend", "-x", "--")


@pytest.fixture
def handoff_files(tmp_path: Path) -> list[str]:
    files = {"garbage.json": b"\xff\xfe{not json", "list.json": b"[1, 2]", "empty.json": b"",
             "secret.json": b'{"summary": "ghp_' + b"a1" * 20 + b'", "preserve": [], "discard": [], '
                            b'"nextStep": "", "resume": false}'}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return [str(tmp_path / name) for name in files] + [str(tmp_path / "missing.json"), str(tmp_path)]


#: Well-formed shapes per verb; ``U`` is filled with an id (good or bad), ``F`` with a file, ``V``
#: with any value. Half the examples use these, so that most runs get past argument parsing.
SHAPES = {
    "probe": [["U"], ["U", "--json"]],
    "schedule": [["U"], ["U", "--handoff", "F"], ["U", "--json", "--handoff", "F"]],
    "status": [["U"], ["U", "--json"], ["U", "--watch", "--json"]],
    "cancel": [["U", "--thread", "U"], ["U", "--thread", "U", "--json"]],
    "explain": [["U"], ["U", "--json"]],
    "history": [[], ["--thread", "U"], ["--since", "V"], ["--json", "--thread", "U"]],
    "states": [["--format", "V"], ["--json"]],
    "doctor": [[], ["--json"]],
}


def argv_strategy(files: list[str]) -> st.SearchStrategy[list[str]]:
    good = st.uuids().map(str)
    ids = st.one_of(good, good, good, st.sampled_from(["../x", "..", "/etc/passwd", "", "0199a5c2-\n"]))
    values = st.one_of(
        st.sampled_from(OPTIONS),
        ids,
        st.sampled_from(["é", "mermaid", "json", "markdown", "2026-01-01", "not-a-date", "scripted", "codex", *files]),
        st.text(max_size=30).filter(lambda t: "\x00" not in t),
    )
    fill = {"U": ids, "F": st.sampled_from(files), "V": values}
    shaped = st.sampled_from([(verb, shape) for verb, shapes in SHAPES.items() for shape in shapes]).flatmap(
        lambda pair: st.tuples(*(fill[t] if t in fill else st.just(t) for t in pair[1])).map(
            lambda rest, verb=pair[0]: [verb, *rest]))
    loose = st.builds(lambda verb, rest: [verb, *rest], st.sampled_from(VERBS), st.lists(values, max_size=5))
    return st.one_of(shaped, loose)


@given(data=st.data())
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_any_command_line_exits_0_1_or_2_without_a_traceback(data, handoff_files, capsys):
    argv = data.draw(argv_strategy(handoff_files))
    LEDGER.fault("random command line")
    status = main(argv)
    out, err = capsys.readouterr()
    assert status in (0, 1, 2), (argv, status, err[-2000:])
    assert "Traceback" not in out + err, (argv, err[-2000:])
    if status:
        assert err.strip() or out.strip(), f"{argv} failed silently"
    if "secret.json" in " ".join(argv):
        assert "a1a1a1a1" not in out + err  # the credential is named by kind, never echoed


def test_a_valid_uuid_that_names_nothing_is_a_clear_error(capsys):
    thread = str(uuid.uuid4())
    assert main(["explain", thread, "--json"]) == 1
    assert "no job or thread" in capsys.readouterr().out
