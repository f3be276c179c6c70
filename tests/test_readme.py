"""The README's reference sections say what the code does: verbs, tools, variables, doctor rows,
and the state diagram, each compared with its one source."""

from __future__ import annotations

import argparse
import asyncio
import re
import uuid
from pathlib import Path

from rekall.surfaces.cli import build_parser
from rekall.kernel.settings import SETTINGS
from rekall.usecases.doctor import diagnose
from rekall.states.render import render
from tests.pluginkit import REPO_ROOT, listed_tools, manifest_path, read_json

README = REPO_ROOT / "README.md"
#: The two commands CI and new contributors rely on (the "Set up" section).
SETUP_COMMANDS = (
    "    python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/rekall demo\n",
    "    scripts/test\n",
)


def readme() -> str:
    return README.read_text(encoding="utf-8")


def section(heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", readme(), re.MULTILINE | re.DOTALL)
    assert match, f"README has no '## {heading}' section"
    return match.group(1)


def first_column(text: str) -> list[str]:
    """The first code span of each table row (the header and rule rows have none)."""
    return re.findall(r"^\| `([^`]+)`", text, re.MULTILINE)


def test_the_set_up_commands_are_unchanged_and_come_first():
    setup = section("Set up")
    assert all(command in setup for command in SETUP_COMMANDS)
    assert readme().index("## Set up") < readme().index("## What rekall does")


def test_the_diagram_is_the_one_generated_from_the_transition_table():
    (diagram,) = re.findall(r"```mermaid\n(.*?)```", readme(), re.DOTALL)
    assert diagram == render("mermaid"), "regenerate it with `rekall states --format mermaid`"


def test_the_command_table_lists_every_public_verb_once():
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    public = {c.dest for c in subparsers._choices_actions if c.help != argparse.SUPPRESS}  # not `worker`
    documented = [row.split()[0] for row in first_column(section("Command line"))]
    assert sorted(documented) == sorted(public)


def test_the_tool_table_lists_the_four_tools_with_their_read_only_flag():
    rows = re.findall(r"^\| `(\w+)` \| (yes|no) \|", section("MCP tools"), re.MULTILINE)
    tools = listed_tools()
    assert dict(rows) == {name: "yes" if t["annotations"]["readOnlyHint"] else "no" for name, t in tools.items()}


def test_the_variable_table_is_what_the_plugin_forwards_plus_the_thread():
    text = section("Environment variables")
    documented = set(first_column(text)) | set(re.findall(r"\(legacy `(\w+)`\)", text))
    forwarded = set(read_json(manifest_path("mcpServers"))["mcpServers"]["rekall"]["env_vars"])
    assert documented == forwarded | {"CODEX_THREAD_ID"}


def test_every_numeric_setting_is_documented_with_its_default_and_range():
    rows = {row[3:].split("`")[0]: row for row in section("Environment variables").splitlines()
            if row.startswith("| `")}
    for setting in SETTINGS:
        row = rows[setting.name]
        assert f"at most {setting.maximum:g}." in row and row.endswith(f"| `{setting.default:g}` |"), row


def test_every_rekall_variable_the_code_reads_is_documented():
    package = REPO_ROOT / "rekall"
    used = {name for path in package.rglob("*.py") for name in re.findall(r"\bREKALL_[A-Z_]+\b", path.read_text())}
    missing = sorted(name for name in used if f"`{name}`" not in readme())
    assert not missing, f"document these in the README: {missing}"


def test_troubleshooting_has_one_row_per_doctor_check(tmp_path: Path):
    env = {"CODEX_HOME": str(tmp_path), "CODEX_THREAD_ID": str(uuid.uuid4()), "PATH": "",
           "REKALL_PIPE": str(tmp_path / "nobody-listens.sock"), "REKALL_JOBS_DIR": str(tmp_path / "jobs")}
    checks = [row.name for row in asyncio.run(diagnose(env)).rows]
    assert first_column(section("Troubleshooting")) == checks


def test_the_privacy_section_names_the_files_the_store_writes():
    text = section("Privacy")
    for name in ("<thread>.json", "<thread>.lock", ".handoff.json", ".journal.jsonl", ".log", ".cancel"):
        assert name in text
    assert "0700" in text and "0600" in text and "no network requests" in text


def test_the_troubleshooting_section_quotes_each_verdict_doctor_can_print():
    from rekall.usecases.doctor import Report, Row

    extension, terminal = "the VS Code extension", "terminal sessions on the shared app-server"
    text = section("Troubleshooting")
    for served in ((True, True), (True, False), (False, True), (False, False)):
        report = Report((Row.green("settings", "ok"),), ((extension, served[0]), (terminal, served[1])))
        assert f"    verdict: {report.answer}\n" in text, report.answer
    red = Report((Row("settings", "RED", "bad", "fix it"),), ((extension, True), (terminal, True)))
    assert red.answer.replace("settings", "ROW") in text
    assert "nothing: rekall is ready" in text and Report((), ((extension, False),)).next_step.startswith(
        "start `codex` in a terminal")
