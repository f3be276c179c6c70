"""Checks on the public app-server JSON schema that rekall's compaction lifecycle relies on.

rekall drives the extension over its private IPC, but the extension relays the public
app-server protocol. When a Codex release changes that protocol in the places listed below,
the private relay has almost certainly changed too, so the public schema is our early warning:

- ``item/started`` and ``item/completed`` require ``threadId``, ``turnId`` and ``item``, and the
  item union has a ``contextCompaction`` variant with a required string ``id``;
- ``thread/compact/start`` requires ``threadId`` and nothing else;
- ``thread/tokenUsage/updated`` carries ``tokenUsage.last.totalTokens`` and
  ``tokenUsage.modelContextWindow``;
- ``turn/start`` accepts a text input and requires nothing beyond ``threadId`` and ``input``.

The shared app-server platform also calls and reads more of the protocol; its suite
(:data:`APP_SERVER_CHECKS`, run after these against the server's binary) checks
``thread/loaded/list``, ``thread/read``, ``thread/turns/list``, ``thread/resume`` (``excludeTurns``),
``turn/start``'s ``clientUserMessageId``, ``thread/inject_items`` (how the handoff is delivered
where no continuation runs), ``thread/status/changed`` and ``serverRequest/resolved``.

``$ref``s are resolved fully (chains of references, ``oneOf``/``anyOf`` unions nested at any
depth, ``allOf`` compositions), local to a file or across files of the generated directory, with
cycles detected instead of followed. Each check reports where it looked: the file and JSON
pointer of the decisive node. Extra fields and extra variants are always allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import attrs

REQUESTS_FILE = "ClientRequest.json"
NOTIFICATIONS_FILE = "ServerNotification.json"


@attrs.frozen
class SchemaCheck:
    """One named check. ``file`` and ``pointer`` locate the node that decided it."""

    name: str
    passed: bool
    detail: str
    file: str
    pointer: str


@attrs.frozen
class Node:
    file: str
    pointer: str
    value: Any

    def at(self, *keys: str | int) -> Node:
        value, pointer = self.value, self.pointer
        for key in keys:
            value = value[key]
            pointer += "/" + str(key).replace("~", "~0").replace("/", "~1")
        return Node(self.file, pointer, value)


class SchemaProblem(Exception):
    """A check cannot pass; ``node`` is where the search ended."""

    def __init__(self, detail: str, node: Node) -> None:
        super().__init__(detail)
        self.detail = detail
        self.node = node


def _decode_pointer(pointer: str) -> list[str]:
    if pointer in ("", "/"):
        return []
    if not pointer.startswith("/"):
        raise ValueError(pointer)
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


class SchemaDocuments:
    """The generated schema files, by file name, with full ``$ref`` resolution."""

    def __init__(self, documents: Mapping[str, Any]) -> None:
        self.documents = documents  # may be lazy: only the files a check reaches are read

    def root(self, file: str) -> Node:
        if file not in self.documents:
            raise SchemaProblem(f"{file} is missing from the generated schema", Node(file, "", None))
        return Node(file, "", self.documents[file])

    def _target(self, ref: str, origin: Node) -> Node:
        file_part, _, fragment = ref.partition("#")
        file = file_part or origin.file
        if file_part and (file_part.startswith(("/", "\\")) or ".." in file_part or ":" in file_part):
            raise SchemaProblem(f"$ref {ref!r} leaves the generated schema directory", origin)
        node = self.root(file)
        try:
            for key in _decode_pointer(fragment):
                node = node.at(int(key) if isinstance(node.value, list) else key)
        except (KeyError, IndexError, ValueError, TypeError):
            raise SchemaProblem(f"$ref {ref!r} points to nothing", origin) from None
        return node

    def resolve(self, node: Node) -> Node:
        """Follow ``$ref`` until a node without one; a cycle is a :class:`SchemaProblem`."""
        seen: set[tuple[str, str]] = set()
        while isinstance(node.value, dict) and isinstance(node.value.get("$ref"), str):
            if (node.file, node.pointer) in seen:
                raise SchemaProblem(f"cyclic $ref {node.value['$ref']!r}", node)
            seen.add((node.file, node.pointer))
            node = self._target(node.value["$ref"], node)
        return node

    def variants(self, node: Node) -> Iterator[Node]:
        """Every resolved alternative reachable through nested ``oneOf``/``anyOf`` unions."""
        seen: set[tuple[str, str]] = set()

        def walk(current: Node) -> Iterator[Node]:
            current = self.resolve(current)
            if (current.file, current.pointer) in seen or not isinstance(current.value, dict):
                return
            seen.add((current.file, current.pointer))
            yield current
            for keyword in ("oneOf", "anyOf"):
                for index in range(len(current.value.get(keyword) or ())):
                    yield from walk(current.at(keyword, index))

        yield from walk(node)

    def object_view(self, node: Node) -> tuple[dict[str, Node], set[str]]:
        """Properties and required names of an object schema, merged across ``allOf`` parts."""
        properties: dict[str, Node] = {}
        required: set[str] = set()
        seen: set[tuple[str, str]] = set()

        def merge(current: Node) -> None:
            current = self.resolve(current)
            if (current.file, current.pointer) in seen or not isinstance(current.value, dict):
                return
            seen.add((current.file, current.pointer))
            for name in current.value.get("properties") or {}:
                properties.setdefault(name, current.at("properties", name))
            required.update(r for r in current.value.get("required") or () if isinstance(r, str))
            for index in range(len(current.value.get("allOf") or ())):
                merge(current.at("allOf", index))

        merge(node)
        return properties, required

    def tag_values(self, node: Node) -> set[Any]:
        value = self.resolve(node).value
        if not isinstance(value, dict):
            return set()
        tags = set(value.get("enum") or ()) if isinstance(value.get("enum"), list) else set()
        if "const" in value:
            tags.add(value["const"])
        return {t for t in tags if isinstance(t, str)}

    def tagged(self, union: Node, key: str, tag: str) -> list[Node]:
        """The variants of ``union`` whose property ``key`` is the constant ``tag``."""
        found = []
        for variant in self.variants(union):
            properties, _ = self.object_view(variant)
            if key in properties and tag in self.tag_values(properties[key]):
                found.append(variant)
        return found

    def allows_type(self, node: Node, json_type: str) -> bool:
        """Whether any alternative of ``node`` declares ``json_type`` (alone or in a type list)."""
        for variant in self.variants(node):
            declared = variant.value.get("type")
            if declared == json_type or (isinstance(declared, list) and json_type in declared):
                return True
        return False

    # --- helpers for the checks ----------------------------------------------------------

    def one_tagged(self, union: Node, key: str, tag: str, what: str) -> Node:
        found = self.tagged(union, key, tag)
        if not found:
            raise SchemaProblem(f"no {what} with {key} {tag!r}", self.resolve(union))
        if len(found) > 1:
            raise SchemaProblem(f"{len(found)} {what}s with {key} {tag!r}; rekall will not guess which applies",
                                self.resolve(union))
        return found[0]

    def property(self, node: Node, name: str, *, required: bool = True) -> Node:
        properties, required_names = self.object_view(node)
        if name not in properties:
            raise SchemaProblem(f"property {name!r} is missing", self.resolve(node))
        if required and name not in required_names:
            raise SchemaProblem(f"property {name!r} is no longer required", self.resolve(node))
        return properties[name]

    def method_params(self, file: str, method: str) -> Node:
        kind = "request" if file == REQUESTS_FILE else "notification"
        message = self.one_tagged(self.root(file), "method", method, kind)
        return self.property(message, "params")


# --- the checks -------------------------------------------------------------------------

CheckResult = tuple[str, Node]
CheckFn = Callable[[SchemaDocuments], CheckResult]


def _item_lifecycle(method: str) -> tuple[CheckFn, CheckFn]:
    def params(docs: SchemaDocuments) -> CheckResult:
        node = docs.method_params(NOTIFICATIONS_FILE, method)
        _, required = docs.object_view(node)
        missing = {"threadId", "turnId", "item"} - required
        if missing:
            raise SchemaProblem(f"{method} params no longer require {', '.join(sorted(missing))}", docs.resolve(node))
        return f"{method} params require threadId, turnId and item", docs.resolve(node)

    def compaction(docs: SchemaDocuments) -> CheckResult:
        item = docs.property(docs.method_params(NOTIFICATIONS_FILE, method), "item")
        variant = docs.one_tagged(item, "type", "contextCompaction", "item variant")
        id_node = docs.property(variant, "id")
        if not docs.allows_type(id_node, "string"):
            raise SchemaProblem("contextCompaction id is not a string", docs.resolve(id_node))
        return f"{method} item union has contextCompaction with a required string id", variant

    return params, compaction


def _compact_start(docs: SchemaDocuments) -> CheckResult:
    params = docs.method_params(REQUESTS_FILE, "thread/compact/start")
    thread_id = docs.property(params, "threadId")
    _, required = docs.object_view(params)
    extra = required - {"threadId"}
    if extra:
        raise SchemaProblem(f"thread/compact/start now also requires {', '.join(sorted(extra))}", docs.resolve(params))
    if not docs.allows_type(thread_id, "string"):
        raise SchemaProblem("thread/compact/start threadId is not a string", docs.resolve(thread_id))
    return "thread/compact/start requires only threadId (string)", docs.resolve(params)


def _token_usage(docs: SchemaDocuments) -> CheckResult:
    params = docs.method_params(NOTIFICATIONS_FILE, "thread/tokenUsage/updated")
    usage = docs.property(params, "tokenUsage")
    total = docs.property(docs.property(usage, "last"), "totalTokens")
    if not docs.allows_type(total, "integer"):
        raise SchemaProblem("tokenUsage.last.totalTokens is not an integer", docs.resolve(total))
    window = docs.property(usage, "modelContextWindow", required=False)
    if not docs.allows_type(window, "integer"):
        raise SchemaProblem("tokenUsage.modelContextWindow is not an integer", docs.resolve(window))
    return "thread/tokenUsage/updated carries tokenUsage.last.totalTokens and modelContextWindow", docs.resolve(usage)


def _turn_start_text(docs: SchemaDocuments) -> CheckResult:
    params = docs.method_params(REQUESTS_FILE, "turn/start")
    input_node = docs.property(params, "input")
    _, required = docs.object_view(params)
    extra = required - {"threadId", "input"}
    if extra:
        raise SchemaProblem(f"turn/start now also requires {', '.join(sorted(extra))}", docs.resolve(params))
    docs.property(params, "threadId")
    array = docs.resolve(input_node)
    if not docs.allows_type(array, "array") or "items" not in array.value:
        raise SchemaProblem("turn/start input is not an array of inputs", array)
    text_variant = docs.one_tagged(array.at("items"), "type", "text", "input variant")
    text = docs.property(text_variant, "text")
    if not docs.allows_type(text, "string"):
        raise SchemaProblem("the text input's text is not a string", docs.resolve(text))
    return "turn/start accepts {type: text, text} input and requires only threadId and input", text_variant


_started_params, _started_compaction = _item_lifecycle("item/started")
_completed_params, _completed_compaction = _item_lifecycle("item/completed")

#: Check names are stable: scripts and the probe output refer to them.
CHECKS: tuple[tuple[str, CheckFn], ...] = (
    ("item_started.params", _started_params),
    ("item_started.context_compaction", _started_compaction),
    ("item_completed.params", _completed_params),
    ("item_completed.context_compaction", _completed_compaction),
    ("thread_compact_start.params", _compact_start),
    ("thread_token_usage.fields", _token_usage),
    ("turn_start.text_input", _turn_start_text),
)



# --- what the shared app-server platform also sends and reads (rekall/adapters/app_server/platform.py) --------


def _requires_only_thread_id(method: str, *options: tuple[str, str]) -> CheckFn:
    """``method``'s params require only a string ``threadId`` and offer each ``(name, type)`` option."""

    def check(docs: SchemaDocuments) -> CheckResult:
        params = docs.method_params(REQUESTS_FILE, method)
        _, required = docs.object_view(params)
        if extra := required - {"threadId"}:
            raise SchemaProblem(f"{method} now also requires {', '.join(sorted(extra))}", docs.resolve(params))
        if not docs.allows_type(docs.property(params, "threadId"), "string"):
            raise SchemaProblem(f"{method} threadId is not a string", docs.resolve(params))
        for name, json_type in options:
            option = docs.property(params, name, required=False)
            if json_type != "enum" and not docs.allows_type(option, json_type):
                raise SchemaProblem(f"{method} {name} is not a {json_type}", docs.resolve(option))
        offered = "".join(f", offers {name}" for name, _ in options)
        return f"{method} requires only threadId{offered}", docs.resolve(params)

    return check


def _loaded_list(docs: SchemaDocuments) -> CheckResult:
    params = docs.method_params(REQUESTS_FILE, "thread/loaded/list")
    _, required = docs.object_view(params)
    if required:
        raise SchemaProblem(f"thread/loaded/list now requires {', '.join(sorted(required))}", docs.resolve(params))
    docs.property(params, "cursor", required=False)
    return "thread/loaded/list requires nothing and pages with cursor", docs.resolve(params)


def _turn_start_marker(docs: SchemaDocuments) -> CheckResult:
    marker = docs.property(docs.method_params(REQUESTS_FILE, "turn/start"), "clientUserMessageId", required=False)
    if not docs.allows_type(marker, "string"):
        raise SchemaProblem("turn/start clientUserMessageId is not a string", docs.resolve(marker))
    return "turn/start accepts clientUserMessageId (the job marker)", docs.resolve(marker)


def _inject_items(docs: SchemaDocuments) -> CheckResult:
    """``thread/inject_items`` takes ``threadId`` and an array of raw items, and requires nothing else."""
    params = docs.method_params(REQUESTS_FILE, "thread/inject_items")
    _, required = docs.object_view(params)
    if extra := required - {"threadId", "items"}:
        raise SchemaProblem(f"thread/inject_items now also requires {', '.join(sorted(extra))}", docs.resolve(params))
    if not docs.allows_type(docs.property(params, "threadId"), "string"):
        raise SchemaProblem("thread/inject_items threadId is not a string", docs.resolve(params))
    items = docs.resolve(docs.property(params, "items"))
    if not docs.allows_type(items, "array"):
        raise SchemaProblem("thread/inject_items items is not an array", items)
    return "thread/inject_items requires threadId and items (an array of raw Responses API items)", docs.resolve(params)


def _notification_requires(method: str, *names: str) -> CheckFn:
    def check(docs: SchemaDocuments) -> CheckResult:
        params = docs.method_params(NOTIFICATIONS_FILE, method)
        _, required = docs.object_view(params)
        if missing := set(names) - required:
            raise SchemaProblem(f"{method} params no longer require {', '.join(sorted(missing))}", docs.resolve(params))
        return f"{method} params require {' and '.join(names)}", docs.resolve(params)

    return check


#: The shared app-server platform's own needs, checked after :data:`CHECKS` against its binary.
APP_SERVER_CHECKS: tuple[tuple[str, CheckFn], ...] = (
    ("thread_loaded_list.params", _loaded_list),
    ("thread_read.params", _requires_only_thread_id("thread/read", ("includeTurns", "boolean"))),
    ("thread_turns_list.params", _requires_only_thread_id("thread/turns/list", ("limit", "integer"),
                                                          ("sortDirection", "enum"), ("itemsView", "enum"))),
    ("thread_resume.params", _requires_only_thread_id("thread/resume", ("excludeTurns", "boolean"))),
    ("turn_start.client_user_message_id", _turn_start_marker),
    ("thread_inject_items.params", _inject_items),
    ("thread_status_changed.params", _notification_requires("thread/status/changed", "threadId", "status")),
    ("server_request_resolved.params", _notification_requires("serverRequest/resolved", "threadId", "requestId")),
)

Verdict = Literal["compatible", "incompatible"]


def run_checks(documents: Mapping[str, Any],
               checks: tuple[tuple[str, CheckFn], ...] = CHECKS) -> tuple[SchemaCheck, ...]:
    docs = SchemaDocuments(documents)
    results = []
    for name, check in checks:
        try:
            detail, node = check(docs)
            results.append(SchemaCheck(name, True, detail, node.file, node.pointer))
        except SchemaProblem as problem:
            results.append(SchemaCheck(name, False, problem.detail, problem.node.file, problem.node.pointer))
    return tuple(results)


def overall_verdict(checks: tuple[SchemaCheck, ...]) -> Verdict:
    return "compatible" if checks and all(c.passed for c in checks) else "incompatible"
