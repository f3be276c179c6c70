import pytest

from pathlib import Path

from rekall.kernel.settings import (DEFAULT_DEADLINE_S, DEFAULT_IDLE_STABLE_MS, SETTINGS, WorkerSettings, app_server_socket,
                           check_settings, env_value)
from rekall.kernel.errors import InvalidInput


def test_defaults_apply_when_variables_are_unset_or_empty():
    settings = WorkerSettings.from_env({"REKALL_IDLE_STABLE_MS": "", "REKALL_DEADLINE_S": ""})
    assert settings.idle_stable_s == DEFAULT_IDLE_STABLE_MS / 1000
    assert settings.deadline_s == DEFAULT_DEADLINE_S


def test_settings_are_read_from_the_environment():
    settings = WorkerSettings.from_env({"REKALL_IDLE_STABLE_MS": "120", "REKALL_DEADLINE_S": "2.5"})
    assert settings.idle_stable_s == pytest.approx(0.12)
    assert settings.deadline_s == 2.5


@pytest.mark.parametrize("raw", ["0", "-5", "soon", "abc", "nan", "inf", "1e309", "604801"])
def test_a_bad_setting_is_rejected_naming_the_variable_and_its_range_not_the_value(raw):
    with pytest.raises(InvalidInput) as caught:
        WorkerSettings.from_env({"REKALL_DEADLINE_S": raw})
    assert caught.value.field == "REKALL_DEADLINE_S" and caught.value.code == "invalid_setting"
    assert "REKALL_DEADLINE_S must be a number greater than 0 and at most 604800 (seconds)" in caught.value.message
    assert repr(raw) not in str(caught.value) and (len(raw) < 3 or raw not in str(caught.value))


@pytest.mark.parametrize("raw", ["1_000", "\u0661\u0662", "\uff15", " 5", "5 ", "+5", "1e3", "0x10", "5.", ".5"])
def test_a_setting_is_a_plain_ascii_number_or_refused(raw):
    # float() takes all of these; only the last two are digits 0-9 with one point.
    if raw in ("5.", ".5"):
        assert WorkerSettings.from_env({"REKALL_DEADLINE_S": raw}).deadline_s == float(raw)
        return
    with pytest.raises(InvalidInput) as caught:
        WorkerSettings.from_env({"REKALL_DEADLINE_S": raw})
    assert "digits 0-9 and at most one decimal point" in caught.value.message


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_check_settings_checks_every_declared_setting_and_accepts_its_bounds(setting):
    check_settings({setting.name: f"{setting.maximum:g}"})
    check_settings({setting.name: ""})
    with pytest.raises(InvalidInput, match=setting.name):
        check_settings({setting.name: "-1"})


def test_the_first_non_empty_variable_wins():
    assert env_value({"A": "", "B": "b"}, "A", "B") == "b"
    assert env_value({}, "A") is None


@pytest.mark.parametrize(("raw", "expected"), [
    ("", None), ("unix://", None), ("/run/codex.sock", Path("/run/codex.sock")),
    ("unix:///run/codex.sock", Path("/run/codex.sock"))])
def test_the_app_server_socket_is_a_path_unix_url_or_the_default(raw, expected):
    assert app_server_socket({"REKALL_APP_SERVER_SOCKET": raw}) == expected


@pytest.mark.parametrize(("raw", "says"), [
    ("relative.sock", "absolute socket path"), ("unix://relative.sock", "absolute socket path"),
    ("ws://127.0.0.1:4500", "remote endpoint"), ("wss://example.com/", "remote endpoint")])
def test_a_bad_app_server_socket_is_rejected_naming_the_variable(raw, says):
    with pytest.raises(InvalidInput, match=says) as caught:
        app_server_socket({"REKALL_APP_SERVER_SOCKET": raw})
    assert caught.value.field == "REKALL_APP_SERVER_SOCKET" and raw not in str(caught.value)  # the rule, not the value


@pytest.mark.parametrize("raw, expected", [(None, 60.0), ("", 60.0), ("0.5", 0.5)])
def test_the_system_error_window_defaults_to_a_minute_and_is_read_from_the_environment(raw, expected):
    env = {} if raw is None else {"REKALL_SYSTEM_ERROR_WINDOW_S": raw}
    assert WorkerSettings.from_env(env).system_error_window_s == expected


@pytest.mark.parametrize("raw", ["0", "-1", "a minute", "nan"])
def test_a_bad_system_error_window_is_rejected_naming_the_variable(raw):
    with pytest.raises(InvalidInput) as caught:
        WorkerSettings.from_env({"REKALL_SYSTEM_ERROR_WINDOW_S": raw})
    assert caught.value.field == "REKALL_SYSTEM_ERROR_WINDOW_S" and repr(raw) not in caught.value.message


def test_the_settle_and_reconnect_windows_default_to_a_minute_and_are_read_from_the_environment():
    defaults = WorkerSettings.from_env({})
    assert defaults.settle_s == 60 and defaults.reconnect_window_s == 60
    assert defaults.reconnect_window_s > sum(defaults.reconnect_delays_s)  # longer than one backoff round
    settings = WorkerSettings.from_env({"REKALL_SETTLE_S": "0.5", "REKALL_RECONNECT_WINDOW_S": "90"})
    assert settings.settle_s == 0.5 and settings.reconnect_window_s == 90


@pytest.mark.parametrize("name", ["REKALL_SETTLE_S", "REKALL_RECONNECT_WINDOW_S"])
def test_a_bad_window_is_rejected_naming_the_variable(name):
    with pytest.raises(InvalidInput) as caught:
        WorkerSettings.from_env({name: "-1"})
    assert caught.value.field == name and "(60)" in caught.value.hint
