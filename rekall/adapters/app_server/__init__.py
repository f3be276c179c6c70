"""The shared Codex app-server as a platform (``codex app-server daemon``).

- :mod:`rekall.adapters.app_server.rpc`: the JSON-RPC core (requests, replies, the message stream);
- :mod:`rekall.adapters.app_server.shared`: a client of the shared app-server over its control socket;
- :mod:`rekall.adapters.app_server.thread_model`: an app-server thread's facts, from its notifications;
- :mod:`rekall.adapters.app_server.platform`: the platform (follow, observe, act);
- :mod:`rekall.adapters.app_server.served`: its doctor rows and schema report.

Submodules are imported on use.
"""
