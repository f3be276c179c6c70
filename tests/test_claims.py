"""The README's claims about the project itself hold: what the tests assert, how headroom is
judged when the count before is unknown, and what the recorded transcripts are."""

from __future__ import annotations

import ast
import re
from rekall.surfaces.explain import describe_outcome
from rekall.states import check_headroom
from rekall.store import JobStore
from rekall.testing import FakeClock
from tests.jobkit import completed, idle, me, new_thread, run_lifecycle, schedule
from tests.pluginkit import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
ADAPTERS_DOC = (REPO_ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")

#: Names that hold a measured time: a test may check one is recorded (>= 0), never how long it was.
_TIMED = re.compile(r"(Ms\b|Ms['\"]|_ms\b|_s\b|duration|elapsed|monotonic|perf_counter|took)", re.IGNORECASE)


def _duration_thresholds(source: str, name: str) -> list[str]:
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            if not all(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in compare.ops):
                continue
            sides = [compare.left, *compare.comparators]
            timed = any(_TIMED.search(ast.unparse(side)) for side in sides)
            threshold = any(isinstance(s, ast.Constant) and isinstance(s.value, (int, float)) and s.value != 0
                            for s in sides)
            if timed and threshold:
                found.append(f"{name}:{node.lineno}: {ast.unparse(compare)}")
    return found


def test_no_test_asserts_how_long_something_took():
    assert "No test asserts how long something takes" in " ".join(README.split())
    offenders = [hit for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
                 for hit in _duration_thresholds(path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT)))]
    assert not offenders, "duration thresholds belong in bench/, not in tests:\n" + "\n".join(offenders)


def test_the_scan_finds_a_duration_threshold_and_allows_a_recorded_duration():
    source = "def t(x):\n    assert x['idleMs'] >= 300\n    assert x['resumeDelayMs'] >= 0\n"
    assert _duration_thresholds(source, "sample.py") == ["sample.py:2: x['idleMs'] >= 300"]


def test_with_the_count_before_unknown_only_the_sixty_percent_limit_is_checked_and_explain_says_so(
        store: JobStore, clock: FakeClock):
    readme = " ".join(README.split()).lower()
    assert "when the count before the request is unknown" in readme and "only the 60% limit can be checked" in readme
    assert check_headroom(50_000, 100_000, None).safe and not check_headroom(61_000, 100_000, None).safe
    thread = new_thread()
    job = schedule(store, thread).job_id
    with store.open_lifecycle(thread, job) as lifecycle:
        state = run_lifecycle(lifecycle, clock, [
            ("worker_started", me(job)), ("idle_stable", idle(None)),  # no telemetry when the request went out
            ("compaction_accepted", {"ownerId": "owner-1"}), ("compaction_completed", completed(30_000)),
            ("idle_stable", idle(31_000, handoffVerified=True)),
            ("handoff_delivered", {"turnId": "turn-9", "turnStatus": "inProgress"})])
    assert state.value == "resumed"
    status = store.read_status(thread)
    assert status.contextTokensBefore is None
    outcome = describe_outcome("resumed", status)
    assert "The token count before the request was unknown, so only the 60% limit was checked" in outcome


def test_the_recorded_transcripts_are_called_regression_transcripts_not_conformance():
    doc = " ".join(ADAPTERS_DOC.split())
    assert "regression transcripts" in doc and "recorded from rekall's own simulator" in doc
    assert "conformance test" not in doc.lower()


#: How the tests use each test dependency (the word that shows it in a test file).
_USED_AS = {"pytest": "import pytest", "pytest-mock": "mocker", "hypothesis": "hypothesis", "anyio": "anyio",
            "build": "build", "twine": "twine", "pipx": "pipx", "uv": "uv", "pyyaml": "yaml",
            "mypy": "mypy", "jsonschema": "import jsonschema", "detect-secrets": "detect_secrets"}


def test_every_declared_test_dependency_is_used_by_the_tests():
    import tomllib

    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    names = [re.split(r"[<>=!~ ;\[]", spec, maxsplit=1)[0].lower()
             for spec in declared["project"]["optional-dependencies"]["test"]]
    assert set(names) == set(_USED_AS), "a new test dependency: say here how the tests use it"
    sources = [path.read_text(encoding="utf-8") for path in (REPO_ROOT / "tests").rglob("*.py")
               if path.name != "test_claims.py"]
    unused = [name for name in names if not any(re.search(rf"\b{re.escape(_USED_AS[name])}\b", s) for s in sources)]
    assert not unused, f"declared but never used by a test: {unused}"


def test_every_text_that_says_which_terminal_sessions_rekall_reaches_counts_plain_codex_on_the_shared_app_server():
    import json

    from rekall.adapters.app_server.platform import OWN_APP_SERVER, SERVED_SESSIONS
    from rekall.surfaces.mcp_server import INSTRUCTIONS

    light = json.loads((REPO_ROOT / "rekall" / "surfaces" / "mcp_light.json").read_text(encoding="utf-8"))
    latest = light["versions"][light["latestHandshakeVersion"]]
    probe = next(t for t in latest["lists"]["tools/list"]["tools"] if t["name"] == "probe_compaction")
    texts = {"README.md": README, "docs/app-server.md": (REPO_ROOT / "docs" / "app-server.md").read_text("utf-8"),
             "SKILL.md": (REPO_ROOT / "plugins" / "rekall" / "skills" / "rekall" / "SKILL.md").read_text("utf-8"),
             "MCP instructions": INSTRUCTIONS, "probe_compaction": probe["description"],
             "doctor and errors": SERVED_SESSIONS + OWN_APP_SERVER}
    # What they said before codex-cli 0.171.0 was measured: a plain `codex` out of reach, whatever it runs on.
    retired = ("plain `codex` session runs its own app-server", "plain `codex` session in a terminal",
               "plain `codex` session cannot be reached", "plain `codex` session, rekall cannot reach",
               "plain `codex` terminal session")
    for name, text in texts.items():
        flat = " ".join(text.split())
        assert not [words for words in retired if words in flat], name
        assert "plain `codex`" in flat and "auto-start" in flat, name
