"""The ``rekall`` command line.

Every verb takes ``--json`` for scripts; without it, output is written for people with
rich. Exit codes: 0 success, 1 a failed or refused operation, 2 a usage error. The thread
defaults to ``CODEX_THREAD_ID`` and is never guessed.

Handlers are thin: they parse, call the shared service layer (the same one the MCP tools
use), and print. Imports of heavier modules happen inside the handlers so that
``rekall status`` starts fast: a handler imports its printer (rich) only after ``--json``
has been ruled out.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from rekall.kernel.errors import RekallError, UsageError, as_rekall_error

if TYPE_CHECKING:
    from rich.console import Console

#: A verb that waits on I/O is a coroutine function: :func:`main` runs it on rekall's loop.
Handler = Callable[[argparse.Namespace], int | Coroutine[Any, Any, int]]


def _print_json(value: Any) -> None:
    from rekall.kernel.characters import printable_json

    sys.stdout.write(printable_json(json.dumps(value, indent=2, ensure_ascii=False, default=str)) + "\n")


def _console() -> Console:
    from rekall.surfaces.render import WholeWords

    return WholeWords()


def _thread_arg(args: argparse.Namespace) -> str:
    """The thread id from the argument, else ``CODEX_THREAD_ID``; never guessed."""
    value = getattr(args, "thread", None) or os.environ.get("CODEX_THREAD_ID") or None
    if not value:
        raise UsageError(
            "no thread id given",
            hint="pass THREAD or set CODEX_THREAD_ID; rekall never guesses a thread",
        )
    return value


#: The service speaks to agents in MCP tool names; at a terminal the same step is a verb.
_TOOL_VERBS = {"compaction_status": "`rekall status`", "probe_compaction": "`rekall probe`",
               "schedule_compaction": "`rekall schedule`", "cancel_compaction": "`rekall cancel`",
               "save_checkpoint": "`rekall checkpoint`"}
_TOOL_NAME = re.compile(r"\b(" + "|".join(_TOOL_VERBS) + r")\b")


def for_terminal(text: str) -> str:
    """``text`` with MCP tool names replaced by the CLI verbs that do the same."""
    return _TOOL_NAME.sub(lambda match: _TOOL_VERBS[match[1]], text)


def _worded(value: Any) -> Any:
    """``value`` with its ``message`` worded for a terminal (CLI verbs instead of MCP tool names)."""
    if isinstance(value, dict) and isinstance(value.get("message"), str):
        return {**value, "message": for_terminal(value["message"])}
    return value


def _emitted_json(args: argparse.Namespace, value: Any) -> bool:
    """With ``--json``, print ``value`` for scripts and say so. Otherwise the handler imports its
    printer (so that ``--json`` never loads rich) and calls it with :func:`_show`."""
    if args.json:
        _print_json(value)
    return bool(args.json)


def _show(printer: Callable[[Any, Console], None], value: Any) -> int:
    from rekall.surfaces.render import printable_value

    printer(printable_value(value), _console())
    return 0


# --- verbs -----------------------------------------------------------------------------


def cmd_states(args: argparse.Namespace) -> int:
    from rekall.states.render import render

    fmt = "json" if args.json else args.format
    sys.stdout.write(render(fmt))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from rekall.surfaces.explain import build_explanation
    from rekall.usecases.idprefix import resolve_job_or_thread
    from rekall.store import JobStore

    explanation = _worded(build_explanation(JobStore.open_reader(), resolve_job_or_thread(args.job)))
    if _emitted_json(args, explanation):
        return 0
    from rekall.surfaces.explain import print_explanation

    return _show(print_explanation, explanation)


def cmd_history(args: argparse.Namespace) -> int:
    from rekall.surfaces.history import collect_history, print_history
    from rekall.usecases.idprefix import resolve_thread
    from rekall.store import JobStore

    if args.limit < 0:
        raise UsageError(f"--limit must be 0 (all) or more; got {args.limit}", hint="pass --limit 20, or 0 for all")
    thread = resolve_thread(args.thread) if args.thread else None
    rows = collect_history(JobStore.open_reader(), thread=thread, since=args.since)
    shown = rows[:args.limit] if args.limit else rows
    left_out = len(rows) - len(shown)
    if args.json:
        _print_json(shown)
        if left_out:
            from rekall.store.views import left_out_note

            sys.stderr.write(left_out_note(left_out))
        return 0
    from rekall.surfaces.render import printable_value

    console = _console()
    print_history(printable_value(shown), console, left_out=left_out)
    from rekall.surfaces.history import print_checkpoints

    print_checkpoints(JobStore.open_reader(), console, thread=thread)
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from rekall.store import JobStore
    from rekall.store.prune import check_rules, prune

    older_than, keep = check_rules(args.older_than, args.keep)
    result = _worded(prune(JobStore.open_reader(), older_than=older_than, keep=keep, dry_run=args.dry_run))
    if _emitted_json(args, result):
        return 0
    from rekall.surfaces.history import print_prune

    return _show(print_prune, result)


async def cmd_probe(args: argparse.Namespace) -> int:
    from rekall.usecases import service

    result = _worded(await service.probe(_thread_arg(args)))
    if _emitted_json(args, result):
        return 0
    from rekall.surfaces.render import print_probe

    return _show(print_probe, result)


async def cmd_schedule(args: argparse.Namespace) -> int:
    from rekall.usecases import service
    from rekall.store import read_handoff_file

    handoff = read_handoff_file(args.handoff) if args.handoff else None
    result = _worded(await service.schedule(_thread_arg(args), handoff))
    if _emitted_json(args, result):
        return 0
    from rekall.surfaces.render import print_scheduled

    return _show(print_scheduled, result)


def cmd_checkpoint(args: argparse.Namespace) -> int:
    import asyncio

    from rekall.usecases import checkpoint
    from rekall.store import read_handoff_file

    if bool(args.clear) == bool(args.handoff):
        raise UsageError("checkpoint: give exactly one of --handoff FILE and --clear",
                         hint="`rekall checkpoint THREAD --handoff checkpoint.json` saves one; --clear ends it")
    thread = _thread_arg(args)
    result = _worded(checkpoint.clear_checkpoint(thread) if args.clear else
                     asyncio.run(checkpoint.save_checkpoint(thread, read_handoff_file(args.handoff))))
    if _emitted_json(args, result):
        return 0
    from rekall.surfaces.render import print_checkpoint

    return _show(print_checkpoint, result)


def cmd_status(args: argparse.Namespace) -> int:
    from rekall.usecases import service
    from rekall.usecases.idprefix import resolve_thread

    thread = resolve_thread(_thread_arg(args))
    if not args.watch:
        status = _worded(service.status_reply(thread))
        if _emitted_json(args, status):
            return 0
        from rekall.surfaces.render import print_job

        return _show(print_job, status)
    from rekall.surfaces.render import watch_exit_status, watch_job

    result = watch_job(lambda: service.status_reply_with_trail(thread), _console(), quiet=args.json)
    if args.json:
        _print_json(result)
    return watch_exit_status(result)


def cmd_cancel(args: argparse.Namespace) -> int:
    from rekall.usecases import service
    from rekall.usecases.idprefix import resolve_job, resolve_thread

    own_thread, job = resolve_job(args.job)
    # An explicit --thread wins; else the job's own thread (a fact from its journal, not a guess).
    thread = resolve_thread(args.thread) if args.thread else own_thread or _thread_arg(args)
    result = _worded(service.cancel(thread, job))
    if _emitted_json(args, result):
        return 0
    from rekall.surfaces.render import print_cancelled

    return _show(print_cancelled, result)


def cmd_mcp(args: argparse.Namespace) -> int:
    from rekall.surfaces.mcp_light import run_stdio  # the SDK is loaded only for what the light path does not serve

    return run_stdio()


def cmd_hook(args: argparse.Namespace) -> int:
    from rekall.surfaces.session_hook import main as hook  # what rekall.surfaces.cli_entry runs before the CLI is loaded

    return hook()


def cmd_demo(args: argparse.Namespace) -> int:
    from rekall.surfaces.demo import run_demo

    return run_demo(as_json=args.json, keep=args.keep)


async def cmd_doctor(args: argparse.Namespace) -> int:
    """Exits 1 when any row is RED or rekall can serve no host here."""
    from rekall.usecases.doctor import diagnose

    report = await diagnose()
    if not _emitted_json(args, report.to_json()):
        from rekall.surfaces.render import print_report

        _show(print_report, report)
    return 0 if report.ok else 1


async def cmd_setup(args: argparse.Namespace) -> int:
    """Each step said as it goes, then doctor's verdict; 0 when every step worked."""
    from rekall.usecases.doctor import diagnose
    from rekall.usecases.setup import Options, refuse_without_an_answer, run_setup

    options = Options(yes=args.yes, full_auto=args.full_auto, remove=args.remove)
    refuse_without_an_answer(options, sys.stdin.isatty())

    def say(line: str) -> None:
        print(line, flush=True)

    def ask(question: str) -> bool:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")

    await run_setup(options, say, ask)
    from rekall.surfaces.render import print_verdict

    print_verdict(await diagnose(), _console())
    return 0


def cmd_protocol(args: argparse.Namespace) -> int:
    from rekall.adapters.extension.report import run_protocol

    return run_protocol(as_json=args.json)


def cmd_sim(args: argparse.Namespace) -> int:
    from rekall.sim.cli import run_sim

    return run_sim(args)


# --- parser ----------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing usage and exiting,
    so that ``--json`` gets a JSON error like every other failure."""

    def error(self, message: str) -> NoReturn:
        verb = self.prog.partition(" ")[2]
        raise UsageError(f"{verb}: {message}" if verb else message, hint=f"run `{self.prog} --help` for the usage")


def _add(sub: argparse._SubParsersAction, name: str, handler: Handler, help: str, *,
         json_flag: bool = True) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help, description=help)
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(handler=handler)
    return parser


def build_parser() -> argparse.ArgumentParser:
    from rekall import __version__

    parser = _Parser(
        prog="rekall", description="Compact a Codex conversation at a checkpoint and resume it once, with a "
        "verified handoff. Exit codes: 0 success, 1 a failed or refused operation, 2 a usage error.")
    parser.add_argument("--version", action="version", version=f"rekall {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")

    p = _add(sub, "probe", cmd_probe, "read-only preflight: reach the thread's owner and check compatibility")
    p.add_argument("thread", metavar="THREAD", nargs="?", help="thread id (default: $CODEX_THREAD_ID)")

    p = _add(sub, "schedule", cmd_schedule, "schedule one compaction (and optionally one continuation)")
    p.add_argument("thread", metavar="THREAD", nargs="?", help="thread id (default: $CODEX_THREAD_ID)")
    p.add_argument("--handoff", metavar="FILE", help="handoff JSON file (- for standard input): summary, preserve, "
                   "discard, nextStep, resume")

    p = _add(sub, "checkpoint", cmd_checkpoint, "save the thread's checkpoint, delivered after each later "
             "compaction that no job delivers for (or --clear it)")
    p.add_argument("thread", metavar="THREAD", nargs="?", help="thread id (default: $CODEX_THREAD_ID)")
    p.add_argument("--handoff", metavar="FILE", help="the checkpoint's handoff JSON file (- for standard input): "
                   "summary, preserve, discard, nextStep, and resume false or left out")
    p.add_argument("--clear", action="store_true", help="end the thread's checkpoint (its history stays)")

    p = _add(sub, "status", cmd_status, "show the thread's latest job")
    p.add_argument("thread", metavar="THREAD", nargs="?",
                   help="thread id or a unique prefix of at least 8 characters (default: $CODEX_THREAD_ID)")
    p.add_argument("--watch", action="store_true", help="follow the job live until it ends")

    p = _add(sub, "cancel", cmd_cancel, "cancel the pending dispatches of a job")
    p.add_argument("job", metavar="JOB", help="the job id, or a unique prefix of at least 8 characters")
    p.add_argument("--thread", help="thread id (default: the job's own thread, else $CODEX_THREAD_ID)")

    # The MCP server speaks JSON-RPC whatever is asked: a --json there would mean nothing, so it is refused.
    _add(sub, "mcp", cmd_mcp, "run the MCP server on stdio", json_flag=False)
    p = _add(sub, "hook", cmd_hook, "run a Codex hook of the plugin (reads Codex's hook input on stdin)",
             json_flag=False)
    p.add_argument("event", choices=("session-start",), help="session-start: the SessionStart(compact) hook that "
                   "carries a job's handoff into the first model request after its compaction, and the thread's "
                   "checkpoint after any other compaction")
    p = _add(sub, "demo", cmd_demo, "run a full job against the built-in simulated owner")
    p.add_argument("--keep", action="store_true", help="keep the demo's jobs directory afterwards")
    _add(sub, "doctor", cmd_doctor, "check the installation, one row per concern")
    p = _add(sub, "setup", cmd_setup, "register rekall with Codex (plugin, hook trust) and end with doctor's verdict",
             json_flag=False)
    p.add_argument("--yes", action="store_true", help="answer yes to every question (for scripts)")
    p.add_argument("--full-auto", action="store_true", help="let rekall's acting tools run without an approval "
                   "prompt, also under approval_policy never")
    p.add_argument("--remove", action="store_true", help="undo what setup does: the hook's trust, the approval "
                   "settings, the plugin and its marketplace (or the hand registration)")

    p = _add(sub, "states", cmd_states, "print the job lifecycle machine")
    p.add_argument("--format", choices=("mermaid", "markdown", "json"), default="markdown")

    p = _add(sub, "explain", cmd_explain, "show how a job moved through its states, and why")
    p.add_argument("job", metavar="JOB", help="a job id, or a thread id meaning its latest job (a unique prefix "
                   "of at least 8 characters will do)")

    p = _add(sub, "history", cmd_history, "list past jobs, newest first")
    p.add_argument("--thread", help="only this thread (a unique prefix of at least 8 characters will do)")
    p.add_argument("--since", help="only jobs created on or after this ISO date or time")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="show the newest N jobs (default 20; 0: all)")

    p = _add(sub, "prune", cmd_prune, "remove the files of old, ended jobs (never an unfinished or locked one)")
    p.add_argument("--older-than", metavar="DAYS", help="only jobs that ended at least DAYS days ago")
    p.add_argument("--keep", metavar="N", help="keep the N newest jobs of each thread")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")

    _add(sub, "protocol", cmd_protocol, "show the IPC generations rekall knows and the installed extension's table")

    p = _add(sub, "sim", cmd_sim, "run the simulated extension owner for manual use")
    p.add_argument("--socket", help="Unix socket path to listen on (default: a private temp dir)")
    p.add_argument("--backend", choices=("scripted", "codex"), default="scripted")
    p.add_argument("--generation", default="26.9xx",
                   help="the extension build to play: 26.9xx (default) or 26.721 (rekall protocol lists them)")

    return parser


class _NoteHandler(logging.Handler):
    """The store's warnings (a stale lock removed, a directory tightened), said as rekall notes.

    Without a handler Python prints them bare; the current ``sys.stderr`` is looked up on
    each note so that a redirected stream is honoured.
    """

    def emit(self, record: logging.LogRecord) -> None:
        from rekall.kernel.characters import printable
        from rekall.kernel.wrapping import terminal_width, wrap

        lines = wrap(printable(record.getMessage()), terminal_width(sys.stderr), first="rekall: note: ", rest="  ")
        sys.stderr.write("".join(line + "\n" for line in lines))


_NOTES = _NoteHandler(logging.WARNING)


def _fail(error: RekallError, as_json: bool) -> int:
    """Print ``error`` (with no traceback: every failure reaches the user this way)."""
    message, hint = for_terminal(error.message), error.hint and for_terminal(error.hint)
    if as_json:
        _print_json({"error": {**error.to_dict(), "message": message, **({"hint": hint} if hint else {})}})
    else:
        from rekall.kernel.characters import printable
        from rekall.kernel.wrapping import terminal_width, wrap

        width = terminal_width(sys.stderr)
        lines = wrap(printable(message), width, first="rekall: ", rest="  ")
        if hint:
            lines += wrap(printable(hint), width, first="  next: ", rest="        ")
        sys.stderr.write("".join(line + "\n" for line in lines))
    return error.exit_status


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:  # internal, started by schedule: read by the worker itself (rekall.worker.start)
        from rekall.worker.start import main as worker_main

        return worker_main(argv[1:])
    parser = build_parser()
    if _NOTES not in logging.getLogger("rekall").handlers:
        logging.getLogger("rekall").addHandler(_NOTES)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _fail(exc, "--json" in argv)
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    if not getattr(args, "handler", None):
        if args_json := "--json" in argv:
            return _fail(UsageError("no verb given", hint="run `rekall --help` for the verbs"), args_json)
        parser.print_help(sys.stderr)
        return 2
    try:
        return _run(args.handler(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the boundary: a clear error with a code, never a traceback
        return _fail(_explained(exc, args.verb), getattr(args, "json", False))


def _run(outcome: int | Coroutine[Any, Any, int]) -> int:
    """A verb's exit status, its coroutine run on the loop that wakes up inside Codex's sandbox too."""
    if isinstance(outcome, int):
        return outcome
    from rekall.kernel.loop import run

    return run(outcome)


def _explained(exc: Exception, verb: str) -> RekallError:
    """``exc`` as rekall's error; a refusal of Codex's sandbox is named as such, whatever the verb."""
    from rekall.kernel.sandbox import caused_by_sandbox, sandbox_error

    error = as_rekall_error(exc)
    return sandbox_error(verb, error) if caused_by_sandbox(exc) else error
