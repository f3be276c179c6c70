"""The package as users get it: built, checked, installed with pipx, uv and pip, and run.

``python -m build`` runs once per session (isolated, as a user would run it; it fetches the
build backend like any build). The archives are checked against an allowlist, so a jobs
directory, a handoff, a log or a virtualenv left in the working tree can never ship.
"""

from __future__ import annotations

import email.parser
import fnmatch
import json
import os
import shlex
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from rekall import __version__
from tests.pluginkit import REPO_ROOT, front_matter, manifest, skill_file

#: Every package the wheel ships, by folder: its own modules (``*.py`` directly inside) ship, a
#: subfolder only when it is named here too. A new package fails the tests below until it is named.
PACKAGES = (
    "rekall",
    "rekall/adapters",
    "rekall/adapters/app_server",
    "rekall/adapters/extension",
    "rekall/codex",
    "rekall/kernel",
    "rekall/sim",
    "rekall/states",
    "rekall/store",
    "rekall/surfaces",
    "rekall/thread",
    "rekall/transports",
    "rekall/usecases",
    "rekall/worker",
)
#: The distribution's name on PyPI ("rekall" there is another project); its files' prefix.
DISTRIBUTION = "rekall-codex"
PREFIX = "rekall_codex"
#: The plugin and its marketplace entry, as ``rekall setup`` finds them in the installed package.
MARKETPLACE = (
    "rekall/marketplace/.agents/plugins/marketplace.json",
    "rekall/marketplace/plugins/rekall/.codex-plugin/plugin.json",
    "rekall/marketplace/plugins/rekall/.mcp.json",
    "rekall/marketplace/plugins/rekall/hooks/hooks.json",
    "rekall/marketplace/plugins/rekall/skills/rekall/SKILL.md",
)
#: The package's files that are not modules.
PACKAGE_DATA = (
    "rekall/py.typed",
    "rekall/surfaces/mcp_light.json",  # the MCP light path's replies, generated from the SDK server
    *MARKETPLACE,
)
WHEEL_METADATA = (
    f"{PREFIX}-{{version}}.dist-info/METADATA",
    f"{PREFIX}-{{version}}.dist-info/WHEEL",
    f"{PREFIX}-{{version}}.dist-info/RECORD",
    f"{PREFIX}-{{version}}.dist-info/entry_points.txt",
    f"{PREFIX}-{{version}}.dist-info/licenses/LICENSE*",
)


def shipped_module(path: str) -> bool:
    """A module directly inside a named package (fnmatch's ``*`` would also cross ``/``)."""
    folder, _, name = path.rpartition("/")
    return folder in PACKAGES and name.endswith(".py") and name != ".py"


# Paths inside the sdist's top folder. fnmatch's "*" also crosses "/": "tests/*.py" covers subpackages.
SDIST_ALLOWED = (
    "PKG-INFO",
    "pyproject.toml",
    "README.md",
    "LICENSE*",
    ".gitignore",
    "tests/*.py",
    "docs/*.md",
    "bench/*.py",
    "bench/*.md",
    "fixtures/ipc/*.jsonl",
    "fixtures/schema/README.md",
    "fixtures/schema/codex-*/*.json",
    "fixtures/store/*.json",
    "fixtures/store/README.md",
    "scripts/test",
    "scripts/install-codex",
    ".agents/plugins/marketplace.json",
    "plugins/rekall/.codex-plugin/plugin.json",
    "plugins/rekall/.mcp.json",
    "plugins/rekall/hooks/hooks.json",
    "plugins/rekall/skills/*/SKILL.md",
)
# Names of rekall's own private files and of local clutter; none may match the allowlists.
PRIVATE = (
    "jobs/x.json",
    "tools/rekall/jobs/0199a5c2-1111-4000-8000-000000000001.json",
    "tests/0199a5c2-1111-4000-8000-000000000001.0199a5c2-2222-4000-8000-000000000002.handoff.json",
    "fixtures/ipc/v11/0199a5c2.0199a5c2.journal.jsonl.tmp",
    "rekall/0199a5c2-1111-4000-8000-000000000001.lock",
    "rekall/worker.log",
    "tests/run.log",
    "rekall/.env",
    ".venv/lib/python3.11/site-packages/x.py",
    "rekall/__pycache__/cli.cpython-311.pyc",
    ".hypothesis/examples/x",
    ".pytest_cache/v/cache/lastfailed",
    "docs/handoff.json",
    "id_ed25519",
    "tests/server.pem",
)


def allowed(path: str, patterns: tuple[str, ...]) -> bool:
    if any(part in (".venv", "__pycache__", ".hypothesis", ".pytest_cache", ".git") for part in path.split("/")):
        return False
    if path.endswith((".journal.jsonl", ".handoff.json", ".lock", ".log", ".cancel", ".tmp", ".pyc")):
        return False
    if shipped_module(path) or path in PACKAGE_DATA:
        return True
    return any(fnmatch.fnmatchcase(path, p.format(version=__version__)) for p in patterns)


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                            env=env, timeout=timeout)
    assert result.returncode == 0, f"{args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, REPO_ROOT)
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == len(wheels) == 1 and len(list(out.iterdir())) == 2, list(out.iterdir())
    return {"sdist": sdists[0], "wheel": wheels[0]}


def wheel_files(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return [n for n in archive.namelist() if not n.endswith("/")]


def sdist_files(sdist: Path) -> list[str]:
    top = f"{PREFIX}-{__version__}/"
    with tarfile.open(sdist) as archive:
        names = [m.name for m in archive.getmembers() if m.isfile()]
    assert all(n.startswith(top) for n in names), "everything lives under one top folder"
    return [n[len(top):] for n in names]


def test_python_m_build_makes_one_sdist_and_one_wheel_named_after_the_version(dists):
    assert dists["sdist"].name == f"{PREFIX}-{__version__}.tar.gz"
    assert dists["wheel"].name == f"{PREFIX}-{__version__}-py3-none-any.whl"


@pytest.mark.parametrize("path", PRIVATE)
def test_the_allowlists_refuse_private_files_and_clutter(path: str):
    assert not allowed(path, SDIST_ALLOWED) and not allowed(path, WHEEL_METADATA)


def test_the_wheel_holds_only_the_package_and_its_metadata(dists):
    files = wheel_files(dists["wheel"])
    assert "rekall/surfaces/cli.py" in files and "rekall/surfaces/mcp_server.py" in files
    assert not [f for f in files if not allowed(f, WHEEL_METADATA)]
    assert sorted({f.rpartition("/")[0] for f in files if f.endswith("/__init__.py")}) == sorted(PACKAGES)


def test_only_the_named_packages_ship_a_module():
    assert shipped_module("rekall/store/jobstore.py") and shipped_module("rekall/surfaces/cli.py")
    # a module in a folder nobody named, however deep, does not ship: "rekall/*.py" would let it
    assert not shipped_module("rekall/store/old/jobstore.py") and not shipped_module("rekall/scratch/x.py")
    assert not shipped_module("rekall/notes.txt") and not shipped_module("tests/surfaces/test_cli.py")


def test_the_named_packages_are_the_source_tree_s_packages():
    found = sorted(str(p.parent.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "rekall").rglob("__init__.py")
                   if "__pycache__" not in p.parts)
    assert found == sorted(PACKAGES)


def test_the_sdist_holds_only_sources_tests_docs_fixtures_and_the_plugin(dists):
    files = sdist_files(dists["sdist"])
    for expected in ("pyproject.toml", "rekall/surfaces/cli.py", "tests/test_packaging.py", "docs/states.md",
                     ".agents/plugins/marketplace.json", "plugins/rekall/skills/rekall/SKILL.md"):
        assert expected in files
    assert not [f for f in files if not allowed(f, SDIST_ALLOWED)]


#: Test and benchmark tooling: in tests/support/ (a checkout and the sdist), never in the wheel.
DEVELOPMENT_MODULES = ("mock_model", "codex_home", "pinned", "codex_backend", "record", "conformance", "appserver",
                       "conversation")


def test_the_wheel_carries_no_development_tooling_and_the_sdist_does(dists):
    wheel = wheel_files(dists["wheel"])
    shipped_modules = {Path(f).stem for f in wheel if f.endswith(".py")}
    assert not shipped_modules & set(DEVELOPMENT_MODULES), sorted(shipped_modules & set(DEVELOPMENT_MODULES))
    assert not [f for f in wheel if not f.startswith(("rekall/", f"{PREFIX}-{__version__}.dist-info/"))]
    assert {f"tests/support/{m}.py" for m in DEVELOPMENT_MODULES} <= set(sdist_files(dists["sdist"]))


def test_no_shipped_module_needs_development_tooling_except_the_guarded_codex_backend(dists):
    # rekall/sim/cli.py imports the codex backend inside a try that turns its absence into a
    # usage error; any other reference would break the installed package.
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        users = [name for name in wheel_files(dists["wheel"]) if name.endswith(".py")
                 and b"tests.support" in wheel.read(name)]
    assert users == ["rekall/sim/cli.py"]


def test_no_shipped_file_mentions_this_machines_checkout_or_codex_home(dists):
    # A status file, log or handoff that slipped in would carry these absolute paths.
    local = [str(REPO_ROOT), str(Path.home() / ".codex"), os.environ["CODEX_HOME"]]
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        texts = {name: wheel.read(name) for name in wheel_files(dists["wheel"])}
    with tarfile.open(dists["sdist"]) as sdist:
        texts |= {m.name: sdist.extractfile(m).read() for m in sdist.getmembers() if m.isfile()}
    leaks = [(name, marker) for name, data in texts.items() for marker in local if marker.encode() in data]
    assert not leaks


def test_twine_check_passes_for_both_archives(dists):
    result = run(sys.executable, "-m", "twine", "check", "--strict", dists["sdist"], dists["wheel"])
    assert result.stdout.count("PASSED") == 2


def test_the_version_has_one_source(dists):
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        wheel_meta = email.parser.HeaderParser().parsestr(wheel.read(f"{PREFIX}-{__version__}.dist-info/METADATA").decode())
    with tarfile.open(dists["sdist"]) as sdist:
        sdist_meta = email.parser.HeaderParser().parsestr(
            sdist.extractfile(f"{PREFIX}-{__version__}/PKG-INFO").read().decode())
    assert wheel_meta["Name"] == sdist_meta["Name"] == DISTRIBUTION
    cli = run(sys.executable, "-m", "rekall", "--version").stdout.split()
    assert {
        "wheel": wheel_meta["Version"],
        "sdist": sdist_meta["Version"],
        "plugin.json": manifest()["version"],
        "SKILL.md": front_matter(skill_file())[0]["metadata"]["version"],
        "rekall --version": cli[-1],
    } == dict.fromkeys(("wheel", "sdist", "plugin.json", "SKILL.md", "rekall --version"), __version__)
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["hatch"]["version"]["path"] == "rekall/__init__.py"


def test_the_wheel_carries_the_plugin_and_its_marketplace_entry_as_in_the_checkout(dists):
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        for shipped in MARKETPLACE:
            source = REPO_ROOT / shipped.removeprefix("rekall/marketplace/")
            assert wheel.read(shipped) == source.read_bytes(), shipped


def check_installed(command: Path, tool_home: Path, cwd: Path) -> None:
    """``command`` is a working rekall installed under ``tool_home``, not this checkout, and it
    finds the plugin it registers inside its installation."""
    assert run(command, "--version", cwd=cwd).stdout.strip() == f"rekall {__version__}"
    interpreter = shlex.split(command.resolve().read_text(encoding="utf-8").splitlines()[0].removeprefix("#!"))
    where = run(*interpreter, "-c", "import rekall; print(rekall.__file__)", cwd=cwd).stdout.strip()
    assert Path(where).is_relative_to(tool_home) and not Path(where).is_relative_to(REPO_ROOT)
    marketplace = run(*interpreter, "-c", "from rekall.usecases.setup import marketplace_root; "
                      "print(marketplace_root())", cwd=cwd).stdout.strip()
    assert Path(marketplace) == Path(where).parent / "marketplace"
    job = json.loads(run(command, "demo", "--json", cwd=cwd, timeout=120).stdout)
    assert job["state"] == "resumed" and job["resumeTurnId"]


@pytest.fixture
def wheel_folder(dists: dict[str, Path], tmp_path: Path) -> Path:
    """A local folder holding only the wheel: what the README's install-by-name commands point at."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / dists["wheel"].name).write_bytes(dists["wheel"].read_bytes())
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("installer", ["pipx", "uv", "pip"])
def test_the_wheel_installs_by_its_name_from_a_local_folder_and_runs(installer: str, wheel_folder: Path,
                                                                    tmp_path: Path):
    home, bin_dir = tmp_path / f"{installer}-home", tmp_path / f"{installer}-bin"
    if installer == "pipx":
        env = {**os.environ, "PIPX_HOME": str(home), "PIPX_BIN_DIR": str(bin_dir),
               "PIPX_MAN_DIR": str(tmp_path / "pipx-man")}
        run(sys.executable, "-m", "pipx", "install", "--python", sys.executable, "--pip-args",
            f"--find-links {wheel_folder}", DISTRIBUTION, env=env, cwd=tmp_path)
    elif installer == "uv":
        env = {**os.environ, "UV_TOOL_DIR": str(home), "UV_TOOL_BIN_DIR": str(bin_dir), "UV_PYTHON_DOWNLOADS": "never"}
        run(sys.executable, "-m", "uv", "tool", "install", "--python", sys.executable, "--find-links", wheel_folder,
            DISTRIBUTION, env=env, cwd=tmp_path)
    else:
        run(sys.executable, "-m", "venv", home)
        run(home / "bin" / "python", "-m", "pip", "install", "-q", "--find-links", wheel_folder, DISTRIBUTION,
            cwd=tmp_path)
        bin_dir = home / "bin"
    check_installed(bin_dir / "rekall", home, cwd=tmp_path)


@pytest.mark.slow
def test_pipx_install_of_the_checkout_gives_a_working_rekall(tmp_path: Path):
    home, bin_dir = tmp_path / "pipx-home", tmp_path / "pipx-bin"
    env = {**os.environ, "PIPX_HOME": str(home), "PIPX_BIN_DIR": str(bin_dir),
           "PIPX_MAN_DIR": str(tmp_path / "pipx-man")}
    run(sys.executable, "-m", "pipx", "install", "--python", sys.executable, REPO_ROOT, env=env, cwd=tmp_path)
    check_installed(bin_dir / "rekall", home, cwd=tmp_path)


