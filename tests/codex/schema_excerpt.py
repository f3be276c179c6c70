"""Builds the small schema excerpt stored in ``fixtures/schema/`` from a full generated schema.

The excerpt keeps, in each checked file, only the message variants for the methods rekall checks
and the definitions they reach through ``$ref``. A codex-marked test rebuilds it from the real
binary and compares, so the stored copy cannot silently go stale.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from rekall.codex.schema_checks import NOTIFICATIONS_FILE, REQUESTS_FILE
from tests.support.pinned import PINNED_VERSION

EXCERPT_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "schema" / f"codex-{PINNED_VERSION}"
KEPT_METHODS = {
    REQUESTS_FILE: ("thread/compact/start", "turn/start"),
    NOTIFICATIONS_FILE: ("item/started", "item/completed", "thread/tokenUsage/updated"),
}


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            found.add(ref.removeprefix("#/definitions/"))
        for value in node.values():
            found |= _refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def excerpt(document: dict[str, Any], methods: tuple[str, ...]) -> dict[str, Any]:
    out = copy.deepcopy(document)
    out["oneOf"] = [v for v in document["oneOf"] if v["properties"]["method"].get("enum", [None])[0] in methods]
    keep: set[str] = set()
    todo = _refs(out["oneOf"])
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo |= _refs(document["definitions"][name])
    out["definitions"] = {k: v for k, v in document["definitions"].items() if k in keep}
    return out


def build_excerpt(schema_dir: Path) -> dict[str, dict[str, Any]]:
    return {name: excerpt(json.loads((schema_dir / name).read_text()), methods)
            for name, methods in KEPT_METHODS.items()}


def write_excerpt(schema_dir: Path, target: Path = EXCERPT_DIR) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name, document in build_excerpt(schema_dir).items():
        (target / name).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
