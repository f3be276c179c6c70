"""A loopback mock of the OpenAI Responses API, for running real Codex offline.

Real ``codex app-server`` talks to a model provider over HTTP. Pointing its isolated
``config.toml`` at this server (see :func:`tests.support.codex_home.make_isolated_home`) lets the
real engine run turns and compactions with no network and no account.

Each ``POST /v1/responses`` is answered with the three server-sent events Codex needs:
``response.created``, one ``response.output_item.done`` and ``response.completed`` with a
``usage`` block. The usage is *derived from the request*: input tokens are the UTF-8 size
of the request's ``input`` array divided by ``bytes_per_token``. A compaction replaces the
history with a short summary, so the next request is smaller and the reported context really
shrinks, as it does with a real model.

Codex compacts locally for non-OpenAI providers: it sends an ordinary ``/v1/responses``
request (no tools) whose input is the history followed by its "CONTEXT CHECKPOINT COMPACTION"
prompt, labelled ``request_kind: "compaction"`` in ``client_metadata``, and keeps the reply text
as the summary. The compacted history keeps the user messages and that summary and drops the
rest (assistant messages, tool calls and outputs). Such requests are recorded with
``kind == "compaction"`` and always answered with ``summary_text``; scripted replies are kept
for turn requests. The terminal UI names each new thread in a side thread of its own
(``thread_source: "thread_title"`` in the metadata): those requests are ``kind == "title"``,
answered with ``title_text``, and never take a scripted reply meant for the user's thread.

Every request is recorded (thread-safe). Tests can script the next replies: a text message
or a ``function_call`` for a named tool (to make Codex call a tool, or ask for an approval).
The server binds 127.0.0.1 only.
"""

from __future__ import annotations

import http.server
import itertools
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Literal

import attrs

#: The prompt Codex sends for a local compaction (observed with 0.171.0).
COMPACTION_PROMPT_MARKER = "CONTEXT CHECKPOINT COMPACTION"
DEFAULT_REPLY = "Done."
DEFAULT_SUMMARY = "Summary: the user worked on a task; continue from the handoff."
DEFAULT_TITLE = "Mock thread title"

RequestKind = Literal["turn", "compaction", "title", "other"]


@attrs.frozen
class RecordedRequest:
    """One HTTP request the mock received."""

    seq: int
    method: str
    path: str
    body: dict[str, Any] | None
    kind: RequestKind
    #: All text found in the request's ``input`` (messages, tool outputs), joined by newlines.
    text: str
    input_tokens: int

    def contains(self, marker: str) -> bool:
        return marker in self.text


@attrs.frozen
class TextReply:
    text: str


@attrs.frozen
class ToolCallReply:
    name: str
    arguments: str
    call_id: str
    namespace: str | None = None


@attrs.frozen
class ToolSearchReply:
    """A client-executed ``tool_search_call``: how a searching model finds deferred MCP tools."""

    query: str
    call_id: str


Reply = TextReply | ToolCallReply | ToolSearchReply


def escalated_command(cmd: str, justification: str = "rekall test approval") -> dict[str, Any]:
    """``exec_command`` arguments that make Codex ask for approval under ``on-request``."""
    return {"cmd": cmd, "sandbox_permissions": "require_escalated", "justification": justification}


def input_text(body: dict[str, Any] | None) -> str:
    """Every string found under ``text``/``output`` keys of the request's ``input``."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("text", "output") and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk((body or {}).get("input"))
    return "\n".join(found)


def derived_input_tokens(body: dict[str, Any] | None, bytes_per_token: int) -> int:
    raw = json.dumps((body or {}).get("input", []), ensure_ascii=False, separators=(",", ":"))
    return max(1, len(raw.encode()) // bytes_per_token)


class MockModel:
    """The mock server. Use as a context manager, or call :meth:`start` and :meth:`close`."""

    def __init__(self, *, bytes_per_token: int = 4, reply_text: str = DEFAULT_REPLY,
                 summary_text: str = DEFAULT_SUMMARY, title_text: str = DEFAULT_TITLE) -> None:
        self.bytes_per_token = bytes_per_token
        self.reply_text = reply_text
        self.summary_text = summary_text
        self.title_text = title_text
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._script: deque[Reply] = deque()
        self._seq = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        #: While cleared, a compaction request waits (bounded) before it is answered: a test acts during it.
        self.compaction_gate = threading.Event()
        self.compaction_gate.set()

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> MockModel:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        # A short poll interval keeps close() prompt: shutdown() waits for the next poll.
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="mock-model", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> MockModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the mock model is not running; call start() first")
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """The value for ``base_url`` in Codex's ``[model_providers.mock]``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting ----------------------------------------------------------------------

    def queue_text(self, text: str) -> None:
        """Answer the next turn request with this assistant message."""
        with self._lock:
            self._script.append(TextReply(text))

    def queue_tool_call(self, name: str, arguments: dict[str, Any] | str, *, call_id: str | None = None,
                        namespace: str | None = None) -> str:
        """Answer the next turn request with a ``function_call``; returns its ``call_id``.

        MCP tools are offered to the model inside a namespace (``mcp__<server>``): pass it as
        ``namespace`` with the tool's plain ``name``, or use :meth:`queue_mcp_call`.
        """
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = ToolCallReply(name, args, call_id or f"call_{next(self._call_ids)}", namespace)
        with self._lock:
            self._script.append(call)
        return call.call_id

    def queue_mcp_call(self, server: str, tool: str, arguments: dict[str, Any] | str, *,
                       call_id: str | None = None) -> str:
        """Make Codex call MCP tool ``tool`` of the ``[mcp_servers.<server>]`` it was configured with.

        Codex 0.171 asks for approval (``mcpServer/elicitation/request``) before a tool annotated
        ``destructive_hint`` under ``approval_policy = "on-request"``, and refuses the call under
        ``"never"`` unless the tool's ``approval_mode`` is ``"approve"`` in ``config.toml``.
        """
        return self.queue_tool_call(tool, arguments, call_id=call_id, namespace=f"mcp__{server}")

    def queue_tool_search(self, query: str, *, call_id: str | None = None) -> str:
        """Answer the next turn request with a ``tool_search_call`` (models whose catalog entry
        supports search get MCP tools deferred behind Codex's ``tool_search``)."""
        call = ToolSearchReply(query, call_id or f"call_{next(self._call_ids)}")
        with self._lock:
            self._script.append(call)
        return call.call_id

    # --- inspection ---------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_containing(self, marker: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.contains(marker)]

    def wait_for(self, predicate: Callable[[RecordedRequest], bool], *, timeout: float) -> RecordedRequest:
        """Block until a recorded request satisfies ``predicate``; ``TimeoutError`` otherwise.

        Blocking: from async code call it through ``anyio.to_thread.run_sync``.
        """
        with self._changed:
            found = self._changed.wait_for(lambda: next(filter(predicate, self._requests), None), timeout)
        if found is None:
            raise TimeoutError(f"the mock model received no matching request within {timeout} s")
        return found

    # --- serving (called on the server's threads) ---------------------------------------

    def _answer(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, bytes, str]:
        text = input_text(body)
        tokens = derived_input_tokens(body, self.bytes_per_token)
        kind = _request_kind(method, path, body, text)
        with self._changed:
            seq = next(self._seq)
            reply: Reply | None = None
            if kind == "turn" and self._script:
                reply = self._script.popleft()
            self._requests.append(RecordedRequest(seq, method, path, body, kind, text, tokens))
            self._changed.notify_all()
        if kind == "compaction" and not self.compaction_gate.wait(timeout=60):
            return 503, b'{"error": {"message": "mock model: the compaction gate stayed closed"}}', "application/json"
        if kind == "other":
            return 404, json.dumps({"error": {"message": f"mock model: no route {method} {path}"}}).encode(), "application/json"
        if reply is None:
            defaults = {"compaction": self.summary_text, "title": self.title_text}
            reply = TextReply(defaults.get(kind, self.reply_text))
        return 200, b"".join(_sse_events(seq, reply, tokens, self.bytes_per_token)), "text/event-stream"


def _request_kind(method: str, path: str, body: dict[str, Any] | None, text: str) -> RequestKind:
    if method != "POST" or not path.rstrip("/").endswith("/responses"):
        return "other"
    # Codex labels its requests in client metadata; the prompt is the fallback if that changes.
    metadata = ((body or {}).get("client_metadata") or {}).get("x-codex-turn-metadata")
    try:
        labels = json.loads(metadata) if isinstance(metadata, str) else {}
        labelled, source = labels.get("request_kind"), labels.get("thread_source")
    except (ValueError, AttributeError):
        labelled = source = None
    if labelled == "compaction" or COMPACTION_PROMPT_MARKER in text:
        return "compaction"
    return "title" if source == "thread_title" else "turn"


def _output_item(seq: int, reply: Reply) -> dict[str, Any]:
    if isinstance(reply, ToolSearchReply):  # the wire shape Codex 0.171 reads
        return {"type": "tool_search_call", "id": f"ts_{seq}", "call_id": reply.call_id, "execution": "client",
                "status": "completed", "arguments": {"query": reply.query}}
    if isinstance(reply, ToolCallReply):
        item = {"type": "function_call", "id": f"fc_{seq}", "call_id": reply.call_id,
                "name": reply.name, "arguments": reply.arguments}
        if reply.namespace is not None:
            item["namespace"] = reply.namespace
        return item
    return {"type": "message", "role": "assistant", "id": f"msg_{seq}",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}]}


def _sse_events(seq: int, reply: Reply, input_tokens: int, bytes_per_token: int) -> Iterator[bytes]:
    response_id = f"resp_mock_{seq}"
    item = _output_item(seq, reply)
    output_tokens = max(1, len(json.dumps(item).encode()) // bytes_per_token)
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
    events = [
        ("response.created", {"response": {"id": response_id}}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": {"id": response_id, "usage": usage}}),
    ]
    for name, data in events:
        yield f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


def _handler_for(model: MockModel) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            if raw and not isinstance(body, dict):  # kept for inspection, answered like any request
                body = {"unparsed": raw[:200].decode(errors="replace")}
            status, payload, content_type = model._answer(self.command, self.path, body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # Codex went away mid-answer (it was shut down)

        do_POST = _serve
        do_GET = _serve

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

    return Handler
