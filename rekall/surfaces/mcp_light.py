"""The light path of ``rekall mcp``: the opening of a session served without loading the SDK.

Codex starts one MCP server per chat, and most chats only open the session and ask
``compaction_status``. Importing the ``mcp`` SDK (and pydantic under it) is most of a second
and most of the memory, so the opening is answered here from ``mcp_light.json``, which
``python -m rekall.surfaces.mcp_light --generate`` writes from the SDK server's own replies
(``tests/surfaces/test_mcp_light.py`` checks it is current and that every reply here is byte-equal to
the SDK's). Served here, and only in exactly these shapes: ``initialize`` (the SDK's version
negotiation: the requested version if the handshake supports it, else the latest) with capabilities
the SDK certainly accepts (Codex's own: ``experimental`` and ``elicitation`` ``{form, url}``),
``notifications/initialized``, the lists Codex asks for when it opens a session (``tools/list``,
``resources/list``, ``resources/templates/list``; and ``prompts/list``) and ``compaction_status``
with a well-formed ``threadId`` whose status certainly fits the output schema; requests may carry
Codex's ``_meta`` (a ``progressToken``, and on a tool call its call and turn metadata).

``compaction_status`` reads the views on disk first (:func:`rekall.store.views.trusted_status`:
a sealed status of ended jobs, or nothing on disk for the thread), so its first call costs what
the later ones do; only a job that must be replayed loads the status code.

Why this door is kept beside the SDK (the choice ``bench/lifecycle.py`` measures): the SDK is
the server's foundation, and its own floor (``sdk_floor``: the SDK imported and rekall's server
built, in a fresh interpreter) is above the memory a whole job may leave (``mcp_whole_job_rss_mb``),
which no server on the SDK meets, and its load time is above the extra time a first call may take
(``mcp_first_call_excess_ms_max``). This door keeps the opening, which every chat makes, at
``mcp_ready_ms`` and ``mcp_rss_before_call_mb``; the warm-up below keeps the load out of the first
acting call.

Anything else (another tool, an unknown method, a malformed line, arguments the SDK would
refuse, a status that raises or might not fit) hands the session to the SDK server: the lines
of the handshake already answered here are replayed into it first, and its replies to them are
swallowed, so it holds the same session state as if it had read them itself, then it reads the
line that was not served here and everything after it from the same stdin.

Warm on intent: a session's first ``compaction_status`` says the agent is about to use rekall,
so the SDK server starts loading then, on a thread of its own (:class:`Warmup`), while the light
path goes on answering; the acting call that hands the session over later finds it built and does
not wait for it. A session that never calls a tool never loads it. The trade (``bench/lifecycle.py``
measures it): after that first status the process holds the SDK's floor, not the light path's
memory, and a status answered while the import runs shares the interpreter's lock with it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO

from rekall.kernel import safejson
from rekall.surfaces.mcp_wire import MAX_LINE_BYTES, claim_stdio

DATA_PATH = Path(__file__).with_name("mcp_light.json")
_INT64 = 2**63


#: The list requests served from the data (the SDK answers each without a cursor with one fixed page).
LISTS = ("tools/list", "resources/list", "resources/templates/list", "prompts/list")


class HandOff(Exception):
    """This line is not served here: the SDK takes the session from it."""


def load_data() -> dict[str, Any]:
    return json.loads(DATA_PATH.read_text(encoding="utf-8"))


def _dumps(value: Any) -> str:
    # The SDK's wire form (pydantic): compact, UTF-8 as is; exponent floats are formatted differently, so refused.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _plain_numbers(value: Any) -> bool:
    """No value whose JSON text pydantic would write differently from ``json`` (an exponent float, a huge int)."""
    if isinstance(value, dict):
        return all(_plain_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(_plain_numbers(v) for v in value)
    if isinstance(value, float):
        return "e" not in repr(value) and "n" not in repr(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return -_INT64 <= value < _INT64
    return True


def fits(value: Any, schema: dict[str, Any], defs: dict[str, Any]) -> bool:
    """True only if ``value`` certainly satisfies ``schema``; a keyword not known here counts as not."""
    known = {"type", "properties", "required", "additionalProperties", "items", "anyOf", "$ref", "description",
             "title", "enum", "const", "default", "minLength", "maxLength", "minItems", "maxItems", "$defs"}
    if set(schema) - known:
        return False
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/") or ref[8:] not in defs:
            return False
        return fits(value, defs[ref[8:]], defs)
    if "anyOf" in schema and not any(fits(value, arm, defs) for arm in schema["anyOf"]):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "const" in schema and value != schema["const"]:
        return False
    kind = schema.get("type")
    checks = {"string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
              "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "null": lambda v: v is None, "object": lambda v: isinstance(v, dict),
              "array": lambda v: isinstance(v, list)}
    if kind is not None and (kind not in checks or not checks[kind](value)):
        return False
    if isinstance(value, str) and not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
        return False
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(value)):
            return False
        if "items" in schema and not all(fits(item, schema["items"], defs) for item in value):
            return False
    if isinstance(value, dict) and kind == "object":
        properties = schema.get("properties", {})
        if any(key not in value for key in schema.get("required", ())):
            return False
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                if not fits(item, properties[key], defs):
                    return False
            elif extra is False or (isinstance(extra, dict) and not fits(item, extra, defs)):
                return False
    return True


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64)


def _empty_objects(value: Any, names: set[str]) -> bool:
    """An object whose members are only ``names``, each an empty object (e.g. elicitation ``{form: {}, url: {}}``)."""
    return isinstance(value, dict) and set(value) <= names and all(v == {} for v in value.values())


#: Client capabilities in the shapes the SDK's ``ClientCapabilities`` certainly accepts (its models ignore
#: unknown members, but anything else is the SDK's to judge): what a capability's object may hold.
_CAPABILITY_SHAPES = {
    "roots": lambda v: isinstance(v, dict) and set(v) <= {"listChanged"} and all(isinstance(x, bool) for x in v.values()),
    "sampling": lambda v: _empty_objects(v, {"context", "tools"}),
    "elicitation": lambda v: _empty_objects(v, {"form", "url"}),
    # dict[str, dict[str, Any]]: Codex sends {"codex/auth-change": {}}.
    "experimental": lambda v: isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()),
}


def _plain_initialize(params: Any) -> bool:
    """Initialize params the SDK certainly accepts (anything richer goes to the SDK to judge)."""
    if not isinstance(params, dict) or set(params) - {"protocolVersion", "capabilities", "clientInfo"}:
        return False
    info, capabilities = params.get("clientInfo"), params.get("capabilities")
    if not isinstance(params.get("protocolVersion"), str) or not isinstance(info, dict) \
            or not isinstance(capabilities, dict):
        return False
    if set(info) - {"name", "version", "title"} or not all(isinstance(v, str) for v in info.values()) \
            or not {"name", "version"} <= set(info):
        return False
    return all(name in _CAPABILITY_SHAPES and _CAPABILITY_SHAPES[name](value) for name, value in capabilities.items())


def _plain_params(params: Any, names: set[str]) -> bool:
    """Request params of only ``names`` plus an optional ``_meta`` as Codex sends it: a progress
    token and, on a tool call, its call and turn metadata (``callId``, ``x-codex-turn-metadata``, ...).

    The SDK sends no progress for the requests served here and reads no other ``_meta`` key, so
    none changes a reply; the protocol's reserved keys (``io.modelcontextprotocol/...``) might, so
    a request carrying one is handed over.
    """
    if not isinstance(params, dict) or set(params) - names - {"_meta"}:
        return False
    meta = params.get("_meta", {})
    return isinstance(meta, dict) and not any(key.startswith(_RESERVED_META) for key in meta) \
        and ("progressToken" not in meta or isinstance(meta["progressToken"], str) or _is_id(meta["progressToken"]))


_RESERVED_META = "io.modelcontextprotocol/"


class LightSession:
    """Answers the served lines; raises :class:`HandOff` for any other. ``handshake`` keeps the lines served."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.handshake: list[bytes] = []
        #: Id of the initialize request answered here (its replayed reply is swallowed), or None.
        self.initialize_id: Any = None
        #: The generated replies of the negotiated protocol version.
        self.version: dict[str, Any] = {}
        #: A ``compaction_status`` was served: the agent is about to use rekall (see :class:`Warmup`).
        self.intent_shown = False

    def answer(self, line: bytes) -> str | None:
        """The reply line (with newline) for ``line``, or None for a notification served; else HandOff."""
        try:
            message = safejson.loads(line.decode("utf-8"))  # refuses deep nesting before decoding it
        except (ValueError, safejson.TooDeep):  # not UTF-8, not JSON, too deep: the SDK path words the error
            raise HandOff from None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise HandOff
        method: Any = message.get("method")
        params: Any = message.get("params")
        if "id" not in message:
            if method == "notifications/initialized" and self.initialize_id is not None \
                    and set(message) <= {"jsonrpc", "method", "params"} and message.get("params", {}) == {}:
                self.handshake.append(line)
                return None
            raise HandOff
        request_id = message["id"]
        if not _is_id(request_id) or set(message) - {"jsonrpc", "id", "method", "params"}:
            raise HandOff
        if method == "initialize" and self.initialize_id is None and _plain_initialize(params):
            result = self._initialize(params["protocolVersion"])
            self.handshake.append(line)
            self.initialize_id = request_id
        elif self.initialize_id is None:
            raise HandOff
        elif method in LISTS and ("params" not in message or _plain_params(params, set())):
            result = self.version["lists"][method]
        elif method == "tools/call" and _plain_params(params, {"name", "arguments"}) \
                and {"name", "arguments"} <= set(params) and params["name"] == "compaction_status":
            result = self._compaction_status(params["arguments"])
        else:
            raise HandOff
        return _dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n"

    def _initialize(self, requested: str) -> dict[str, Any]:
        versions = self.data["versions"]
        negotiated = requested if requested in versions else self.data["latestHandshakeVersion"]
        self.version = versions[negotiated]
        return self.version["initializeResult"]

    def _compaction_status(self, arguments: Any) -> dict[str, Any]:
        if not isinstance(arguments, dict) or set(arguments) != {"threadId"} \
                or not fits(arguments["threadId"], self.data["statusInputSchema"]["properties"]["threadId"], {}):
            raise HandOff
        try:
            status = _status(arguments["threadId"])
        except Exception:  # noqa: BLE001 - the SDK path reads it again and words the error as it always does
            raise HandOff from None
        schema = self.data["statusOutputSchema"]
        if not fits(status, schema, schema.get("$defs", {})) or not _plain_numbers(status):
            raise HandOff
        # The SDK's text content: pydantic_core.to_json(result, indent=2).
        text = json.dumps(status, ensure_ascii=False, indent=2)
        result = {"content": [{"text": text, "type": "text"}], "isError": False, "structuredContent": status}
        self.intent_shown = True
        return {key: result[key] for key in self.version["statusResultKeys"]}  # what this version's wire keeps


def _status(thread: str) -> dict[str, Any]:
    """``service.status_reply``, from the views on disk when they prove it (the first call then costs what
    later ones do: the status code is loaded only for a job that must be replayed)."""
    from rekall.store.views import trusted_status

    trusted = trusted_status(os.environ, thread)
    if trusted is not None:
        return trusted[0]
    from rekall.usecases import service

    return service.status_reply(thread)


#: The interpreter's switch interval while the warm-up runs (see :meth:`Warmup._build`).
WARMUP_SWITCH_INTERVAL_S = 0.0005


class Warmup:
    """The SDK server, built once on a thread of its own from the moment the session shows intent."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._server: Any = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._build, name="rekall-mcp-warmup", daemon=True)
            self._thread.start()

    def _build(self) -> None:
        # The import holds the interpreter's lock: a status read meanwhile waits for it after each system
        # call, up to the switch interval (5 ms) each time. A shorter one, while it runs, keeps those waits short.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(WARMUP_SWITCH_INTERVAL_S)
        try:
            self._server = _build_sdk_server()
        except Exception:  # noqa: BLE001 - server() builds it again on the main thread, where the error is seen
            pass
        finally:
            sys.setswitchinterval(interval)

    def server(self) -> Any:
        """The built server: waits for the warm-up if it runs, builds it here if it never ran or failed."""
        if self._thread is not None:
            self._thread.join()
        return self._server if self._server is not None else _build_sdk_server()


def _build_sdk_server() -> Any:
    """The SDK server, and in memory every module the hand-off and an acting call's first run load on use."""
    import anyio._backends._asyncio  # noqa: F401 - what anyio.run loads

    from rekall.surfaces.mcp_server import build_server
    from rekall.surfaces.mcp_stdio import serve_wire  # noqa: F401
    from rekall.usecases.service import load_acting_modules

    load_acting_modules()
    return build_server()


def serve(wire_in: BinaryIO, wire_out: BinaryIO) -> int:
    session = LightSession(load_data())
    warmup = Warmup()
    while True:
        line = wire_in.readline(MAX_LINE_BYTES + 1)
        if not line:
            return 0
        if not line.strip():
            continue
        try:
            if len(line) > MAX_LINE_BYTES:
                raise HandOff
            reply = session.answer(line)
        except HandOff:
            return _hand_off(session, warmup, line, wire_in, wire_out)
        if reply is not None:
            try:
                data = reply.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: the SDK decides what to say
                return _hand_off(session, warmup, line, wire_in, wire_out)
            wire_out.write(data)
            wire_out.flush()
        if session.intent_shown:
            warmup.start()  # after the reply is written: the status never waits for the import to begin


def _hand_off(session: LightSession, warmup: Warmup, line: bytes, wire_in: BinaryIO, wire_out: BinaryIO) -> int:
    server = warmup.server()
    import anyio

    from rekall.surfaces.mcp_stdio import serve_wire

    anyio.run(serve_wire, server, wire_in, wire_out, [*session.handshake, line], session.initialize_id)
    return 0


def run_stdio() -> int:
    wire_in, wire_out = claim_stdio()
    return serve(wire_in, wire_out)


def run_sdk_stdio() -> int:
    """The SDK server alone on the wire, never the light path: what the generator and the tests compare against."""
    import anyio

    from rekall.surfaces.mcp_server import build_server
    from rekall.surfaces.mcp_stdio import serve_wire

    anyio.run(serve_wire, build_server(), *claim_stdio())
    return 0


# --- the data file, generated from the SDK server ------------------------------------------


#: Runs the SDK server, never the light path: what the generator and the tests compare against.
SDK_SERVER = "from rekall.surfaces.mcp_light import run_sdk_stdio; raise SystemExit(run_sdk_stdio())"
#: A thread with no job: its status is the same on every machine.
SAMPLE_THREAD = "019a0000-0000-7000-8000-000000000000"


def sdk_replies(lines: list[str], env: dict[str, str]) -> list[dict[str, Any]]:
    """The SDK server's reply lines to ``lines`` (sent at once over stdio), decoded, in order."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", SDK_SERVER], input="".join(line + "\n" for line in lines),
                          capture_output=True, text=True, env=env, timeout=120, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def generate() -> dict[str, Any]:
    """The SDK server's own answers, per handshake version: initialize, tools/list, compaction_status's shape."""
    import tempfile

    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

    versions = {}
    with tempfile.TemporaryDirectory() as jobs:
        env = {**os.environ, "REKALL_JOBS_DIR": jobs}
        for version in HANDSHAKE_PROTOCOL_VERSIONS:
            init = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "generator", "version": "1"}}
            replies = sdk_replies([
                _dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}),
                _dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                *(_dumps({"jsonrpc": "2.0", "id": method, "method": method}) for method in LISTS),
                _dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": "compaction_status", "arguments": {"threadId": SAMPLE_THREAD}}})], env)
            by_id = {reply["id"]: reply["result"] for reply in replies}
            versions[version] = {"initializeResult": by_id[0], "lists": {method: by_id[method] for method in LISTS},
                                 "statusResultKeys": list(by_id[1])}
    latest_tools = versions[LATEST_HANDSHAKE_VERSION]["lists"]["tools/list"]["tools"]
    status_tool = next(tool for tool in latest_tools if tool["name"] == "compaction_status")
    return {"latestHandshakeVersion": LATEST_HANDSHAKE_VERSION, "versions": versions,
            "statusInputSchema": status_tool["inputSchema"], "statusOutputSchema": status_tool["outputSchema"]}


def generated_text() -> str:
    return json.dumps(generate(), ensure_ascii=False, indent=1) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--generate"]:
        sys.exit("usage: python -m rekall.surfaces.mcp_light --generate  (rewrites rekall/surfaces/mcp_light.json from the SDK server)")
    DATA_PATH.write_text(generated_text(), encoding="utf-8")
    print(f"wrote {DATA_PATH}")
