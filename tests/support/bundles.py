"""Fake installed extensions whose JavaScript declares a method table, for the bundle reader.

The tables come from the simulator's copy (:data:`rekall.sim.protocol.TABLES`, the other
party's), never from rekall's records, and never typed into a test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from rekall.sim import protocol as p


def minified(table: Mapping[str, int]) -> str:
    """A line of minified-looking JavaScript with the table as one object literal among others."""
    literal = json.dumps(dict(table), separators=(",", ":"))
    return (f'var e={{a:1}},t="{p.STATE_CHANGED}",n=Object.freeze({literal});'
            'function r(o){return n[o]??0}module.exports={r,x:{"y":"z"}};\n')


def install_extension(home: Path, version: str, table: Mapping[str, int] | None,
                      folder: str = ".vscode/extensions") -> Path:
    """``~/<folder>/openai.chatgpt-<version>-linux-x64`` with ``out/extension.js`` declaring ``table``
    (no table: a bundle without one)."""
    extension = home / folder / f"openai.chatgpt-{version}-linux-x64"
    (extension / "out").mkdir(parents=True, exist_ok=True)
    (extension / "package.json").write_text(json.dumps({"publisher": "openai", "name": "chatgpt",
                                                        "version": version}))
    body = minified(table) if table is not None else "module.exports={};\n"
    (extension / "out" / "extension.js").write_text(body)
    return extension


def build_table(generation: str, **changes: int) -> dict[str, int]:
    """The simulator's table of ``generation``, with methods changed by keyword (dashes as ``_``)."""
    table = dict(p.TABLES[generation])
    table.update({name.replace("_", "-"): value for name, value in changes.items()})
    return table
