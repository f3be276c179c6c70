from __future__ import annotations

import json
from pathlib import Path

import pytest

from rekall.kernel.errors import UsageError
from rekall.states import COMPACTION, DELIVERY, MACHINES, DeliveryState, JobState
from rekall.states.render import render

DOCS = Path(__file__).resolve().parents[2] / "docs" / "states.md"


def test_docs_states_md_is_the_current_markdown_rendering():
    assert DOCS.read_text(encoding="utf-8") == render("markdown"), (
        "docs/states.md is out of date: run `rekall states --format markdown > docs/states.md`")


def test_the_mermaid_diagram_carries_no_runtime_styling_and_is_stable():
    diagram = render("mermaid")
    assert diagram == render("mermaid")
    assert "classDef" not in diagram and "Class " not in diagram
    assert diagram.startswith("---\ntitle: Job lifecycle\n---\nstateDiagram-v2\n")
    assert "    [*] --> scheduled" in diagram and "    [*] --> pending" in diagram
    assert "  state compaction {" in diagram and "  state delivery {" in diagram


def test_the_mermaid_diagram_has_an_edge_per_row_and_source_labelled_with_its_guard():
    diagram = render("mermaid")
    edges = {}  # the library draws rows with the same source and destination as one edge, labels joined by " | "
    for line in diagram.splitlines():
        if " --> " in line and ": " in line:
            ends, labels = line.strip().split(": ", 1)
            edges[ends] = labels.split(" | ")
    for row in COMPACTION.rows + DELIVERY.rows:
        label = row.trigger + (f" [{row.guard_name}]" if row.guard else "")
        for source in row.source:
            assert label in edges[f"{source.value} --> {row.dest.value}"]


def test_the_markdown_names_every_trigger_guard_and_state():
    page = render("markdown")
    assert "```mermaid" in page and "## Transitions" in page
    for row in COMPACTION.rows + DELIVERY.rows:
        assert f"`{row.trigger}`" in page
        if row.guard:
            assert f"`{row.guard_name}`" in page
    for state in [*JobState, *DeliveryState]:
        assert f"- `{state.value}` (" in page
    for state in JobState:  # which machine owns each of the job's states
        assert f"- `{state.value}`: " in page
    assert "headroom_lost" in page  # the folded trigger is documented


def test_the_json_lists_states_transitions_and_evidence():
    data = json.loads(render("json"))
    assert [s["name"] for s in data["states"]] == [s.value for s in JobState]
    assert {s["name"]: s["owner"] for s in data["states"]}["injecting"].startswith("delivery")
    assert len(data["transitions"]) == len(COMPACTION.rows)  # the compaction machine's, as before the split
    assert [m["name"] for m in data["machines"]] == ["compaction", "delivery"]
    for machine, table in zip(data["machines"], MACHINES):
        assert machine["initial"] == table.initial.value
        assert [(t["trigger"], t["dest"]) for t in machine["transitions"]] == [(r.trigger, r.dest.value)
                                                                              for r in table.rows]
    assert {k["name"] for k in data["triggers"]["idle_stable"]["evidence"]} >= {"tokens", "boundaryFingerprint"}


def test_the_page_fits_80_columns_with_every_code_span_on_one_line():
    page = render("markdown")
    diagram = page[page.index("```mermaid"):page.index("```\n", page.index("```mermaid") + 3)]
    prose = page.replace(diagram, "")
    assert max(map(len, prose.splitlines())) <= 80  # the diagram's statements must stay whole lines: Mermaid
    assert all(line.count("`") % 2 == 0 for line in prose.splitlines() if not line.startswith("```"))


def test_an_unknown_format_is_a_usage_error():
    with pytest.raises(UsageError, match="svg"):
        render("svg")
