"""Schema generation, the compatibility report and its cache: on the real binary and on stand-ins."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from drift import DRIFT
from schema_excerpt import EXCERPT_DIR, build_excerpt

from tests.support.pinned import PINNED_VERSION
from rekall.codex.schema import (
    SchemaGenerationFailed,
    SchemaIncompatible,
    SchemaReport,
    check_compatibility,
    check_schema_dir,
    default_cache_dir,
)

REQUIRED_DRIFT = ("removed contextCompaction", "renamed item type", "extra required thread/compact/start parameter")


def stand_in(tmp_path: Path, *, generate: str = "copy", version: str = "codex-cli 9.9.9") -> tuple[Path, Path]:
    """A shell script that behaves like codex for --version and generate-json-schema.

    Returns the script and a log file with one line per schema generation.
    """
    log = tmp_path / "generations.log"
    actions = {
        "copy": f'cp -R "{EXCERPT_DIR}/." "$4"',
        "fail": 'echo "error: unknown subcommand" >&2; exit 3',
        "hang": "exec sleep 60",
        "drift": f'cp -R "{EXCERPT_DIR}/." "$4" && sed -i "s/\\"contextCompaction\\"/\\"compaction\\"/" "$4/ServerNotification.json"',
    }
    script = tmp_path / "codex"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo "{version}"; exit 0; fi\n'
        f'echo "$*" >> "{log}"\n'
        f"{actions[generate]}\n"
    )
    script.chmod(0o700)
    return script, log


def generations(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


# --- stand-in binary ---------------------------------------------------------------------


def test_a_report_is_generated_once_and_then_served_from_the_cache(tmp_path: Path) -> None:
    binary, log = stand_in(tmp_path)
    cache = tmp_path / "cache"
    first = check_compatibility(binary, cache_dir=cache)
    second = check_compatibility(binary, cache_dir=cache)
    assert (first.verdict, first.from_cache) == ("compatible", False)
    assert (second.verdict, second.from_cache) == ("compatible", True)
    assert second.checks == first.checks and second.binary == first.binary
    assert first.binary.version == "9.9.9"
    assert generations(log) == 1


def test_without_a_cache_dir_every_check_generates(tmp_path: Path) -> None:
    binary, log = stand_in(tmp_path)
    check_compatibility(binary, cache_dir=None)
    assert not check_compatibility(binary, cache_dir=None).from_cache
    assert generations(log) == 2


def test_a_changed_binary_misses_the_cache(tmp_path: Path) -> None:
    binary, log = stand_in(tmp_path)
    cache = tmp_path / "cache"
    check_compatibility(binary, cache_dir=cache)
    info = binary.stat()
    os.utime(binary, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    assert not check_compatibility(binary, cache_dir=cache).from_cache
    binary.write_text(binary.read_text().replace("9.9.9", "9.9.10"))
    assert check_compatibility(binary, cache_dir=cache).binary.version == "9.9.10"
    assert generations(log) == 3


def test_the_cache_is_private(tmp_path: Path) -> None:
    binary, _ = stand_in(tmp_path)
    cache = tmp_path / "deep" / "cache"
    check_compatibility(binary, cache_dir=cache)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    files = list(cache.iterdir())
    assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600


def test_a_shared_cache_dir_is_refused(tmp_path: Path) -> None:
    binary, _ = stand_in(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    cache.chmod(0o755)
    with pytest.raises(Exception) as caught:
        check_compatibility(binary, cache_dir=cache)
    assert getattr(caught.value, "code", None) == "schema_cache_insecure"
    assert "chmod 700" in (caught.value.hint or "")


@pytest.mark.parametrize("content", ["{broken", json.dumps({"format": 1, "report": {"status": "compatible"}}),
                                     json.dumps({"format": 1, "report": {}, "extra": True})])
def test_a_corrupt_cache_file_is_ignored_and_replaced(tmp_path: Path, content: str) -> None:
    binary, log = stand_in(tmp_path)
    cache = tmp_path / "cache"
    check_compatibility(binary, cache_dir=cache)
    (cache_file,) = cache.iterdir()
    cache_file.write_text(content)
    report = check_compatibility(binary, cache_dir=cache)
    assert (report.verdict, report.from_cache) == ("compatible", False)
    assert check_compatibility(binary, cache_dir=cache).from_cache
    assert generations(log) == 2


def test_a_cache_entry_for_another_identity_is_not_trusted(tmp_path: Path) -> None:
    binary, log = stand_in(tmp_path)
    cache = tmp_path / "cache"
    report = check_compatibility(binary, cache_dir=cache)
    (cache_file,) = cache.iterdir()
    record = json.loads(cache_file.read_text())
    record["report"]["binary"]["version"] = "0.0.1"
    cache_file.write_text(json.dumps(record))
    assert not check_compatibility(binary, cache_dir=cache).from_cache
    assert report.binary.version == "9.9.9" and generations(log) == 2


def test_an_incompatible_result_is_cached_and_raises_naming_the_checks(tmp_path: Path) -> None:
    binary, log = stand_in(tmp_path, generate="drift")
    cache = tmp_path / "cache"
    check_compatibility(binary, cache_dir=cache)
    report = check_compatibility(binary, cache_dir=cache)
    assert (report.verdict, report.from_cache, generations(log)) == ("incompatible", True, 1)
    assert {c.name for c in report.failed} == {"item_started.context_compaction", "item_completed.context_compaction"}
    with pytest.raises(SchemaIncompatible) as caught:
        report.raise_unless_compatible()
    assert "item_started.context_compaction" in caught.value.message
    assert "ServerNotification.json#/definitions/ThreadItem" in caught.value.message


def test_a_failing_generator_reports_its_stderr_and_leaves_no_directory(tmp_path: Path) -> None:
    binary, _ = stand_in(tmp_path, generate="fail")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(SchemaGenerationFailed) as caught:
        check_compatibility(binary, cache_dir=tmp_path / "cache", tmp_root=scratch)
    assert "exit status 3" in caught.value.message and "unknown subcommand" in caught.value.message
    assert list(scratch.iterdir()) == []
    assert list((tmp_path / "cache").iterdir()) == []  # failures are never cached


def test_a_hanging_generator_is_killed_at_the_timeout_and_leaves_no_directory(tmp_path: Path) -> None:
    binary, _ = stand_in(tmp_path, generate="hang")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(SchemaGenerationFailed) as caught:
        check_compatibility(binary, cache_dir=None, timeout_s=0.5, tmp_root=scratch)
    assert caught.value.code == "codex_schema_timeout"
    assert list(scratch.iterdir()) == []


def test_a_successful_generation_also_leaves_no_directory(tmp_path: Path) -> None:
    binary, _ = stand_in(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    check_compatibility(binary, cache_dir=None, tmp_root=scratch)
    assert list(scratch.iterdir()) == []


def test_a_binary_without_a_version_is_refused(tmp_path: Path) -> None:
    binary, _ = stand_in(tmp_path, version="hello")
    with pytest.raises(SchemaGenerationFailed) as caught:
        check_compatibility(binary, cache_dir=None)
    assert "printed no version" in caught.value.message


def test_a_missing_binary_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SchemaGenerationFailed) as caught:
        check_compatibility(tmp_path / "nope", cache_dir=None)
    assert str(tmp_path / "nope") in caught.value.message


def test_the_report_round_trips_through_its_json_form(tmp_path: Path) -> None:
    binary, _ = stand_in(tmp_path)
    report = check_compatibility(binary, cache_dir=None)
    data = json.loads(json.dumps(report.to_json()))
    assert data["status"] == "compatible" and data["from_cache"] is False
    assert {"name", "passed", "detail", "file", "pointer"} == set(data["checks"][0])
    assert SchemaReport.from_json(data) == report


def test_the_default_cache_lives_under_codex_home(tmp_path: Path) -> None:
    assert default_cache_dir({"CODEX_HOME": str(tmp_path)}) == tmp_path / "tools" / "rekall" / "schema-cache"
    assert default_cache_dir({}) == Path.home() / ".codex" / "tools" / "rekall" / "schema-cache"


# --- the real binary ---------------------------------------------------------------------


@pytest.mark.codex
def test_the_real_binary_is_compatible_and_its_second_check_is_cached(codex_binary: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    report = check_compatibility(codex_binary, cache_dir=cache, timeout_s=60)
    assert report.verdict == "compatible", report.failed
    assert not report.from_cache and report.binary.realpath == os.path.realpath(codex_binary)
    again = check_compatibility(codex_binary, cache_dir=cache, timeout_s=60)
    assert again.from_cache and again.checks == report.checks


@pytest.mark.codex
@pytest.mark.parametrize("drift", REQUIRED_DRIFT + tuple(sorted(set(DRIFT) - set(REQUIRED_DRIFT))))
def test_drift_in_a_copy_of_the_real_schema_is_a_clear_incompatibility(schema_copy: Path, drift: str) -> None:
    mutate, expected = DRIFT[drift]
    mutate(schema_copy)
    failures = {c.name: c for c in check_schema_dir(schema_copy) if not c.passed}
    assert set(failures) == expected
    assert all(c.detail and c.file and (c.pointer == "" or c.pointer.startswith("/")) for c in failures.values())


@pytest.mark.codex
def test_the_stored_excerpt_is_what_the_pinned_binary_generates(codex_binary: Path, real_schema_dir: Path) -> None:
    from rekall.codex.schema import binary_identity

    if binary_identity(codex_binary).version != PINNED_VERSION:
        pytest.skip(f"the excerpt is for Codex {PINNED_VERSION}; this binary is another version")
    stored = {p.name: json.loads(p.read_text()) for p in EXCERPT_DIR.glob("*.json")}
    assert stored == build_excerpt(real_schema_dir), (
        "fixtures/schema is stale: regenerate it with tests/codex/schema_excerpt.write_excerpt")


@pytest.mark.codex
def test_the_pinned_app_server_has_no_word_for_whether_any_client_watches_a_thread(real_schema_dir: Path) -> None:
    """README, "Nobody watching": the public protocol never says that a client is attached to a
    thread, so a continuation is started whether or not anyone sees it."""
    notifications = [v["properties"]["method"]["enum"][0]
                     for v in json.loads((real_schema_dir / "ServerNotification.json").read_text())["oneOf"]]
    about_clients = [m for m in notifications if any(w in m.lower() for w in ("subscri", "client", "connect",
                                                                              "presence", "watch", "viewer", "attach"))]
    # An attachment is a file kept with the thread; an environment is where its commands run.
    assert about_clients == ["thread/attachment/updated", "thread/environment/connected",
                             "thread/environment/disconnected"]
    both = json.loads((real_schema_dir / "codex_app_server_protocol.v2.schemas.json").read_text())["definitions"]
    assert not [f for f in both["Thread"]["properties"] if any(w in f.lower() for w in ("subscri", "client", "viewer"))]
    assert both["ThreadStatus"] and "subscri" not in json.dumps(both["ThreadStatus"]).lower()
    # Unsubscribing answers for the caller alone; the loaded list names threads, not who holds them.
    assert set(both["ThreadUnsubscribeStatus"]["enum"]) == {"notLoaded", "notSubscribed", "unsubscribed"}
    loaded = json.loads((real_schema_dir / "v2" / "ThreadLoadedListResponse.json").read_text())
    assert set(loaded["properties"]) == {"data", "nextCursor"}
