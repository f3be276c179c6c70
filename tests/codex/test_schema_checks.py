"""The public-schema checks, on the stored excerpt of the real 0.171.0 schema and drifted copies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from drift import DRIFT, NOTIFICATIONS, REQUESTS, edit
from schema_excerpt import EXCERPT_DIR

from rekall.codex.schema import check_schema_dir
from rekall.codex.schema_checks import CHECKS, overall_verdict, run_checks

ALL_CHECKS = {name for name, _ in CHECKS}


@pytest.fixture
def excerpt(tmp_path: Path) -> Path:
    copy = tmp_path / "schema"
    shutil.copytree(EXCERPT_DIR, copy)
    return copy


def failed(schema_dir: Path) -> set[str]:
    return {c.name for c in check_schema_dir(schema_dir) if not c.passed}


def test_the_stored_excerpt_passes_every_check_and_locates_each(excerpt: Path) -> None:
    checks = check_schema_dir(excerpt)
    assert {c.name for c in checks} == ALL_CHECKS
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert overall_verdict(checks) == "compatible"
    by_name = {c.name: c for c in checks}
    compaction = by_name["item_started.context_compaction"]
    assert compaction.file == NOTIFICATIONS and compaction.pointer.startswith("/definitions/ThreadItem/oneOf/")
    assert (by_name["thread_compact_start.params"].file, by_name["thread_compact_start.params"].pointer) == (
        REQUESTS, "/definitions/ThreadCompactStartParams")


@pytest.mark.parametrize("drift", sorted(DRIFT))
def test_each_drift_fails_exactly_the_checks_it_breaks(excerpt: Path, drift: str) -> None:
    mutate, expected = DRIFT[drift]
    mutate(excerpt)
    checks = check_schema_dir(excerpt)
    assert {c.name for c in checks if not c.passed} == expected
    assert overall_verdict(checks) == "incompatible"


def test_a_renamed_item_type_names_the_missing_variant_and_where_it_looked(excerpt: Path) -> None:
    DRIFT["renamed item type"][0](excerpt)
    check = next(c for c in check_schema_dir(excerpt) if c.name == "item_started.context_compaction")
    assert check.detail == "no item variant with type 'contextCompaction'"
    assert (check.file, check.pointer) == (NOTIFICATIONS, "/definitions/ThreadItem")


def test_an_extra_compact_parameter_is_named(excerpt: Path) -> None:
    DRIFT["extra required thread/compact/start parameter"][0](excerpt)
    check = next(c for c in check_schema_dir(excerpt) if c.name == "thread_compact_start.params")
    assert "also requires mode" in check.detail


def test_chains_of_refs_are_followed_to_the_end(excerpt: Path) -> None:
    with edit(excerpt, NOTIFICATIONS) as doc:
        defs = doc["definitions"]
        union = defs["ThreadItem"]["oneOf"]
        index = next(i for i, v in enumerate(union) if v["properties"]["type"]["enum"] == ["contextCompaction"])
        defs["Hop2"] = union[index]
        defs["Hop1"] = {"$ref": "#/definitions/Hop2"}
        union[index] = {"$ref": "#/definitions/Hop1"}
        defs["ItemRef"] = {"$ref": "#/definitions/ThreadItem"}
        defs["ItemStartedNotification"]["properties"]["item"] = {"$ref": "#/definitions/ItemRef"}
    checks = {c.name: c for c in check_schema_dir(excerpt)}
    assert all(c.passed for c in checks.values())
    assert checks["item_started.context_compaction"].pointer == "/definitions/Hop2"


def test_a_variant_nested_in_unions_at_any_depth_is_found(excerpt: Path) -> None:
    with edit(excerpt, NOTIFICATIONS) as doc:
        union = doc["definitions"]["ThreadItem"]["oneOf"]
        index = next(i for i, v in enumerate(union) if v["properties"]["type"]["enum"] == ["contextCompaction"])
        union[index] = {"anyOf": [{"oneOf": [union[index]]}]}
    assert failed(excerpt) == set()


def test_required_names_split_across_allof_parts_count(excerpt: Path) -> None:
    with edit(excerpt, NOTIFICATIONS) as doc:
        params = doc["definitions"]["ItemStartedNotification"]
        doc["definitions"]["ItemStartedNotification"] = {
            "allOf": [
                {"properties": {k: v for k, v in params["properties"].items() if k != "item"}, "required": ["threadId", "turnId"]},
                {"properties": {"item": params["properties"]["item"]}, "required": ["item"]},
            ]
        }
    assert failed(excerpt) == set()


def test_a_ref_into_another_generated_file_is_resolved(excerpt: Path) -> None:
    with edit(excerpt, REQUESTS) as doc:
        params = doc["definitions"].pop("ThreadCompactStartParams")
        doc["definitions"]["ThreadCompactStartParams"] = {"$ref": "v2/ThreadCompactStartParams.json"}
    (excerpt / "v2").mkdir()
    (excerpt / "v2" / "ThreadCompactStartParams.json").write_text(json.dumps(params))
    check = next(c for c in check_schema_dir(excerpt) if c.name == "thread_compact_start.params")
    assert check.passed and (check.file, check.pointer) == ("v2/ThreadCompactStartParams.json", "")


def test_a_ref_cycle_fails_the_check_instead_of_looping(excerpt: Path) -> None:
    with edit(excerpt, NOTIFICATIONS) as doc:
        doc["definitions"]["LoopA"] = {"$ref": "#/definitions/LoopB"}
        doc["definitions"]["LoopB"] = {"$ref": "#/definitions/LoopA"}
        doc["definitions"]["ItemStartedNotification"]["properties"]["item"] = {"$ref": "#/definitions/LoopA"}
    check = next(c for c in check_schema_dir(excerpt) if c.name == "item_started.context_compaction")
    assert not check.passed and "cyclic $ref" in check.detail


def test_a_union_that_contains_itself_is_walked_once(excerpt: Path) -> None:
    with edit(excerpt, NOTIFICATIONS) as doc:
        doc["definitions"]["ThreadItem"]["oneOf"].insert(0, {"$ref": "#/definitions/ThreadItem"})
    assert failed(excerpt) == set()


@pytest.mark.parametrize(("ref", "detail"), [
    ("#/definitions/Nowhere", "points to nothing"),
    ("../outside.json#/x", "leaves the generated schema directory"),
    ("/etc/passwd", "leaves the generated schema directory"),
    ("Missing.json#/definitions/X", "Missing.json is missing"),
])
def test_a_bad_ref_fails_with_a_clear_detail(excerpt: Path, ref: str, detail: str) -> None:
    with edit(excerpt, REQUESTS) as doc:
        doc["definitions"]["ThreadCompactStartParams"] = {"$ref": ref}
    check = next(c for c in check_schema_dir(excerpt) if c.name == "thread_compact_start.params")
    assert not check.passed and detail in check.detail


def test_a_missing_schema_file_fails_every_check_that_needs_it(excerpt: Path) -> None:
    (excerpt / NOTIFICATIONS).unlink()
    assert failed(excerpt) == ALL_CHECKS - {"thread_compact_start.params", "turn_start.text_input"}


def test_a_duplicated_method_is_refused_rather_than_guessed(excerpt: Path) -> None:
    with edit(excerpt, REQUESTS) as doc:
        variant = next(v for v in doc["oneOf"] if v["properties"]["method"]["enum"] == ["thread/compact/start"])
        doc["oneOf"].append(variant)
    check = next(c for c in check_schema_dir(excerpt) if c.name == "thread_compact_start.params")
    assert not check.passed and "will not guess" in check.detail


def test_no_checks_means_incompatible() -> None:
    assert overall_verdict(()) == "incompatible"
    assert overall_verdict(run_checks({})) == "incompatible"


@pytest.mark.codex
def test_the_real_schema_passes_the_app_server_suite_and_a_drift_in_it_is_named(schema_copy: Path) -> None:
    assert all(check.passed for check in check_schema_dir(schema_copy, "app-server"))
    with edit(schema_copy, REQUESTS) as doc:
        resume = doc["definitions"]["ThreadResumeParams"]
        del resume["properties"]["excludeTurns"]
        doc["definitions"]["ThreadReadParams"]["required"].append("includeTurns")
    failed = {c.name: c.detail for c in check_schema_dir(schema_copy, "app-server") if not c.passed}
    assert failed == {"thread_resume.params": "property 'excludeTurns' is missing",
                      "thread_read.params": "thread/read now also requires includeTurns"}
    assert all(check.passed for check in check_schema_dir(schema_copy))  # the extension's suite does not use them


@pytest.mark.codex
def test_the_real_schema_offers_thread_inject_items_and_its_drift_is_named(schema_copy: Path) -> None:
    (check,) = [c for c in check_schema_dir(schema_copy, "app-server") if c.name == "thread_inject_items.params"]
    assert check.passed and "threadId and items" in check.detail
    with edit(schema_copy, REQUESTS) as doc:
        params = doc["definitions"]["ThreadInjectItemsParams"]
        params["properties"]["items"]["type"] = "string"
        params["required"].append("turnId")
    (check,) = [c for c in check_schema_dir(schema_copy, "app-server") if c.name == "thread_inject_items.params"]
    assert not check.passed and check.detail == "thread/inject_items now also requires turnId"
