"""Reading the installed extension's own method table from its JavaScript.

The table is one object literal mapping method names to integers, found by searching the
bundle for ``"thread-stream-state-changed":`` (``extension-generations.md`` §1). It is read,
never run: the bytes around the key are matched against ``{"name": 123, ...}`` and nothing
else is accepted. Every read is bounded (:data:`MAX_SCAN_BYTES`: a bundle can be tens of MB).

Where installs live is data (:data:`EXTENSION_FOLDERS`, :data:`DESKTOP_BUNDLES`), plus the
extension folder of the ``codex`` binary rekall discovers. Results are cached by file
identity (device, inode, size, modification time) in ``~/.cache/rekall/bundle-tables.json``;
read-only verbs use the cache when it exists and never create it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rekall.adapters.extension.generations import STATE_CHANGED

#: Folders holding VS Code extensions, relative to HOME: (what, folder).
EXTENSION_FOLDERS: tuple[tuple[str, str], ...] = (
    ("VS Code", ".vscode/extensions"),
    ("VS Code Insiders", ".vscode-insiders/extensions"),
    ("VS Code Server", ".vscode-server/extensions"),
    ("VS Code Server Insiders", ".vscode-server-insiders/extensions"),
    ("Remote-SSH", ".vscode-remote/extensions"),
)
EXTENSION_PATTERN = "openai.chatgpt-*"
#: The extension's JavaScript, relative to its folder.
EXTENSION_SCRIPTS: tuple[str, ...] = ("out/extension.js", "webview/assets/*.js")
#: The Codex Desktop app's archive: (what, path; ``~`` is HOME, ``%LOCALAPPDATA%`` from env).
DESKTOP_BUNDLES: tuple[tuple[str, str], ...] = (
    ("Codex Desktop", "/Applications/Codex.app/Contents/Resources/app.asar"),
    ("Codex Desktop", "~/Applications/Codex.app/Contents/Resources/app.asar"),
    ("Codex Desktop", "%LOCALAPPDATA%/Programs/Codex/resources/app.asar"),
)

NEEDLE = f'"{STATE_CHANGED}":'.encode()
MAX_SCAN_BYTES = 128 * 1024 * 1024
_CHUNK = 4 * 1024 * 1024
#: How far from the key the table's braces may be.
_WINDOW = 16 * 1024
_TABLE_BYTES = frozenset(b' \t\r\n"_.:,/-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ')
_ENTRIES = re.compile(rb'\s*"[\w./-]+"\s*:\s*\d{1,6}\s*(?:,\s*"[\w./-]+"\s*:\s*\d{1,6}\s*)*,?\s*')
_ENTRY = re.compile(rb'"([\w./-]+)"\s*:\s*(\d{1,6})')
_VERSION_IN_NAME = re.compile(r"openai\.chatgpt-(\d+\.\d+\.\d+)")
CACHE_NAME = "bundle-tables.json"


class Install(NamedTuple):
    """One installed extension (or desktop app) and what its bundle says."""

    what: str
    path: str
    version: str
    #: The method tables read: one normally; none (see ``problem``); several that disagree.
    tables: tuple[Mapping[str, int], ...]
    #: Why not exactly one table was read (unreadable, none found, several that disagree).
    problem: str | None = None

    @property
    def table(self) -> Mapping[str, int] | None:
        """The table, when exactly one was read."""
        return self.tables[0] if len(self.tables) == 1 else None

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "path": self.path, "version": self.version,
                "table": dict(self.table) if self.table is not None else None,
                "tables": [dict(t) for t in self.tables], "problem": self.problem}


def tables_in(data: bytes) -> list[dict[str, int]]:
    """Every ``{"name": int, ...}`` literal around an occurrence of the key, in order."""
    found: list[dict[str, int]] = []
    start = 0
    while (at := data.find(NEEDLE, start)) >= 0:
        start = at + len(NEEDLE)
        table = _literal_around(data, at)
        if table is not None and table not in found:
            found.append(table)
    return found


def _literal_around(data: bytes, at: int) -> dict[str, int] | None:
    # Back to the nearest "{" with only table characters between it and the key.
    open_at = at - 1
    while open_at >= max(0, at - _WINDOW) and data[open_at] in _TABLE_BYTES:
        open_at -= 1
    close = data.find(b"}", at, at + _WINDOW)
    if open_at < 0 or data[open_at:open_at + 1] != b"{" or close < 0:
        return None
    inner = data[open_at + 1:close]
    if not _ENTRIES.fullmatch(inner):
        return None
    return {name.decode(): int(value) for name, value in _ENTRY.findall(inner)}


def scan_file(path: Path) -> list[dict[str, int]]:
    """The tables in one file, reading at most :data:`MAX_SCAN_BYTES` in chunks."""
    found: list[dict[str, int]] = []
    overlap = b""
    read = 0
    with open(path, "rb") as handle:
        while read < MAX_SCAN_BYTES and (chunk := handle.read(min(_CHUNK, MAX_SCAN_BYTES - read))):
            read += len(chunk)
            data = overlap + chunk
            for table in tables_in(data):
                if table not in found:
                    found.append(table)
            overlap = data[-2 * _WINDOW:]
    return found


def _identity(path: Path) -> str:
    st = os.stat(path)
    return f"{path}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}"


class TableCache:
    """Tables by file identity. ``writable=False`` (read-only verbs): use it if it exists, never create."""

    def __init__(self, path: Path, *, writable: bool) -> None:
        self.path, self.writable = path, writable
        self.entries: dict[str, list[dict[str, int]]] = {}
        self.changed = False
        try:
            raw = json.loads(self.path.read_bytes()[: 4 * 1024 * 1024])
        except (OSError, ValueError):
            raw = {}
        if isinstance(raw, dict):
            for key, tables in raw.items():
                if isinstance(tables, list) and all(_is_table(t) for t in tables):
                    self.entries[key] = tables

    def tables(self, path: Path) -> list[dict[str, int]]:
        key = _identity(path)
        if key not in self.entries:
            self.entries[key] = scan_file(path)
            self.changed = True
        return self.entries[key]

    def save(self) -> None:
        if not (self.writable and self.changed):
            return
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(self.entries, out)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a cache is an optimisation; reading again next time is correct too


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and type(v) is int for k, v in value.items())


def _home(env: Mapping[str, str]) -> Path | None:
    home = env.get("HOME") or env.get("USERPROFILE")
    return Path(home) if home else None


def cache_path(env: Mapping[str, str]) -> Path | None:
    base = env.get("XDG_CACHE_HOME")
    home = _home(env)
    if base:
        return Path(base) / "rekall" / CACHE_NAME
    return home / ".cache" / "rekall" / CACHE_NAME if home else None


def _extension_version(folder: Path) -> str:
    try:
        manifest = json.loads(folder.joinpath("package.json").read_bytes()[: 4 * 1024 * 1024])
        version = manifest.get("version") if isinstance(manifest, dict) else None
        if isinstance(version, str) and version:
            return version
    except (OSError, ValueError):
        pass
    match = _VERSION_IN_NAME.search(folder.name)
    return match.group(1) if match else "unknown"


def _extension_folders(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    home = _home(env)
    found: list[tuple[str, Path]] = []
    if home is not None:
        for what, folder in EXTENSION_FOLDERS:
            for path in sorted((home / folder).glob(EXTENSION_PATTERN)):
                if path.is_dir():
                    found.append((what, path))
    binary_folder = _codex_binary_extension(env)
    if binary_folder is not None and all(binary_folder.resolve() != p.resolve() for _, p in found):
        found.append(("the codex binary's extension", binary_folder))
    return found


def _codex_binary_extension(env: Mapping[str, str]) -> Path | None:
    from rekall.adapters.extension.discovery import discover_codex_binary
    from rekall.kernel.errors import RekallError

    try:
        binary = discover_codex_binary(env)
    except (RekallError, OSError, ValueError):
        return None
    return Path(binary.extension.root) if binary.extension is not None else None


def _desktop_bundles(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    home = _home(env)
    found = []
    for what, spelled in DESKTOP_BUNDLES:
        if spelled.startswith("~/"):
            if home is None:
                continue
            path = home / spelled[2:]
        elif spelled.startswith("%LOCALAPPDATA%/"):
            if not env.get("LOCALAPPDATA"):
                continue
            path = Path(env["LOCALAPPDATA"]) / spelled.split("/", 1)[1]
        else:
            path = Path(spelled)
        if path.is_file():
            found.append((what, path))
    return found


def _install(what: str, where: Path, version: str, files: list[Path], cache: TableCache) -> Install:
    if not files:
        return Install(what, str(where), version, (), "no JavaScript bundle found in it")
    tables: list[dict[str, int]] = []
    try:
        for path in files:
            for table in cache.tables(path):
                if table not in tables:
                    tables.append(table)
    except OSError as exc:
        return Install(what, str(where), version, (), f"cannot read its bundle: {exc.strerror or exc}")
    if not tables:
        return Install(what, str(where), version, (),
                       f"no method table (no {NEEDLE.decode()} object literal) in its bundle")
    if len(tables) > 1:
        return Install(what, str(where), version, tuple(tables),
                       f"its bundle holds {len(tables)} method tables that disagree")
    return Install(what, str(where), version, (tables[0],))


def find_installs(env: Mapping[str, str], *, write_cache: bool) -> list[Install]:
    """Every install in the known places, with its table or why none was read."""
    where = cache_path(env)
    cache = TableCache(where, writable=write_cache) if where is not None else TableCache(Path("/nonexistent"),
                                                                                          writable=False)
    installs = []
    for what, folder in _extension_folders(env):
        files = [p for pattern in EXTENSION_SCRIPTS for p in sorted(folder.glob(pattern)) if p.is_file()]
        installs.append(_install(what, folder, _extension_version(folder), files, cache))
    for what, archive in _desktop_bundles(env):
        installs.append(_install(what, archive, "unknown", [archive], cache))
    cache.save()
    return installs
