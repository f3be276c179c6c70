"""What the CLI and the MCP server share: probe, schedule, status, cancel, doctor, and starting
the worker.
"""
