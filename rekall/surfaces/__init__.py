"""What people and agents talk to: the CLI (with its rich views) and the MCP server.

Each verb calls the use cases (:mod:`rekall.usecases`); nothing here decides a job's state.
"""
