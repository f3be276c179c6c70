"""What the real Codex (0.171.0) sends when it starts ``rekall mcp``, captured verbatim with a tee.

Codex starts one MCP server per session and opens it with these lines before the model may call a
tool; ``tests/surfaces/test_mcp_light.py`` replays them against both servers and ``bench/lifecycle.py``
times them, so the light path's speed-up is checked on the opening Codex really sends.
"""

OPENING = [
    '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":'
    '{"experimental":{"codex/auth-change":{}},"elicitation":{"form":{},"url":{}}},"clientInfo":'
    '{"name":"codex-mcp-client","title":"Codex","version":"0.171.0"}}}',
    '{"jsonrpc":"2.0","method":"notifications/initialized"}',
    '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":0}}}',
    '{"jsonrpc":"2.0","id":2,"method":"resources/list","params":{"_meta":{"progressToken":1}}}',
    '{"jsonrpc":"2.0","id":3,"method":"resources/templates/list","params":{"_meta":{"progressToken":2}}}',
]
#: The id of the opening's last request: the session is ready for the model once it is answered.
LAST_ID = 3


#: A ``tools/call`` of ``compaction_status`` as Codex 0.171.0 sent it in a turn (captured with the
#: same tee): its ``_meta`` carries the progress token and the call's and turn's metadata.
TOOL_CALL = (
    '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"callId":"call_1","x-codex-turn-metadata":'
    '{"session_id":"01a22ed6-f968-76a0-85e5-6eeac45fb37e","thread_id":"01a22ed6-f968-76a0-85e5-6eeac45fb37e",'
    '"model":"mock-model","turn_id":"01a22ed6-f9cd-7151-8104-6065291b4c94","turn_started_at_unix_ms":1796082170319,'
    '"sandbox":"seccomp","sandbox_mode":"read-only","auto_review_enabled":false,"node_repl_auto_review_required":false,'
    '"node_repl_disabled":false,"codex_version":"0.171.0"},"threadId":"01a22ed6-f968-76a0-85e5-6eeac45fb37e",'
    '"sessionId":"01a22ed6-f968-76a0-85e5-6eeac45fb37e","windowId":"01a22ed6-f968-76a0-85e5-6eeac45fb37e:0",'
    '"itemId":"fc_1","progressToken":1},"name":"compaction_status",'
    '"arguments":{"threadId":"01a22ed6-f968-76a0-85e5-6eeac45fb37e"}}}'
)


CAPTURED_THREAD = "01a22ed6-f968-76a0-85e5-6eeac45fb37e"


def codex_meta(thread_id: str, progress_token: int = 1) -> dict:
    """The ``_meta`` of :data:`TOOL_CALL` as Codex sends it from thread ``thread_id``."""
    import json

    return json.loads(json.dumps(json.loads(TOOL_CALL)["params"]["_meta"]).replace(CAPTURED_THREAD, thread_id)) | {
        "progressToken": progress_token}


def tool_call(request_id: int, name: str, arguments: dict, progress_token: int, caller: str | None = None) -> str:
    """A ``tools/call`` line shaped as Codex sends it (:data:`TOOL_CALL`), with these id, tool, arguments and
    token, from thread ``caller`` (by default the one the arguments name: an agent acting on its own thread)."""
    import json

    captured = json.loads(TOOL_CALL)
    caller = caller or arguments.get("threadId") or CAPTURED_THREAD
    params = {**captured["params"], "name": name, "arguments": arguments, "_meta": codex_meta(caller, progress_token)}
    return json.dumps({**captured, "id": request_id, "params": params}, separators=(",", ":"))
