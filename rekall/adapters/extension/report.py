"""``rekall protocol``: the generations rekall knows, and the installed extension's table
with its differences from each (read-only: it never creates the bundle cache)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rekall.adapters.extension import generations as gen
from rekall.adapters.extension.choice import choose
from rekall.kernel.wrapping import terminal_width, wrap


def protocol_report(env: Any = None) -> dict[str, Any]:
    env = os.environ if env is None else env
    chosen = choose(env, write_cache=False)
    return {
        "generations": [{"name": g.name, "builds": g.builds, "baseVersions": dict(g.base_versions),
                         "ownerDiscovery": g.owner_discovery, "followerRouting": g.follower_routing,
                         "startTurn": g.start_turn_shape, "source": g.source} for g in gen.GENERATIONS],
        "installs": [{**i.to_json(), "differences": {g.name: gen.differences(i.table, g) for g in gen.GENERATIONS}
                      if i.table is not None else None} for i in chosen.installs],
        "choice": chosen.to_json(),
    }


def _text(report: dict[str, Any], width: int | None = None) -> str:
    """The report for people, wrapped between words at ``width`` (a line's continuation indented
    under its head, so that a path or a method name is never split)."""
    lines: list[tuple[int, str]] = [
        (0, "Known generations (base versions; a follower request with an envelope hostId is sent at base + 1):")]
    for g in report["generations"]:
        table = ", ".join(f"{m} {v}" for m, v in g["baseVersions"].items())
        lines += [(2, f"{g['name']} ({g['builds']}): {table}"),
                  (4, f"owner discovery: {'yes' if g['ownerDiscovery'] else 'no'}; follower requests: "
                      f"{g['followerRouting']}; start-turn: {g['startTurn']}; from {g['source']}")]
    if not report["installs"]:
        lines.append((0, "No installed extension found (VS Code, Insiders, Server, Remote-SSH folders, Codex Desktop, "
                         "the codex binary's extension)."))
    for install in report["installs"]:
        lines.append((0, f"Installed: {install['what']} {install['version']} at {install['path']}"))
        if install["table"] is None:
            lines.append((2, f"no table: {install['problem']}"))
            continue
        lines.append((2, "table: " + ", ".join(f"{m} {v}" for m, v in install["table"].items())))
        for name, differences in install["differences"].items():
            lines.append((2, f"vs {name}: " + ("matches" if not differences else "; ".join(differences))))
    choice = report["choice"]
    if choice["refusal"]:
        lines.append((0, f"Refused: {choice['refusal']}"))
    else:
        decided = choice["generation"] or f"the owner's answer among {' and '.join(choice['candidates'])}"
        lines.append((0, f"Chosen: {decided} ({choice['reason']})"))
    return "".join(f"{shown}\n" for indent, text in lines
                   for shown in wrap(text, width, first=" " * indent, rest=" " * (indent + 2)))


def run_protocol(*, as_json: bool) -> int:
    report = protocol_report()
    width = terminal_width(sys.stdout) or 80  # rich's width too when the output is no terminal
    sys.stdout.write(json.dumps(report, indent=2) + "\n" if as_json else _text(report, width))
    return 1 if report["choice"]["refusal"] else 0
