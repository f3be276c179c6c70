"""``rekall doctor``'s rows for the plugin's SessionStart(compact) hook, from the files.

The rows from ``hooks/list`` are checked against the real Codex in
tests/codex/test_session_hook_codex.py, which also holds :func:`handler_hash` to the hash Codex
itself reports for the installed plugin's hook.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rekall.usecases.hook_doctor import HOOK_KEY, file_rows, handler_hash, listing_rows
from tests.pluginkit import plugin_root, read_json

#: What Codex 0.171.0's hooks/list reported as the handler half of the plugin hook's currentHash.
CODEX_REPORTED_HANDLER_HASH = "sha256:517b424d4d4363aa0c2c24970797a37b3a5e13ccd6cd19738fc8c867cfec2302"


def install_hook(codex_home: Path, *, trusted: bool = True, extra_config: str = "") -> Path:
    """The plugin as ``codex plugin add`` leaves it in ``codex_home``, its hook trusted as /hooks does it."""
    target = codex_home / "plugins" / "cache" / "rekall" / "rekall" / "0.1.0"
    shutil.copytree(plugin_root(), target, dirs_exist_ok=True)
    lines = ['[plugins."rekall@rekall"]', "enabled = true", ""]
    if trusted:
        handler = installed_handler(target)
        lines += [f"[hooks.state.{json.dumps(HOOK_KEY)}]", f"trusted_hash = {json.dumps(handler_hash(handler))}",
                  f'trusted_content_hash = "sha256:{"0" * 64}"', ""]
    with open(codex_home / "config.toml", "a", encoding="utf-8") as config:
        config.write("\n" + "\n".join(lines) + extra_config)
    return target


def installed_handler(root: Path) -> dict:
    (group,) = read_json(root / "hooks" / "hooks.json")["hooks"]["SessionStart"]
    return {"matcher": group["matcher"], **group["hooks"][0]}


def levels(rows) -> list[tuple[str, str]]:
    return [(row.name, row.level) for row in rows]


def test_the_handler_hash_is_the_one_codex_reports_for_the_plugins_hook():
    assert handler_hash(installed_handler(plugin_root())) == CODEX_REPORTED_HANDLER_HASH


def test_an_installed_enabled_and_trusted_hook_is_green_on_all_three_rows(tmp_path: Path):
    install_hook(tmp_path)
    rows = file_rows(tmp_path)
    assert levels(rows) == [("session_hook_installed", "GREEN"), ("session_hook_enabled", "GREEN"),
                            ("session_hook_trusted", "GREEN")]
    assert "only Codex can tell (/hooks shows it)" in rows[2].detail


def test_a_missing_plugin_says_how_to_install_it_and_skips_the_rest(tmp_path: Path):
    rows = file_rows(tmp_path)
    assert levels(rows)[0] == ("session_hook_installed", "AMBER")
    assert "rekall setup" in rows[0].hint
    assert all(row.detail.startswith("not checked") for row in rows[1:])


def test_an_untrusted_hook_says_to_trust_it_once_in_hooks(tmp_path: Path):
    install_hook(tmp_path, trusted=False)
    trusted = file_rows(tmp_path)[2]
    assert trusted.level == "AMBER" and "untrusted" in trusted.detail and "/hooks" in trusted.hint


def test_a_hook_changed_by_an_upgrade_must_be_trusted_again(tmp_path: Path):
    target = install_hook(tmp_path)
    hooks = read_json(target / "hooks" / "hooks.json")
    hooks["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] = 20
    (target / "hooks" / "hooks.json").write_text(json.dumps(hooks))
    trusted = file_rows(tmp_path)[2]
    assert trusted.level == "AMBER" and trusted.detail.split(": ")[1] == "changed"
    assert trusted.hint == "run `rekall setup` again (or trust it again in /hooks)"


def test_each_setting_that_turns_the_hook_off_is_named(tmp_path: Path):
    install_hook(tmp_path, extra_config=f"\n[features]\nhooks = false\n")
    enabled = file_rows(tmp_path)[1]
    assert enabled.level == "AMBER" and "[features] hooks = false" in enabled.detail


def test_the_listing_from_an_app_server_decides_when_one_answers():
    where = "hooks/list on /run/codex.sock"
    hook = {"key": HOOK_KEY, "sourcePath": "/h/hooks.json", "enabled": True, "trustStatus": "trusted"}
    assert [r.level for r in listing_rows(hook, where)] == ["GREEN"] * 3
    for status in ("modified", "changed"):
        row = listing_rows({**hook, "trustStatus": status}, where)[2]
        assert row.level == "AMBER" and "an upgrade" in row.detail and row.hint.startswith("run `rekall setup` again")
    untrusted = listing_rows({**hook, "trustStatus": "untrusted"}, where)[2]
    assert "trust rekall's SessionStart hook once" in untrusted.hint
    assert listing_rows({**hook, "enabled": False}, where)[1].level == "AMBER"
    assert listing_rows(None, where)[0].level == "AMBER"


def test_a_requirements_file_that_allows_only_managed_hooks_is_named_by_doctor_and_by_the_save(tmp_path):
    from rekall.usecases.hook_doctor import managed_hooks_only, managed_row

    requirements = tmp_path / "requirements.toml"
    assert managed_hooks_only(requirements) is None and managed_row(requirements).level == "GREEN"  # no file
    requirements.write_text("allow_managed_hooks_only = false\n")
    assert managed_hooks_only(requirements) is None
    requirements.write_text('allowed_approval_policies = ["on-request"]\nallow_managed_hooks_only = true\n')
    row = managed_row(requirements)
    assert row.level == "AMBER" and "allow_managed_hooks_only = true" in row.detail and "checkpoint" in row.hint
    requirements.write_text("allow_managed_hooks_only = [\n")
    assert "unknown" in managed_hooks_only(requirements)


def test_doctor_shows_whether_the_plan_comes_along_with_the_checkpoint():
    from rekall.usecases.hook_doctor import checkpoint_plan_row

    assert "REKALL_CHECKPOINT_PLAN=on (the default)" in checkpoint_plan_row({}).detail
    off = checkpoint_plan_row({"REKALL_CHECKPOINT_PLAN": "off"})
    assert off.level == "GREEN" and "does not come along" in off.detail
    assert checkpoint_plan_row({"REKALL_CHECKPOINT_PLAN": "maybe"}).level == "RED"
