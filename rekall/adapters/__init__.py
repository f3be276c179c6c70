"""The platforms rekall reaches a Codex thread through, one package each.

- :mod:`rekall.adapters.extension`: the VS Code extension's private IPC router (its protocol
  generations, the session, the bundle and binary discovery, its doctor rows);
- :mod:`rekall.adapters.app_server`: the shared Codex app-server (its JSON-RPC client, the thread
  model, its doctor rows).

Byte transports are in :mod:`rekall.transports`; the contract every platform implements is
:mod:`rekall.adapters.contract`. Nothing is imported here, so the worker's first follow stays light.
"""
