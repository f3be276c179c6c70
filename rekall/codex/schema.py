"""The compatibility check against a real Codex binary's public schema, with a cache.

``check_compatibility(binary)`` runs ``<binary> app-server generate-json-schema --out <dir>``
in a private temporary directory (always removed, also on timeout or failure), runs the checks
of :mod:`rekall.codex.schema_checks` on the files it wrote, and returns a :class:`SchemaReport`.

Generating takes a subprocess and reading a few hundred kilobytes of JSON, so the report is
cached by the binary's identity: its real path, size, modification time (ns) and the version
it reports with ``--version``. Any change to one of them is a different binary and misses the
cache. The cache lives in ``cache_dir`` (default: ``$CODEX_HOME/tools/rekall/schema-cache``,
next to the Codex installation it describes), one file per identity, the directory 0700 and
the files 0600, written atomically. A cache file that cannot be read or does not match is
ignored and replaced; it can never make an incompatible binary look compatible, because the
identity inside it must equal the binary's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from rekall.codex.schema_checks import APP_SERVER_CHECKS, CHECKS, SchemaCheck, Verdict, overall_verdict, run_checks
from rekall.kernel.environment import codex_home
from rekall.store.fsread import read_limited, read_private

#: Size limits on what the schema check reads (every file rekall reads has one).
SCHEMA_FILE_LIMIT = 64 * 1024 * 1024
CACHE_RECORD_LIMIT = 4 * 1024 * 1024
from rekall.kernel.errors import CodexError
from rekall.store.fsio import FileOps

CACHE_FORMAT = 1
_VERSION = re.compile(r"(\d+\.\d+\.\d+[0-9A-Za-z.+-]*)")


class SchemaGenerationFailed(CodexError):
    code = "codex_schema_generation_failed"


class SchemaIncompatible(CodexError):
    code = "codex_schema_incompatible"


@attrs.frozen
class BinaryIdentity:
    """What makes two binaries the same for caching purposes."""

    realpath: str
    size: int
    mtime_ns: int
    version: str

    def cache_name(self) -> str:
        digest = hashlib.sha256(json.dumps(attrs.asdict(self), sort_keys=True).encode()).hexdigest()
        return f"schema-{digest[:32]}.json"


@attrs.frozen
class SchemaReport:
    #: Kept under the key ``status`` in the cache file and in probe's reply.
    verdict: Verdict
    checks: tuple[SchemaCheck, ...]
    binary: BinaryIdentity
    #: When the schema was generated (UTC, ISO 8601); older than now when ``from_cache``.
    generated_at: str
    from_cache: bool = False

    @property
    def failed(self) -> tuple[SchemaCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def to_json(self) -> dict[str, Any]:
        return _converter.unstructure(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SchemaReport:
        return _converter.structure(data, cls)

    def raise_unless_compatible(self) -> SchemaReport:
        """Return self when compatible, else raise :class:`SchemaIncompatible` naming each failed check."""
        if self.verdict == "compatible":
            return self
        failures = "; ".join(f"{c.name}: {c.detail} ({c.file}#{c.pointer})" for c in self.failed)
        raise SchemaIncompatible(
            f"Codex {self.binary.version} at {self.binary.realpath} changed its public protocol: {failures}",
            hint="update rekall, or use a Codex version rekall supports; run `rekall probe` for details")


_converter = cattrs.Converter(forbid_extra_keys=True)
_as_written = {"verdict": override(rename="status")}
_converter.register_unstructure_hook(SchemaReport, make_dict_unstructure_fn(SchemaReport, _converter, **_as_written))
_converter.register_structure_hook(SchemaReport, make_dict_structure_fn(SchemaReport, _converter, **_as_written,
                                                                       _cattrs_forbid_extra_keys=True))


@attrs.frozen
class _CacheRecord:
    format: int
    report: SchemaReport


# --- running the binary -----------------------------------------------------------------


def _run(argv: list[str], *, timeout_s: float, what: str) -> str:
    """Run ``argv`` and return its stdout; stdout/stderr go to files so no grandchild can hang us."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                       start_new_session=sys.platform != "win32")
        except OSError as exc:
            raise SchemaGenerationFailed(f"cannot run {argv[0]} for {what}: {exc.strerror or exc}",
                                         hint="check that the codex binary exists and is executable") from exc
        try:
            status = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(process)
            raise SchemaGenerationFailed(
                f"{what} did not finish within {timeout_s} s ({' '.join(argv)})",
                code="codex_schema_timeout",
                hint="the machine may be overloaded; try again, or raise the timeout") from None
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        if status != 0:
            tail = err.read().decode(errors="replace").strip()[-500:]
            raise SchemaGenerationFailed(f"{what} failed with exit status {status}: {tail or 'no output'}",
                                         hint="check that the binary is a Codex CLI with the app-server subcommand")
        return stdout


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    # The npm launcher is a node script that spawns the native binary: kill the whole group.
    try:
        if sys.platform != "win32":
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def binary_identity(binary: Path, *, timeout_s: float = 15.0) -> BinaryIdentity:
    real = Path(os.path.realpath(binary))
    try:
        info = real.stat()
    except OSError as exc:
        raise SchemaGenerationFailed(f"cannot stat the codex binary {binary}: {exc.strerror or exc}",
                                     hint="check REKALL_CODEX_BINARY or the extension installation") from exc
    output = _run([str(binary), "--version"], timeout_s=timeout_s, what="codex --version")
    match = _VERSION.search(output)
    if match is None:
        raise SchemaGenerationFailed(f"{binary} --version printed no version: {output.strip()[:200]!r}",
                                     hint="check that the binary is a Codex CLI")
    return BinaryIdentity(str(real), info.st_size, info.st_mtime_ns, match.group(1))


@contextmanager
def generated_schema_dir(binary: Path, *, timeout_s: float, tmp_root: Path | None = None) -> Iterator[Path]:
    """Yield a private directory holding the binary's generated JSON schema; always removed."""
    directory = Path(tempfile.mkdtemp(prefix="rekall-schema-", dir=tmp_root))  # created 0700
    try:
        _run([str(binary), "app-server", "generate-json-schema", "--out", str(directory)],
             timeout_s=timeout_s, what="codex app-server generate-json-schema")
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class _SchemaFiles(Mapping[str, Any]):
    """Generated files loaded on first use; names outside the directory do not exist."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            path = (self._directory / name).resolve()
            if self._directory.resolve() not in path.parents or not path.is_file():
                raise KeyError(name)
            try:
                self._loaded[name] = json.loads(read_limited(path, limit=SCHEMA_FILE_LIMIT).decode("utf-8"))
            except (OSError, ValueError) as exc:
                raise SchemaGenerationFailed(f"generated schema file {name} is unreadable: {exc}",
                                             hint="the Codex binary may be damaged; reinstall it") from exc
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(p.relative_to(self._directory).as_posix() for p in self._directory.rglob("*.json"))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        try:
            self[name]  # type: ignore[index]
        except KeyError:
            return False
        return True


#: The check suites: the public protocol the extension relays, and the shared app-server's additions.
SUITES: dict[str, tuple[tuple[str, Any], ...]] = {"public": CHECKS, "app-server": CHECKS + APP_SERVER_CHECKS}


def check_schema_dir(directory: Path, suite: str = "public") -> tuple[SchemaCheck, ...]:
    """Run a suite's checks on an already generated (or fixture) schema directory."""
    return run_checks(_SchemaFiles(directory), SUITES[suite])


# --- cache ------------------------------------------------------------------------------


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    return codex_home(os.environ if env is None else env) / "tools" / "rekall" / "schema-cache"


def _private_dir(directory: Path) -> Path:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise CodexError(f"schema cache {directory} is not a plain directory", code="schema_cache_insecure",
                         hint="remove it; rekall recreates it")
    if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o077):
        raise CodexError(f"schema cache {directory} must be private to you (0700)", code="schema_cache_insecure",
                         hint=f"run: chmod 700 {directory}")
    return directory


def _read_cache(path: Path, identity: BinaryIdentity) -> SchemaReport | None:
    try:
        record = _converter.structure(json.loads(read_private(path, limit=CACHE_RECORD_LIMIT)
                                                 .decode("utf-8")), _CacheRecord)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, cattrs.BaseValidationError):
        return None  # unreadable or foreign: regenerate and overwrite
    if record.format != CACHE_FORMAT or record.report.binary != identity:
        return None
    return attrs.evolve(record.report, from_cache=True)


def _write_cache(path: Path, report: SchemaReport) -> None:
    record = _CacheRecord(CACHE_FORMAT, attrs.evolve(report, from_cache=False))
    FileOps().atomic_replace(path, json.dumps(_converter.unstructure(record), indent=1).encode("utf-8"))


def check_compatibility(binary: Path, *, cache_dir: Path | None, timeout_s: float = 15.0,
                        tmp_root: Path | None = None, suite: str = "public") -> SchemaReport:
    """Check ``binary``'s public schema with a suite's checks (:data:`SUITES`); reuse a cached
    report for the same binary identity and suite.

    ``cache_dir=None`` disables the cache. Raises :class:`SchemaGenerationFailed` when the
    schema cannot be generated (never cached); an incompatible schema is a report with
    ``status == "incompatible"`` (cached like any other result).
    """
    identity = binary_identity(binary, timeout_s=timeout_s)
    name = identity.cache_name() if suite == "public" else identity.cache_name().replace("schema-", f"schema-{suite}-")
    cache_file = _private_dir(cache_dir) / name if cache_dir is not None else None
    if cache_file is not None and (cached := _read_cache(cache_file, identity)) is not None:
        return cached
    with generated_schema_dir(binary, timeout_s=timeout_s, tmp_root=tmp_root) as directory:
        checks = check_schema_dir(directory, suite)
    report = SchemaReport(overall_verdict(checks), checks, identity,
                          dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    if cache_file is not None:
        _write_cache(cache_file, report)
    return report
