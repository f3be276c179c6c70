"""A test seam, never shipped: in a process started by a test, this account's home (as
``pwd.getpwuid`` reports it) is the test's private folder, ``RKTEST_ACCOUNT_HOME``.

rekall derives its lock folder from the account alone, and no variable of its own moves it
(``rekall.kernel.environment.account_home``). A test's rekall processes would otherwise take their locks in
the real account's home, shared with every other test and with the developer's own jobs.
tests/conftest.py puts this folder first on ``PYTHONPATH`` and names the home; a process
started without them (Codex starting ``rekall mcp`` with its own few variables) uses the real one.
"""

import os

_home = os.environ.get("RKTEST_ACCOUNT_HOME")
if _home:
    import pwd

    _real_getpwuid = pwd.getpwuid

    class _Entry:
        def __init__(self, real: object, home: str) -> None:
            self._real, self.pw_dir = real, home

        def __getattr__(self, name: str) -> object:
            return getattr(self._real, name)

    def _getpwuid(uid: int) -> object:
        entry = _real_getpwuid(uid)
        return _Entry(entry, _home) if uid == os.geteuid() else entry

    pwd.getpwuid = _getpwuid
