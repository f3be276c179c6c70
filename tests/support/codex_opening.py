"""What the real Codex (0.171.0) sends when it starts ``rekall mcp``, captured verbatim with a tee.

Codex starts one MCP server per session and opens it with these lines before the model may call a
tool; ``tests/test_mcp_light.py`` replays them against both servers and ``bench/lifecycle.py``
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


def tool_call(request_id: int, name: str, arguments: dict, progress_token: int) -> str:
    """A ``tools/call`` line in Codex's style: ``{name, arguments, _meta: {progressToken}}``."""
    import json

    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments, "_meta": {"progressToken": progress_token}}},
                      separators=(",", ":"))
