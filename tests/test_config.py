"""Flags, WARPTD_* environment and the TOML file map onto one settings model; bad values fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from warptd.cli import main
from warptd.config import SettingsError, load_settings


def test_defaults():
    s = load_settings()
    assert s.listen_address == ("", 9465)
    assert s.interval == 1.0
    assert s.backends is None
    assert s.sysfs == Path("/sys")


def test_env_comma_list_and_precedence(monkeypatch, tmp_path):
    config = tmp_path / "warptd.toml"
    config.write_text('interval = 5.0\nlisten = "127.0.0.1:9999"\nbackends = ["cpu"]\n')
    monkeypatch.setenv("WARPTD_BACKENDS", "nvidia, CPU")
    monkeypatch.setenv("WARPTD_INTERVAL", "2")
    s = load_settings(config=config)
    assert s.backends == ["nvidia", "cpu"]  # env over file
    assert s.interval == 2.0  # env over file
    assert s.listen == "127.0.0.1:9999"  # file over default
    s = load_settings(config=config, interval=0.5)
    assert s.interval == 0.5  # flag over env


def test_config_from_env_var(monkeypatch, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("sample_timeout = 7\n")
    monkeypatch.setenv("WARPTD_CONFIG", str(config))
    assert load_settings().sample_timeout == 7


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"interval": -1}, "invalid setting interval=-1"),
        ({"listen": "9465"}, "invalid setting listen='9465'"),
        ({"listen": "host:99999"}, "invalid setting listen='host:99999': port out of range: 99999 (1-65535)"),
        ({"log_level": "loud"}, "invalid setting log_level='loud'"),
        ({"config": Path("/nonexistent/warptd.toml")}, "invalid setting config: no such file"),
    ],
)
def test_invalid_values_fail_with_one_line(kwargs, message):
    with pytest.raises(SettingsError) as info:
        load_settings(**kwargs)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert "Value error" not in str(info.value)  # pydantic's prefix, not ours


def test_unknown_key_in_file(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("intervall = 3\n")
    with pytest.raises(SettingsError, match="intervall"):
        load_settings(config=config)


def test_cli_exits_2_with_one_line(capsys):
    assert main(["--interval", "0", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("warptd: invalid setting interval=0.0") and err.count("\n") == 1


def test_cli_unknown_backend(capsys, monkeypatch):
    monkeypatch.setenv("WARPTD_BACKENDS", "tpu9000")
    assert main(["list"]) == 2
    assert "unknown backend(s) tpu9000" in capsys.readouterr().err


def test_cli_default_backends_that_cannot_load_are_skipped(capsys, tmp_path):
    """No --backend: every backend is tried, and one that cannot load is a log line, not an error."""
    assert main(["--sysfs", str(tmp_path), "--log-level", "error", "list", "--verbose"]) == 0
    captured = capsys.readouterr()
    assert "cpu:0" in captured.out
    assert "# rapl: " in captured.err  # no RAPL zone under --sysfs


def test_cli_list_json(capsys):
    assert main(["--backend", "cpu", "--log-level", "error", "list", "--json"]) == 0
    import json

    devices = json.loads(capsys.readouterr().out)
    assert devices[0]["backend"] == "cpu" and devices[0]["index"] == 0


def test_cli_sample_prints_exposition(capsys):
    assert main(["--backend", "cpu", "--log-level", "error", "--interval", "0.1", "sample"]) == 0
    out = capsys.readouterr().out
    assert 'warptd_device_up{backend="cpu",device="0",uuid=""} 1.0' in out


def test_cli_sample_json(capsys):
    import json

    assert main(["--backend", "cpu", "--log-level", "error", "--interval", "0.1", "sample", "--json"]) == 0
    snapshot = json.loads(capsys.readouterr().out)
    device = snapshot["cpu"]["devices"][0]
    assert snapshot["cpu"]["fresh"] is True and device["up"] is True and device["memory"]["total"] > 0


def test_logs_are_json_lines_off_a_tty(capsys):
    import io
    import json

    import structlog

    from warptd.logs import configure_logging

    stream = io.StringIO()
    configure_logging("info", "auto", stream)
    structlog.get_logger("t").info("hello", backend="cpu")
    structlog.get_logger("t").debug("hidden")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["event"] == "hello"
    stream = io.StringIO()
    configure_logging("debug", "console", stream)
    structlog.get_logger("t").debug("shown")
    assert "shown" in stream.getvalue() and not stream.getvalue().startswith("{")


def test_stress_flags(tmp_path):
    from warptd.arguments import build_parser
    from warptd.cli import _settings

    token = tmp_path / "token"
    token.write_text("from-file\n")
    s = _settings(build_parser().parse_args(["--no-stress", "--stress-token-file", str(token), "serve"]))
    assert s.stress is False and s.stress_token_value() == "from-file"
    s = _settings(build_parser().parse_args(["serve", "--stress-token", "abc"]))
    assert s.stress is True and s.stress_token_value() == "abc"
    assert "abc" not in repr(s)  # a SecretStr: never in logs or reprs


def test_empty_tokens_are_errors_not_open_access(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SettingsError, match="empty"):
        load_settings(stress_token_file=empty).stress_token_value()
    with pytest.raises(SettingsError, match="stress_token: empty"):
        load_settings(stress_token="  ").stress_token_value()
    two = tmp_path / "two"
    two.write_text("first\nsecond\n")
    assert load_settings(stress_token_file=two).stress_token_value() == "first"


def test_secret_values_never_in_errors(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('stress-token = "s3cr3t-value"\n')
    with pytest.raises(SettingsError) as info:
        load_settings(config=config)
    assert "s3cr3t" not in str(info.value) and "stress-token" in str(info.value)


def test_reloadable_settings_are_settings_and_the_shape_of_the_process_is_not():
    from warptd.config import RELOADABLE, Settings

    assert set(RELOADABLE) <= set(Settings.model_fields)
    assert not {"listen", "backends", "sysfs", "stress", "node", "procfs"} & RELOADABLE


# -- issue 39, finding 7: a config error never shows a file's contents, nor a secret ------------------
SHADOW_TOML = 'root = "$6$saltsalt$hashhashhash"\ndaemon = "*"\n'


@pytest.mark.parametrize(
    ("content", "said", "secrets"),
    [
        (
            'password = "hunter2"\napi_key = "k-123"\ndb_credential = "c-456"\n',
            "invalid setting password: no such setting; api_key: no such setting; "
            "db_credential: no such setting",
            ("hunter2", "k-123", "c-456"),
        ),
        (SHADOW_TOML, "invalid setting root: no such setting; daemon: no such setting", ("$6$", "hash")),
        (  # keys that are no names: a file of another kind; not one of them is named
            '"admin:$6$saltsalt$hash:19000" = 1\n"x y" = 2\n',
            "2 key(s) in {config} that are no setting's name (is it warptd's config file?)",
            ("admin", "$6$", "saltsalt", "x y"),
        ),
        (  # a setting's bad value read from the file: what is wrong, not the value
            'interval = "every-hour-please"\nstress_token_file = 5\n',
            "interval: Input should be a valid number",
            ("every-hour-please", "=5"),
        ),
        ('[database]\npassword = "hunter2"\n', "invalid setting database: no such setting", ("hunter2",)),
    ],
)
def test_a_config_file_error_names_what_is_wrong_never_its_contents(tmp_path, capsys, content, said, secrets):
    config = tmp_path / "c.toml"
    config.write_text(content)
    with pytest.raises(SettingsError) as info:
        load_settings(config=config)
    message = str(info.value)
    assert said.format(config=config) in message and "\n" not in message
    for secret in secrets:
        assert secret not in message
    assert main(["--config", str(config), "list"]) == 2  # what the start prints: the same line
    printed = capsys.readouterr().err
    assert printed == f"warptd: {message}\n"


def test_a_value_typed_by_flag_or_variable_is_shown_unless_it_is_a_secret(monkeypatch, tmp_path):
    with pytest.raises(SettingsError, match=r"interval=-1: "):
        load_settings(interval=-1)
    monkeypatch.setenv("WARPTD_LISTEN", "nowhere")
    with pytest.raises(SettingsError, match=r"listen='nowhere': "):
        load_settings()
    monkeypatch.delenv("WARPTD_LISTEN")
    monkeypatch.setenv("WARPTD_STRESS_TOKEN_FILE", "")  # a secret's path: never shown either
    (tmp_path / "c.toml").write_text("stress_token = 12345\n")
    with pytest.raises(SettingsError) as info:
        load_settings(config=tmp_path / "c.toml")
    message = str(info.value)
    assert "12345" not in message and "stress_token: Input should be a valid string" in message


def test_a_file_of_hundreds_of_wrong_keys_is_still_one_short_line(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("".join(f"key{i} = {i}\n" for i in range(300)))
    with pytest.raises(SettingsError) as info:
        load_settings(config=config)
    message = str(info.value)
    assert message.endswith("; and 295 more") and len(message) < 200
