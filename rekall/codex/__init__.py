"""rekall and the real Codex engine.

- :mod:`rekall.codex.discovery`: find the extension-bundled ``codex`` binary and its identity.
- :mod:`rekall.codex.schema`: ``check_compatibility(binary, cache_dir=...)``, the public-schema
  check with its cache; the checks themselves are in :mod:`rekall.codex.schema_checks`.
- :mod:`rekall.codex.rpc`: the JSON-RPC core shared by the two app-server clients below.
- :mod:`rekall.codex.appserver`: an async stdio client for a ``codex app-server`` rekall starts.
- :mod:`rekall.codex.shared`: a client of the shared app-server (the daemon's control socket).
- :mod:`rekall.codex.conversation`: an app-server thread projected onto the extension's
  ``conversationState`` (snapshot + patches), the core of the codex-backed simulated owner
  (kept here, sans-I/O, because a platform following an app-server thread needs it too).

The development tooling around the real engine (the loopback mock model, its isolated
``CODEX_HOME``, the pinned-binary finder, the codex-backed owner) lives in ``tests/support/``:
it is in the sdist and a checkout, not in the wheel.

Submodules are imported on use, so ``import rekall.codex`` costs nothing.
"""
