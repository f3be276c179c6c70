"""Binary discovery and extension identity, on Windows, macOS and Linux layouts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rekall.adapters.extension.discovery import (
    CodexBinaryAmbiguous,
    CodexBinaryNotFound,
    CodexBinaryOverrideInvalid,
    ExtensionIdentityMismatch,
    discover_codex_binary,
    locate_codex_binary,
    read_extension_identity,
)
from rekall.kernel.errors import CodexError

WIN = r"C:\Users\me\.vscode\extensions\openai.chatgpt-26.901.22334-win32-x64\bin\windows-x86_64"
MAC_ARM = "/Users/me/.vscode/extensions/openai.chatgpt-26.901.22334-darwin-arm64/bin/macos-aarch64"
MAC_X64 = "/Users/me/.vscode/extensions/openai.chatgpt-26.901.22334-darwin-x64/bin/macos-x86_64"
LINUX_X64 = "/home/me/.vscode-server/extensions/openai.chatgpt-26.901.22334-linux-x64/bin/linux-x86_64"
LINUX_ARM = "/home/me/.vscode-server/extensions/openai.chatgpt-26.901.22334-linux-arm64/bin/linux-aarch64"
MANIFEST = json.dumps({"publisher": "openai", "name": "chatgpt", "version": "26.901.22334"})


def files(*paths: str):
    existing = set(paths)
    return existing.__contains__


def manifests(mapping: dict[str, str]):
    def read(path: str) -> str:
        if path not in mapping:
            raise FileNotFoundError(2, "No such file or directory", path)
        return mapping[path]

    return read


@pytest.mark.parametrize(
    ("platform", "entry", "binary"),
    [
        ("win32", WIN, WIN + r"\codex.exe"),
        ("darwin", MAC_ARM, MAC_ARM + "/codex"),
        ("darwin", MAC_X64, MAC_X64 + "/codex"),
        ("linux", LINUX_X64, LINUX_X64 + "/codex"),
        ("linux", LINUX_ARM, LINUX_ARM + "/codex"),
    ],
)
def test_each_platform_layout_finds_the_one_bundled_binary(platform: str, entry: str, binary: str) -> None:
    delimiter = ";" if platform == "win32" else ":"
    other = r"C:\Windows\System32" if platform == "win32" else "/usr/local/bin"
    env = {"PATH": delimiter.join([other, entry])}
    assert locate_codex_binary(env, platform=platform, is_file=files(binary)) == (binary, "path")


def test_the_path_key_is_found_case_insensitively_as_on_windows() -> None:
    binary = WIN + r"\codex.exe"
    env = {"Path": WIN}
    assert locate_codex_binary(env, platform="win32", is_file=files(binary)) == (binary, "path")


def test_a_trailing_separator_on_the_entry_is_accepted() -> None:
    binary = LINUX_X64 + "/codex"
    assert locate_codex_binary({"PATH": LINUX_X64 + "/"}, platform="linux", is_file=files(binary))[0] == LINUX_X64 + "/codex"


def test_an_empty_path_says_what_was_searched_and_how_to_fix_it() -> None:
    with pytest.raises(CodexBinaryNotFound) as caught:
        locate_codex_binary({"PATH": ""}, platform="linux", is_file=files())
    error = caught.value
    assert error.code == "codex_binary_not_found"
    assert "searched 0 PATH entries" in error.message
    assert "openai.chatgpt-<version>/bin/<platform>/codex" in error.message
    assert "REKALL_CODEX_BINARY" in (error.hint or "")


def test_an_extension_folder_without_the_executable_is_named_in_the_error() -> None:
    with pytest.raises(CodexBinaryNotFound) as caught:
        locate_codex_binary({"PATH": LINUX_X64}, platform="linux", is_file=files())
    assert repr(LINUX_X64) in caught.value.message


def test_two_extension_versions_on_path_are_refused_as_ambiguous() -> None:
    newer = MAC_ARM.replace("26.901.22334", "26.903.61454")
    env = {"PATH": f"{MAC_ARM}:{newer}"}
    with pytest.raises(CodexBinaryAmbiguous) as caught:
        locate_codex_binary(env, platform="darwin", is_file=files(MAC_ARM + "/codex", newer + "/codex"))
    assert MAC_ARM + "/codex" in caught.value.message and newer + "/codex" in caught.value.message
    assert "REKALL_CODEX_BINARY" in (caught.value.hint or "")


def test_the_same_entry_listed_twice_is_one_candidate() -> None:
    binary = LINUX_X64 + "/codex"
    env = {"PATH": f"{LINUX_X64}:{LINUX_X64}/:{LINUX_X64}"}
    assert locate_codex_binary(env, platform="linux", is_file=files(binary)) == (binary, "path")


def test_windows_entries_differing_only_in_case_are_one_candidate() -> None:
    binary = WIN + r"\codex.exe"
    env = {"PATH": f"{WIN};{WIN.upper()}"}
    exists = lambda path: path.lower() == binary.lower()  # noqa: E731 - Windows file names ignore case
    assert locate_codex_binary(env, platform="win32", is_file=exists)[0] == binary


@pytest.mark.parametrize(
    "entry",
    [
        "extensions/openai.chatgpt-26.901.22334-linux-x64/bin/linux-x86_64",  # relative
        "/usr/local/bin",
        LINUX_X64 + "/unrelated",  # nested lookalike
        "/home/me/openai.chatgpt-/bin/linux-x86_64",  # no version
        "/home/me/openai.chatgpt-1/linux-x86_64",  # no bin
        "/home/me/notopenai.chatgpt-1.0/bin/x",  # a longer name ending the same way
    ],
)
def test_relative_and_lookalike_entries_are_ignored(entry: str) -> None:
    with pytest.raises(CodexBinaryNotFound):
        locate_codex_binary({"PATH": entry}, platform="linux", is_file=lambda path: True)


def test_an_absolute_existing_override_wins_over_path() -> None:
    override = "/opt/codex/bin/codex"
    env = {"REKALL_CODEX_BINARY": override, "PATH": LINUX_X64}
    assert locate_codex_binary(env, platform="linux", is_file=files(override, LINUX_X64 + "/codex")) == (override, "override")


@pytest.mark.parametrize(("platform", "value"), [("linux", "bin/codex"), ("win32", "codex.exe"), ("darwin", "./codex")])
def test_a_relative_override_is_refused(platform: str, value: str) -> None:
    with pytest.raises(CodexBinaryOverrideInvalid) as caught:
        locate_codex_binary({"REKALL_CODEX_BINARY": value}, platform=platform, is_file=lambda path: True)
    assert "absolute" in caught.value.message and repr(value) in caught.value.message


def test_a_missing_override_is_refused_naming_the_path() -> None:
    with pytest.raises(CodexBinaryOverrideInvalid) as caught:
        locate_codex_binary({"REKALL_CODEX_BINARY": "/nowhere/codex"}, platform="linux", is_file=files())
    assert "'/nowhere/codex'" in caught.value.message


def test_the_extension_identity_and_version_come_from_package_json() -> None:
    root = LINUX_X64.rsplit("/bin/", 1)[0]
    identity = read_extension_identity(LINUX_X64 + "/codex", platform="linux",
                                       read_text=manifests({root + "/package.json": MANIFEST}))
    assert (identity.publisher, identity.name, identity.version, identity.root) == ("openai", "chatgpt", "26.901.22334", root)


def test_a_windows_extension_root_is_two_levels_above_the_binary() -> None:
    root = WIN.rsplit("\\bin\\", 1)[0]
    identity = read_extension_identity(WIN + r"\codex.exe", platform="win32",
                                       read_text=manifests({root + r"\package.json": MANIFEST}))
    assert identity.root == root


@pytest.mark.parametrize("version", [None, "", 7])
def test_a_missing_extension_version_is_reported_as_unknown(version: object) -> None:
    root = LINUX_X64.rsplit("/bin/", 1)[0]
    manifest = json.dumps({"publisher": "openai", "name": "chatgpt", "version": version})
    identity = read_extension_identity(LINUX_X64 + "/codex", platform="linux",
                                       read_text=manifests({root + "/package.json": manifest}))
    assert identity.version == "unknown"


@pytest.mark.parametrize(
    ("manifest", "shown"),
    [
        (json.dumps({"publisher": "evil", "name": "chatgpt"}), "evil.chatgpt"),
        (json.dumps({"publisher": "openai", "name": "codex-lookalike"}), "openai.codex-lookalike"),
        (json.dumps({"name": "chatgpt"}), "unknown.chatgpt"),
        (json.dumps([1, 2]), "unknown.unknown"),
    ],
)
def test_a_foreign_extension_identity_is_refused(manifest: str, shown: str) -> None:
    root = LINUX_X64.rsplit("/bin/", 1)[0]
    with pytest.raises(ExtensionIdentityMismatch) as caught:
        read_extension_identity(LINUX_X64 + "/codex", platform="linux", read_text=manifests({root + "/package.json": manifest}))
    assert shown in caught.value.message and "expected openai.chatgpt" in caught.value.message


@pytest.mark.parametrize("content", [None, "{not json"])
def test_an_unreadable_manifest_is_refused_naming_its_path(content: str | None) -> None:
    root = LINUX_X64.rsplit("/bin/", 1)[0]
    read = manifests({} if content is None else {root + "/package.json": content})
    with pytest.raises(ExtensionIdentityMismatch) as caught:
        read_extension_identity(LINUX_X64 + "/codex", platform="linux", read_text=read)
    assert root + "/package.json" in caught.value.message


def test_discovery_on_path_reports_the_extension() -> None:
    root = LINUX_X64.rsplit("/bin/", 1)[0]
    found = discover_codex_binary({"PATH": LINUX_X64}, platform="linux", is_file=files(LINUX_X64 + "/codex"),
                                  read_text=manifests({root + "/package.json": MANIFEST}))
    assert found.source == "path" and found.extension is not None and found.extension.version == "26.901.22334"
    assert found.to_json()["extension"]["publisher"] == "openai"


def test_an_override_outside_an_extension_is_a_standalone_cli() -> None:
    found = discover_codex_binary({"REKALL_CODEX_BINARY": "/opt/codex/codex"}, platform="linux",
                                  is_file=files("/opt/codex/codex"), read_text=manifests({}))
    assert (found.path, found.source, found.extension) == ("/opt/codex/codex", "override", None)


def test_an_override_inside_an_extension_folder_is_identity_checked() -> None:
    with pytest.raises(ExtensionIdentityMismatch):
        discover_codex_binary({"REKALL_CODEX_BINARY": LINUX_X64 + "/codex"}, platform="linux",
                              is_file=files(LINUX_X64 + "/codex"), read_text=manifests({}))


def test_every_discovery_error_is_a_codex_error_with_a_hint() -> None:
    cases = [
        lambda: locate_codex_binary({}, platform="linux", is_file=files()),
        lambda: locate_codex_binary({"REKALL_CODEX_BINARY": "x"}, platform="linux", is_file=files()),
        lambda: read_extension_identity("/a/b/c/codex", platform="linux", read_text=manifests({})),
    ]
    for case in cases:
        with pytest.raises(CodexError) as caught:
            case()
        assert caught.value.hint and caught.value.code.startswith("codex_")


_junk = st.one_of(
    st.sampled_from(["/usr/bin", "bin", "", "/opt/openai.chatgpt-1/bin/x/y", "openai.chatgpt-1/bin/x"]),
    st.text(alphabet="/abc.-:", max_size=12).filter(lambda s: ":" not in s),
)


@settings(max_examples=60, deadline=None)
@given(before=st.lists(_junk, max_size=4), after=st.lists(_junk, max_size=4), with_bundle=st.booleans())
def test_only_a_bundled_entry_is_ever_selected_wherever_it_appears(before: list[str], after: list[str],
                                                                   with_bundle: bool) -> None:
    entries = [*before, *([LINUX_X64] if with_bundle else []), *after]
    env = {"PATH": ":".join(entries)}
    if with_bundle:
        assert locate_codex_binary(env, platform="linux", is_file=lambda path: True) == (LINUX_X64 + "/codex", "path")
    else:
        with pytest.raises(CodexBinaryNotFound):
            locate_codex_binary(env, platform="linux", is_file=lambda path: True)
