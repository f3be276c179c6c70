"""The skill stays in sync with what rekall really offers: its tools, states, fields and limits.

Names come from the running server's tool listing and from ``JobState``, never from a copy.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from rekall import __version__
from rekall.usecases import service
from rekall.kernel.errors import InvalidInput
from rekall.states import JobState
from rekall.states.rules import HEADROOM_LIMIT
from rekall.store.handoff import MAX_HANDOFF_BYTES, MAX_LIST_ITEMS, validate_handoff
from tests.pluginkit import front_matter, listed_tools, skill_file

#: Snake-case words built on "compaction" or "checkpoint": the shape of every rekall tool name.
TOOL_LIKE = re.compile(r"\b(?:[a-z]+_)+(?:compaction|checkpoint)(?:_[a-z]+)*\b|\bcompaction(?:_[a-z]+)+\b")
CODE_IDENTIFIER = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")


def skill() -> tuple[dict[str, Any], str]:
    return front_matter(skill_file())


def section(body: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``##`` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", body, re.MULTILINE | re.DOTALL)
    assert match, f"the skill has no '## {heading}' section"
    return match.group(1)


def schema_names(node: Any) -> set[str]:
    """Every property name anywhere in a JSON schema."""
    names: set[str] = set()
    if isinstance(node, dict):
        names.update(node.get("properties", {}))
        for value in node.values():
            names |= schema_names(value)
    elif isinstance(node, list):
        for value in node:
            names |= schema_names(value)
    return names


def state_rows(body: str) -> dict[str, str]:
    rows = re.findall(r"^\| `([a-z_]+)` \| (.+?) \|", section(body, "What each state means"), re.MULTILINE)
    return dict(rows)


def no_job_state(tmp_path) -> str:
    return service.status_reply("0199a5c2-7777-4000-8000-000000000007", env={"REKALL_JOBS_DIR": str(tmp_path)})["state"]


def test_the_front_matter_names_the_skill_says_when_to_use_it_and_carries_the_version():
    meta, body = skill()
    assert meta["name"] == skill_file().parent.name == "rekall"
    assert 0 < len(meta["description"]) <= 1024 and "compact" in meta["description"].lower()
    assert meta["metadata"]["version"] == __version__
    assert body.strip()


def test_every_tool_named_in_the_skill_exists_and_every_tool_is_named():
    _, body = skill()
    named = set(TOOL_LIKE.findall(body))
    assert named == set(listed_tools()), f"unknown: {named - set(listed_tools())}, missing: {set(listed_tools()) - named}"


def test_every_state_is_explained_once_and_no_other_state_is_named(tmp_path):
    _, body = skill()
    rows = state_rows(body)
    assert sorted(rows) == sorted(s.value for s in JobState)
    assert all(meaning.strip() for meaning in rows.values())
    for state in JobState:
        assert (rows[state.value].startswith("Terminal.")) == state.terminal, state.value
    assert f"`{no_job_state(tmp_path)}`" in section(body, "What each state means")


def test_every_name_in_code_is_one_rekall_really_uses(tmp_path):
    # Tool and field names, states, and any word the tool descriptions themselves use.
    vocabulary = {s.value for s in JobState} | {no_job_state(tmp_path)}
    for name, tool in listed_tools().items():
        vocabulary |= {name} | schema_names(tool["inputSchema"]) | schema_names(tool.get("outputSchema"))
        vocabulary |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", tool["description"]))
        vocabulary |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", json.dumps(tool["inputSchema"])))
    _, body = skill()
    unknown = set(CODE_IDENTIFIER.findall(body)) - vocabulary
    assert not unknown, f"the skill names things rekall does not have: {sorted(unknown)}"


def test_the_order_is_status_probe_schedule_finish_then_status_again():
    steps = re.findall(r"^\d+\. (.+)$", section(skill()[1], "The order"), re.MULTILINE)
    leading_tools = [re.match(r"`(\w+)`", step) for step in steps[:3]]
    assert [m and m.group(1) for m in leading_tools] == ["compaction_status", "probe_compaction", "schedule_compaction"]
    assert steps[3].startswith("Finish your turn")
    assert "compaction_status" in steps[4] and "later" in steps[4]


def test_the_skill_never_lets_the_agent_guess_a_thread():
    text = section(skill()[1], "The thread: never guess it")
    assert "CODEX_THREAD_ID" in text and "Never guess" in text
    assert "CODEX_THREAD_ID" in listed_tools()["compaction_status"]["inputSchema"]["properties"]["threadId"]["description"]


def test_the_handoff_fields_and_limits_are_the_ones_schedule_compaction_enforces():
    text = section(skill()[1], "Writing a good handoff")
    schema = listed_tools()["schedule_compaction"]["inputSchema"]
    handoff = next(d for d in schema["$defs"].values() if "nextStep" in d.get("properties", {}))
    fields = re.findall(r"^- `([A-Za-z]+)`:", text, re.MULTILINE)
    assert fields == list(handoff["properties"]) and sorted(fields) == sorted(handoff["required"])
    assert f"At most {MAX_LIST_ITEMS} non-empty" in text
    assert f"{MAX_HANDOFF_BYTES} UTF-8 bytes" in text
    assert f"{HEADROOM_LIMIT:.0%}" in section(skill()[1], "What each state means")


def test_the_example_handoff_is_accepted_by_rekall():
    (example,) = re.findall(r"```json\n(.*?)\n```", section(skill()[1], "Writing a good handoff"), re.DOTALL)
    handoff = json.loads(example)
    assert validate_handoff(handoff) == handoff
    assert handoff["resume"] is True and "stop" in handoff["nextStep"].lower()


@pytest.mark.parametrize("secret", ["sk-proj-Abcdefghij0123456789XYZabcdefghij", "ghp_" + "a1B2" * 9])
def test_the_skill_is_right_that_secrets_in_a_handoff_are_refused(secret: str):
    text = section(skill()[1], "Writing a good handoff")
    assert "rekall refuses values that look like credentials" in " ".join(text.split())
    (example,) = re.findall(r"```json\n(.*?)\n```", text, re.DOTALL)
    with pytest.raises(InvalidInput, match="looks like it contains"):
        validate_handoff({**json.loads(example), "summary": f"The key is {secret}"})
