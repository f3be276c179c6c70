"""The jobs directories this account has used, kept where any of its processes finds them.

Codex runs hooks in its own environment (under the app-server daemon a short one), so the
plugin's hook may not see the ``CODEX_HOME`` or ``REKALL_JOBS_DIR`` a job was scheduled with. The
store therefore records each jobs directory it opens for writing in
``<account home>/.rekall/jobs-dirs.json`` (the account's home from the password database, as for
the lock directory: no variable moves it), and the hook looks there too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rekall.store import paths

#: The list is read up to this size and holds at most this many directories (the newest kept).
_LIMIT = 256 * 1024
_KEPT = 64


def jobs_dirs_file() -> Path:
    # Looked up through paths, as the lock directory is: one seam for the tests.
    return paths.account_home() / ".rekall" / "jobs-dirs.json"  # type: ignore[attr-defined]


def known_jobs_dirs() -> list[Path]:
    """The recorded jobs directories, newest first (none when the file is missing or unreadable;
    one that is not a regular file, such as a FIFO planted there, is refused at once and named in
    a warning)."""
    from rekall.store.fsread import read_private

    path = jobs_dirs_file()
    try:
        found = json.loads(read_private(path, limit=_LIMIT))
    except FileNotFoundError:
        return []
    except OSError as exc:
        import logging  # here, not at the top: the SessionStart hook's fast path reads this file

        logging.getLogger("rekall.store").warning("the list of jobs directories %s is ignored: %s", path,
                                                  exc.strerror or exc)
        return []
    except ValueError:
        return []
    if not isinstance(found, list):
        return []
    return [Path(p) for p in found if isinstance(p, str) and os.path.isabs(p)]


def remember_jobs_dir(root: Path) -> None:
    """Record ``root`` (written only when it is not already the newest entry; atomic, 0600)."""
    known = known_jobs_dirs()
    if known[:1] == [root]:
        return
    entries = [str(root), *(str(p) for p in known if p != root)][:_KEPT]
    target = jobs_dirs_file()
    paths.ensure_private_dir(target.parent, "rekall folder")
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, json.dumps(entries, ensure_ascii=False).encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, target)
