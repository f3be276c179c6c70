"""Schema drift, made by editing a copy of a generated schema directory in place.

Each mutation is a small, realistic protocol change. They work on the real generated schema
and on the stored excerpt alike, because both use the real definition names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REQUESTS = "ClientRequest.json"
NOTIFICATIONS = "ServerNotification.json"


@contextmanager
def edit(schema_dir: Path, name: str) -> Iterator[dict[str, Any]]:
    path = schema_dir / name
    document = json.loads(path.read_text())
    yield document
    path.write_text(json.dumps(document))


def _is_compaction(variant: dict[str, Any]) -> bool:
    return variant.get("properties", {}).get("type", {}).get("enum") == ["contextCompaction"]


def remove_context_compaction(schema_dir: Path) -> None:
    with edit(schema_dir, NOTIFICATIONS) as doc:
        items = doc["definitions"]["ThreadItem"]
        items["oneOf"] = [v for v in items["oneOf"] if not _is_compaction(v)]


def rename_context_compaction(schema_dir: Path) -> None:
    with edit(schema_dir, NOTIFICATIONS) as doc:
        for variant in doc["definitions"]["ThreadItem"]["oneOf"]:
            if _is_compaction(variant):
                variant["properties"]["type"]["enum"] = ["compaction"]


def require_extra_compact_parameter(schema_dir: Path) -> None:
    with edit(schema_dir, REQUESTS) as doc:
        params = doc["definitions"]["ThreadCompactStartParams"]
        params["properties"]["mode"] = {"type": "string"}
        params["required"] = [*params["required"], "mode"]


def remove_item_completed(schema_dir: Path) -> None:
    with edit(schema_dir, NOTIFICATIONS) as doc:
        doc["oneOf"] = [v for v in doc["oneOf"] if v["properties"]["method"]["enum"] != ["item/completed"]]


def stop_requiring_turn_id(schema_dir: Path) -> None:
    with edit(schema_dir, NOTIFICATIONS) as doc:
        params = doc["definitions"]["ItemStartedNotification"]
        params["required"] = [r for r in params["required"] if r != "turnId"]


def make_compaction_id_numeric(schema_dir: Path) -> None:
    with edit(schema_dir, NOTIFICATIONS) as doc:
        for variant in doc["definitions"]["ThreadItem"]["oneOf"]:
            if _is_compaction(variant):
                variant["properties"]["id"] = {"type": "integer"}


def remove_total_tokens(schema_dir: Path) -> None:
    with edit(schema_dir, NOTIFICATIONS) as doc:
        breakdown = doc["definitions"]["TokenUsageBreakdown"]
        del breakdown["properties"]["totalTokens"]
        breakdown["required"] = [r for r in breakdown["required"] if r != "totalTokens"]


def remove_model_context_window(schema_dir: Path) -> None:
    with edit(schema_dir, NOTIFICATIONS) as doc:
        del doc["definitions"]["ThreadTokenUsage"]["properties"]["modelContextWindow"]


def remove_text_input(schema_dir: Path) -> None:
    with edit(schema_dir, REQUESTS) as doc:
        union = doc["definitions"]["UserInput"]
        union["oneOf"] = [v for v in union["oneOf"] if v.get("properties", {}).get("type", {}).get("enum") != ["text"]]


def require_extra_turn_parameter(schema_dir: Path) -> None:
    with edit(schema_dir, REQUESTS) as doc:
        doc["definitions"]["TurnStartParams"]["required"].append("model")


Mutation = Callable[[Path], None]

#: mutation → the checks it must fail (every other check must still pass).
DRIFT: dict[str, tuple[Mutation, set[str]]] = {
    "removed contextCompaction": (remove_context_compaction,
                                  {"item_started.context_compaction", "item_completed.context_compaction"}),
    "renamed item type": (rename_context_compaction,
                          {"item_started.context_compaction", "item_completed.context_compaction"}),
    "extra required thread/compact/start parameter": (require_extra_compact_parameter, {"thread_compact_start.params"}),
    "removed item/completed": (remove_item_completed, {"item_completed.params", "item_completed.context_compaction"}),
    "turnId no longer required": (stop_requiring_turn_id, {"item_started.params"}),
    "numeric compaction id": (make_compaction_id_numeric,
                              {"item_started.context_compaction", "item_completed.context_compaction"}),
    "removed last.totalTokens": (remove_total_tokens, {"thread_token_usage.fields"}),
    "removed modelContextWindow": (remove_model_context_window, {"thread_token_usage.fields"}),
    "removed text input": (remove_text_input, {"turn_start.text_input"}),
    "extra required turn/start parameter": (require_extra_turn_parameter, {"turn_start.text_input"}),
}
