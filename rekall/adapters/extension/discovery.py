"""Finding the ``codex`` binary that the VS Code extension bundles, and the extension's identity.

The extension (``openai.chatgpt``) puts its ``bin/<platform>/`` folder on the PATH of every
process it starts, e.g. ``…/openai.chatgpt-26.901.22334-darwin-arm64/bin/macos-aarch64/``.
rekall runs inside such processes, so it looks there and nowhere else: exactly one candidate
must exist, because two extension versions on PATH would make the choice a guess. Outside the
extension, ``REKALL_CODEX_BINARY`` names the binary explicitly (absolute and existing).

Everything here is a pure function of the environment, the platform and two filesystem
hooks, so Windows, macOS and Linux layouts are all unit-testable on one machine. Path rules
follow the *target* platform (``ntpath`` for win32, ``posixpath`` otherwise).
"""

from __future__ import annotations

import json
import ntpath
import os
import posixpath
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

from rekall.kernel.errors import CodexError

OVERRIDE_VAR = "REKALL_CODEX_BINARY"
EXPECTED_PUBLISHER = "openai"
EXPECTED_NAME = "chatgpt"

# An absolute PATH entry ending in openai.chatgpt-<version…>/bin/<one segment>[/]; both
# separators are accepted because Windows paths may use either.
_EXTENSION_BIN = re.compile(r"(?:^|[\\/])openai\.chatgpt-[^\\/]+[\\/]bin[\\/][^\\/]+[\\/]?$", re.IGNORECASE)

IsFile = Callable[[str], bool]
ReadText = Callable[[str], str]


class CodexBinaryNotFound(CodexError):
    code = "codex_binary_not_found"


class CodexBinaryAmbiguous(CodexError):
    code = "codex_binary_ambiguous"


class CodexBinaryOverrideInvalid(CodexError):
    code = "codex_binary_override_invalid"


class ExtensionIdentityMismatch(CodexError):
    code = "codex_extension_identity"


class ExtensionIdentity(NamedTuple):
    """Who shipped the binary, from the extension's ``package.json``."""

    publisher: str
    name: str
    #: The manifest's ``version``, or ``"unknown"``; diagnostic only, never a gate.
    version: str
    root: str


class CodexBinary(NamedTuple):
    path: str
    source: Literal["override", "path"]
    #: ``None`` for an override outside an extension folder (e.g. the npm ``@openai/codex``).
    extension: ExtensionIdentity | None

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "extension": None if self.extension is None else self.extension._asdict()}


def _pathmod(platform: str) -> Any:
    return ntpath if platform == "win32" else posixpath


def executable_name(platform: str) -> str:
    return "codex.exe" if platform == "win32" else "codex"


def _path_value(env: Mapping[str, str]) -> tuple[str, str]:
    """The PATH variable, found case-insensitively (Windows spells it ``Path``)."""
    for key, value in env.items():
        if key.lower() == "path":
            return key, value
    return "PATH", ""


def is_extension_bin_dir(entry: str, platform: str) -> bool:
    return _pathmod(platform).isabs(entry) and _EXTENSION_BIN.search(entry) is not None


def locate_codex_binary(env: Mapping[str, str], *, platform: str = sys.platform,
                        is_file: IsFile = os.path.isfile) -> tuple[str, Literal["override", "path"]]:
    """The binary's path and how it was found; raises a :class:`CodexError` subclass otherwise."""
    paths = _pathmod(platform)
    override = env.get(OVERRIDE_VAR)
    if override:
        if not paths.isabs(override):
            raise CodexBinaryOverrideInvalid(
                f"{OVERRIDE_VAR} must be an absolute path; got {override!r}",
                hint=f"set {OVERRIDE_VAR} to the absolute path of the extension-bundled "
                     f"{executable_name(platform)}")
        if not is_file(override):
            raise CodexBinaryOverrideInvalid(
                f"{OVERRIDE_VAR} points to {override!r}, which is not an existing file",
                hint=f"fix {OVERRIDE_VAR} or unset it to search PATH for the extension's bin folder")
        return override, "override"

    key, value = _path_value(env)
    delimiter = ";" if platform == "win32" else ":"
    entries = [e for e in value.split(delimiter) if e]
    shaped = [e for e in entries if is_extension_bin_dir(e, platform)]
    seen: dict[str, str] = {}
    for entry in shaped:
        candidate = paths.join(entry, executable_name(platform))
        norm = paths.normcase(paths.normpath(candidate))
        seen.setdefault(norm, candidate)
    found = [c for c in seen.values() if is_file(c)]
    if len(found) == 1:
        return found[0], "path"
    pattern = f"…/openai.chatgpt-<version>/bin/<platform>/{executable_name(platform)}"
    if not found:
        searched = ", ".join(repr(e) for e in shaped) if shaped else "none matched"
        raise CodexBinaryNotFound(
            f"no extension-bundled Codex binary found: searched {len(entries)} {key} entries for "
            f"{pattern}; extension folders on {key}: {searched}",
            hint=f"run rekall from a terminal or agent started by the Codex VS Code extension, or set "
                 f"{OVERRIDE_VAR} to the absolute path of its {executable_name(platform)}")
    raise CodexBinaryAmbiguous(
        f"{len(found)} extension-bundled Codex binaries on {key}: {', '.join(found)}; rekall will not guess",
        hint=f"set {OVERRIDE_VAR} to the one the running extension uses, or remove old extension "
             f"versions from {key}")


def _read_file(path: str) -> str:
    from rekall.store.fsread import read_limited

    return read_limited(path, limit=4 * 1024 * 1024).decode("utf-8")  # an extension's package.json


def extension_root(binary: str, platform: str) -> str:
    paths = _pathmod(platform)
    return paths.normpath(paths.join(paths.dirname(binary), "..", ".."))


def read_extension_identity(binary: str, *, platform: str = sys.platform,
                            read_text: ReadText = _read_file) -> ExtensionIdentity:
    """Read ``<extension root>/package.json`` and require publisher openai, name chatgpt."""
    root = extension_root(binary, platform)
    manifest_path = _pathmod(platform).join(root, "package.json")
    try:
        manifest = json.loads(read_text(manifest_path))
    except (OSError, ValueError) as exc:
        raise ExtensionIdentityMismatch(
            f"cannot read the extension manifest {manifest_path}: {exc}",
            hint=f"the binary must sit in the extension's bin/<platform>/ folder; otherwise set "
                 f"{OVERRIDE_VAR} to it") from None
    if not isinstance(manifest, dict):
        manifest = {}
    publisher, name = manifest.get("publisher"), manifest.get("name")
    if not (isinstance(publisher, str) and isinstance(name, str)
            and publisher.lower() == EXPECTED_PUBLISHER and name.lower() == EXPECTED_NAME):
        shown = f"{publisher if isinstance(publisher, str) else 'unknown'}.{name if isinstance(name, str) else 'unknown'}"
        raise ExtensionIdentityMismatch(
            f"unexpected extension identity {shown} in {manifest_path}; expected "
            f"{EXPECTED_PUBLISHER}.{EXPECTED_NAME}",
            hint=f"point {OVERRIDE_VAR} at the codex binary bundled with the openai.chatgpt extension")
    version = manifest.get("version")
    return ExtensionIdentity(publisher, name, version if isinstance(version, str) and version else "unknown", root)


def discover_codex_binary(env: Mapping[str, str] | None = None, *, platform: str = sys.platform,
                          is_file: IsFile = os.path.isfile, read_text: ReadText = _read_file) -> CodexBinary:
    """Locate the binary and identify its extension.

    A binary found on PATH must belong to ``openai.chatgpt``. An override is checked the same
    way when it sits in an extension-shaped folder; elsewhere it is taken as a standalone CLI
    and reported with ``extension=None``.
    """
    path, source = locate_codex_binary(os.environ if env is None else env, platform=platform, is_file=is_file)
    bin_dir = _pathmod(platform).dirname(path)
    if source == "path" or is_extension_bin_dir(bin_dir, platform):
        return CodexBinary(path, source, read_extension_identity(path, platform=platform, read_text=read_text))
    return CodexBinary(path, source, None)
