"""Development tooling shared by the tests and the benchmarks; in a checkout and the sdist, not
in the wheel (``tests/test_packaging.py`` checks that).

- :mod:`tests.support.mock_model`: a loopback mock of the Responses API for the real Codex.
- :mod:`tests.support.codex_home`: an isolated ``CODEX_HOME`` pointing real Codex at that mock.
- :mod:`tests.support.pinned`: where ``scripts/install-codex`` put the pinned real Codex CLI.
- :mod:`tests.support.codex_backend`: the simulated owner backed by a real ``codex app-server``
  (``python -m rekall sim --backend codex`` in a checkout).
- :mod:`tests.support.record`: records the regression transcripts in ``fixtures/ipc/``.
- :mod:`tests.support.conformance`: the transcript format and its replay.
"""
