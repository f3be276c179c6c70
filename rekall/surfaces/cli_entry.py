"""Where ``rekall`` starts: the answers a trusted view gives at once, else the whole CLI.

``rekall hook session-start`` (the plugin's hook, :mod:`rekall.surfaces.session_hook`) runs here without the CLI.
``rekall status --json`` and ``rekall history --json`` are what scripts and agents poll. When
the view on disk can be served as is (:mod:`rekall.store.views`: sealed, its journals
unchanged, its jobs ended; or nothing on disk for the thread) they are answered here, before
argparse, logging, attrs or the store are imported, with exactly the bytes the full command
prints (tests/surfaces/test_cli_entry.py holds both to that). Everything else, every error included, goes
to :func:`rekall.surfaces.cli.main`.

Why a door beside the CLI: those imports cost more than ``bench/lifecycle.py`` allows a poll
(its budgets ``status_cli_ms`` and ``status_no_job_cli_ms``). What is
served here is only what the full path wrote or would write (the views), never a rule of its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from rekall.kernel.errors import RekallError
from rekall.kernel.ids import is_uuid
from rekall.store.paths import JobPaths, reader_dirs
from rekall.store.views import left_out_note, list_text, served_history, trusted_status


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["hook", "session-start"]:  # Codex waits on it before the model request: the light path only
        from rekall.surfaces.session_hook import main as hook

        return hook()
    answer = answer_from_views(argv, os.environ)
    if answer is None:
        from rekall.surfaces.cli import main as full

        return full(argv)
    from rekall.kernel.characters import printable_json

    out, err = answer
    sys.stdout.write(printable_json(out))
    sys.stderr.write(err)
    return 0


def answer_from_views(argv: list[str], env: Mapping[str, str]) -> tuple[str, str] | None:
    """``(stdout, stderr)`` of a command answered from a trusted view, or ``None``: run the CLI."""
    verb, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if verb == "status":
            return _status(args, env)
        if verb == "history":
            return _history(args, env)
    except (RekallError, OSError):  # the CLI reports it, in its words
        return None
    return None


def _status(args: list[str], env: Mapping[str, str]) -> tuple[str, str] | None:
    options = _options(args, valued=(), positional=True)
    if options is None or "--json" not in options:
        return None
    thread = options.get("") or env.get("CODEX_THREAD_ID") or ""
    # A prefix, a wrong id or none at all gets None: the CLI resolves or explains it.
    served = trusted_status(env, thread)
    if served is None or "message" in served[0]:  # the CLI words a message for a terminal
        return None
    return served[1] + "\n", ""


def _history(args: list[str], env: Mapping[str, str]) -> tuple[str, str] | None:
    options = _options(args, valued=("--limit", "--thread"), positional=False)
    if options is None or "--json" not in options:
        return None
    limit, thread = options.get("--limit", "20"), options.get("--thread")
    if not (limit.isascii() and limit.isdigit()) or (thread is not None and not _full_id(thread)):
        return None
    root, _, node_dirs = reader_dirs(env)
    rows = None if node_dirs else served_history(JobPaths(root), thread)  # the Node version's jobs: the CLI
    if rows is None:
        return None
    shown = rows[: int(limit)] if int(limit) else rows
    left_out = len(rows) - len(shown)
    return list_text([row.text for row in shown]) + "\n", left_out_note(left_out) if left_out else ""


def _options(args: list[str], *, valued: tuple[str, ...], positional: bool) -> dict[str, str] | None:
    """``--json``, each of ``valued`` with its value, and one positional (under ``""``), each at
    most once; ``None`` for anything else (the CLI parses it)."""
    found: dict[str, str] = {}
    words = iter(args)
    for word in words:
        if word == "--json":
            key, value = word, ""
        elif word in valued:
            key, value = word, next(words, None)
            if value is None or value.startswith("-"):
                return None
        elif positional and not word.startswith("-"):
            key, value = "", word
        else:
            return None
        if key in found:
            return None
        found[key] = value
    return found


def _full_id(value: str) -> bool:
    """A whole UUID as rekall stores it (lower case): nothing for the CLI to resolve."""
    return is_uuid(value) and value == value.lower()
