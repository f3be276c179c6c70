"""The real Codex binary's public schema, checked by both platforms.

- :mod:`rekall.codex.schema`: ``check_compatibility(binary, cache_dir=...)``, the public-schema
  check with its cache; the checks themselves are in :mod:`rekall.codex.schema_checks`.

Each platform finds its own binary (the extension's bundled ``codex``:
:mod:`rekall.adapters.extension.discovery`; the shared app-server reports its own). The development
tooling around the real engine (the stdio app-server client, the conversation projection, the
loopback mock model, its isolated ``CODEX_HOME``, the pinned-binary finder, the codex-backed owner)
lives in ``tests/support/``: it is in the sdist and a checkout, not in the wheel.

Submodules are imported on use, so ``import rekall.codex`` costs nothing.
"""
