"""stdio for ``rekall mcp``: newline-delimited JSON-RPC that answers bad input.

The SDK's stdio transport drops a line it cannot validate without a reply, so a client
that sent a malformed request with an id would wait forever. Here every line is checked
first: a valid message goes on to the SDK; anything else gets the JSON-RPC error it calls
for (``-32700`` for text that is not UTF-8 JSON, ``-32600`` for JSON that is not a valid
message, nests too deeply, repeats a key in an object or is over-long, with the request's id
whenever one can be read: an id that is not a string or an integer cannot, so its error has a
null id). Overlong lines are refused without being held in memory, deep nesting before it is
decoded. A request before ``initialize`` (other than ``ping``, as MCP's lifecycle allows) is
told to initialize first. Replies and the SDK's own output share one writer, so lines never
interleave.

When stdin closes, calls still in flight are answered before the server exits: their
answers are awaited for at most :data:`DRAIN_S` seconds, then each still-open call gets a
JSON-RPC error saying it was stopped, so a client never waits for an answer that cannot come.

As the SDK does, the real stdin and stdout are moved to private descriptors while serving:
fd 0 reads the null device and fd 1 writes to stderr, so a stray ``print`` cannot corrupt
the wire.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server

from rekall.kernel import safejson
from rekall.surfaces.mcp_wire import MAX_LINE_BYTES
PARSE_ERROR, INVALID_REQUEST, INTERNAL_ERROR = -32700, -32600, -32603
#: The requests MCP allows before the session is initialized (its lifecycle: initialize, and ping).
BEFORE_INITIALIZE = frozenset({"initialize", "ping"})
#: How long calls in flight when stdin closes may take to finish (a schedule waits at most
#: about 25 s: the store's guard, then the owner's snapshot).
DRAIN_S = 30.0


class LineWriter:
    """The wire's stdout: each ``write`` is one whole line, written and flushed under a lock."""

    def __init__(self, raw: BinaryIO, swallow_id: Any = None) -> None:
        self._raw = raw
        self._lock = anyio.Lock()
        #: Ids of requests read from stdin and not answered yet.
        self.open_ids: set[Any] = set()
        self._answered = anyio.Event()
        #: The id of a replayed ``initialize`` the light path already answered: its reply is not sent again.
        self._swallow_id = swallow_id

    async def write(self, text: str) -> None:
        if self._swallow_id is not None and self._is_reply_to(text, self._swallow_id):
            # initialize is handled inline by the SDK, so its reply comes before any other request's.
            self._swallow_id = None
            self._note_answer(text)
            return
        data = text.encode("utf-8")
        async with self._lock:
            await anyio.to_thread.run_sync(self._write, data)
        self._note_answer(text)

    @staticmethod
    def _is_reply_to(text: str, request_id: Any) -> bool:
        try:
            message = json.loads(text)
        except ValueError:
            return False
        return isinstance(message, dict) and "method" not in message and message.get("id") == request_id

    def _note_answer(self, text: str) -> None:
        if not self.open_ids:
            return
        try:
            message = json.loads(text)
        except ValueError:
            return
        if isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message):
            self.open_ids.discard(message.get("id"))
            self._answered.set()
            self._answered = anyio.Event()

    async def drain(self, timeout_s: float) -> None:
        """Wait (bounded) until every open request is answered; answer the rest with an error."""
        with anyio.move_on_after(timeout_s):
            while self.open_ids:
                await self._answered.wait()
        for request_id in sorted(self.open_ids, key=repr):
            await self.error(request_id, INTERNAL_ERROR, f"stdin closed and the call did not finish within "
                                                         f"{timeout_s:g} s; it was stopped (check compaction_status)")

    def _write(self, data: bytes) -> None:
        self._raw.write(data)
        self._raw.flush()

    async def flush(self) -> None:  # every write already flushed
        return None

    async def error(self, request_id: Any, code: int, message: str) -> None:
        reply = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
        await self.write(json.dumps(reply) + "\n")


def _readable_id(value: Any) -> Any:
    """The id to answer with: a JSON-RPC id (string or integer) if the line carried one."""
    if isinstance(value, dict):
        request_id = value.get("id")
        if isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)):
            return request_id
    return None


def _why(value: Any) -> str:
    if not isinstance(value, dict):
        return "a message must be a JSON object"
    if value.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "id" in value and _readable_id(value) is None:
        return "id must be a string or an integer"
    if not isinstance(value.get("method"), str):
        return "method must be a string"
    if "params" in value and not isinstance(value["params"], dict):
        return "params must be an object"
    return "not a valid JSON-RPC 2.0 message"


def check_line(line: bytes) -> tuple[str | None, tuple[Any, int, str] | None]:
    """``(text, None)`` for a valid message, else ``(None, (id, code, message))`` to answer."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, (None, PARSE_ERROR, f"Parse error: not UTF-8 (byte {exc.start})")
    try:
        value = safejson.loads(text)
    except safejson.TooDeep as exc:
        return None, (safejson.top_level_id(text), INVALID_REQUEST, f"Invalid Request: {exc}")
    except safejson.DuplicateKey as exc:  # decoded again, keys repeated and all, only to read the id
        return None, (_readable_id(json.loads(text)), INVALID_REQUEST, f"Invalid Request: {exc}")
    except json.JSONDecodeError as exc:
        return None, (None, PARSE_ERROR, f"Parse error: {safejson.decode_reason(exc)} at offset {exc.pos}")
    if isinstance(value, dict) and "id" in value and _readable_id(value) is None and "method" in value:
        # The SDK reads a request whose id is an object, a float or null as a notification and never
        # answers; JSON-RPC says: Invalid Request, with a null id as the id cannot be read.
        return None, (None, INVALID_REQUEST, f"Invalid Request: {_why(value)}")
    try:
        types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:
        request_id = _readable_id(value)
        if isinstance(value, dict) and "method" not in value and request_id is not None:
            return None, None  # a malformed *response* from the client: nothing to answer
        return None, (request_id, INVALID_REQUEST, f"Invalid Request: {_why(value)}")
    return text, None


class CheckedLines:
    """The wire's stdin as the SDK reads it: only valid messages get through."""

    def __init__(self, raw: BinaryIO, writer: LineWriter, max_line_bytes: int = MAX_LINE_BYTES,
                 drain_s: float = DRAIN_S, replay: list[bytes] | None = None) -> None:
        self._raw = raw
        self._writer = writer
        self._max = max_line_bytes
        self._drain_s = drain_s
        #: Lines already read from the wire (by the light path), read before the wire's next line.
        self._replay = list(replay or [])
        #: Whether an initialize request went through: MCP allows only a ping before it.
        self._initialized = False

    async def _next_line(self) -> bytes:
        if self._replay:
            return self._replay.pop(0)
        return await anyio.to_thread.run_sync(self._raw.readline, self._max + 1)

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            line = await self._next_line()
            if not line:
                await self._writer.drain(self._drain_s)  # the SDK stops its handlers once we return
                return
            if len(line) > self._max and not line.endswith(b"\n"):
                await anyio.to_thread.run_sync(self._skip_rest_of_line)
                # The line's start is kept: its id, when written before params as clients do, is answered.
                await self._writer.error(safejson.top_level_id(line.decode("utf-8", "replace")), INVALID_REQUEST,
                                         f"Invalid Request: line longer than {self._max} bytes")
                continue
            if not line.strip():
                continue
            text, problem = check_line(line)
            if problem is not None:
                await self._writer.error(*problem)
            elif text is not None:
                message = json.loads(text)
                request_id = _readable_id(message) if "method" in message else None
                if request_id is not None and not self._initialized and message["method"] not in BEFORE_INITIALIZE:
                    await self._writer.error(request_id, INVALID_REQUEST,
                                             f"Invalid Request: initialize first: {message['method'][:80]!r} came "
                                             "before the session's initialize request")
                    continue
                self._initialized = self._initialized or message.get("method") == "initialize"
                if request_id is not None:
                    self._writer.open_ids.add(request_id)  # a request: it must be answered
                yield text

    def _skip_rest_of_line(self) -> None:
        while True:
            chunk = self._raw.readline(self._max)
            if not chunk or chunk.endswith(b"\n"):
                return


async def serve_wire(server: MCPServer, wire_in: BinaryIO, wire_out: BinaryIO, replay: list[bytes] | None = None,
                     swallow_id: Any = None) -> None:
    """Serve the session on the claimed wire; ``replay`` lines are read first (see ``rekall.surfaces.mcp_light``)."""
    writer = LineWriter(wire_out, swallow_id)
    lines = CheckedLines(wire_in, writer, replay=replay)
    async with stdio_server(stdin=lines, stdout=writer) as (read, write):  # type: ignore[arg-type]
        # What MCPServer.run_stdio_async does, with our streams in place of the SDK's.
        lowlevel = server._lowlevel_server
        await lowlevel.run(read, write, lowlevel.create_initialization_options())
