"""The ``warptd`` command as a newcomer meets it: short output, each command's own help, one-line errors."""

from __future__ import annotations

import argparse
import re

import pytest
from pydantic import ValidationError

from warptd.cli import main

DAEMON_ONLY = ("--listen", "--kubelet-socket", "--stress-token", "--web-config-file", "--no-xid-events")


def _help(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*args, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def _options(text: str) -> list[str]:
    """The long options of a help text, in the order it lists them."""
    return re.findall(r"^  (--[a-z-]+)", text, flags=re.MULTILINE)


@pytest.mark.parametrize(
    ("command", "own"),
    [
        ("list", ["--json", "--verbose"]),
        ("sample", ["--json"]),
        ("stress", ["--test", "--device", "--duration", "--dtype", "--size", "--json"]),
        ("doctor", ["--json", "--quick"]),
    ],
)
def test_a_commands_help_shows_its_own_options_first_and_no_daemon_flags(capsys, command, own):
    options = _options(_help(capsys, command))
    assert options[: len(own)] == own
    assert "--backend" in options and "--log-level" in options
    assert not set(DAEMON_ONLY) & set(options)


def test_serve_help_has_the_daemon_flags(capsys):
    for args in (["serve"], []):
        options = _options(_help(capsys, *args))
        assert set(DAEMON_ONLY) <= set(options) and "--procfs" in options


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "abc"], "warptd: --interval: not a number: 'abc'"),
        (["sample", "--sample-timeout", "x"], "warptd sample: --sample-timeout: not a number: 'x'"),
        (["stress", "--size", "big"], "warptd stress: --size: not a whole number: 'big'"),
        (["doctor", "--interval", "often"], "warptd doctor: --interval: not a number: 'often'"),
        (
            ["doctor", "--listen", ":9465"],
            "warptd doctor: unrecognized arguments: --listen :9465 (see warptd doctor --help)",
        ),
        (
            ["list", "--listen", ":9465"],
            "warptd list: unrecognized arguments: --listen :9465 (see warptd list --help)",
        ),
        (
            ["--listen", ":99999"],
            "warptd: invalid setting listen=':99999': port out of range: 99999 (1-65535)",
        ),
        (
            ["--listen", "9465"],
            "warptd: invalid setting listen='9465': expected HOST:PORT, e.g. ':9465' or '127.0.0.1:9465'",
        ),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as exited:
        code = main(args)
        raise SystemExit(code)
    assert exited.value.code == 2
    assert capsys.readouterr().err == message + "\n"


def test_pydantic_prefixes_never_reach_a_stress_client():
    from warptd.http.protection import validation_error
    from warptd.http.stress_routes import StressRequest

    with pytest.raises(ValidationError) as info:
        StressRequest.model_validate({"dtype": "fp8"})
    error = validation_error(info.value, "stress")
    assert error.message == "invalid stress request: dtype: must be one of float32, tf32, bfloat16, float16"


def test_list_prints_the_table_alone_and_why_others_did_not_load_with_verbose(capsys, tmp_path):
    assert main(["--sysfs", str(tmp_path), "list"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split()[0] == "DEVICE" and any(line.startswith("cpu:0 ") for line in lines)
    assert captured.err == ""
    assert main(["list", "--sysfs", str(tmp_path), "--verbose"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == lines
    assert "# rapl: no RAPL zones under" in captured.err and "{" not in captured.err


@pytest.mark.slow
def test_list_verbose_through_a_pipe_prints_the_table_then_the_notes(tmp_path):
    """``warptd list --verbose 2>&1 | cat``: stdout is a pipe (block-buffered), stderr is not; the
    table is flushed first, so it comes whole, then one note a line."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "warptd", "list", "--verbose", "--sysfs", str(tmp_path)]
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    shown = subprocess.run(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        check=True,
        env=buffered,
    ).stdout
    lines = shown.splitlines()
    notes = [i for i, line in enumerate(lines) if line.startswith("# ")]
    assert lines[0].startswith("DEVICE ") and any(line.startswith("cpu:0 ") for line in lines)
    assert notes and notes == list(range(notes[0], len(lines))), shown  # the notes last, each a line
    assert all("# " not in line for line in lines[: notes[0]]) and shown.endswith("\n")


def test_sample_prints_only_the_snapshot(capsys, tmp_path):
    assert main(["sample", "--backend", "cpu", "--interval", "0.1", "--sysfs", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith("# HELP ")


def test_an_explicit_log_level_still_logs(capsys, tmp_path):
    assert main(["list", "--sysfs", str(tmp_path), "--log-level", "debug"]) == 0
    assert '"event": "backend_unavailable"' in capsys.readouterr().err


def test_http_limits_are_flags_of_serve_only():
    from warptd.arguments import build_parser
    from warptd.cli import _settings

    args = build_parser().parse_args(["serve", "--http-max-connections", "100", "--http-idle-timeout", "5"])
    settings = _settings(args)
    assert settings.http_max_connections == 100 and settings.http_idle_timeout == 5
    with pytest.raises(SystemExit):
        build_parser().parse_args(["list", "--http-backlog", "256"])


def test_sample_json_names_each_labelled_value_by_its_labels(capsys, tmp_path, fake_nvml):
    """NVIDIA readings carry labelled gauges and counters (GPM pipes, field values): each is a list of
    series with the label names /metrics uses, so the JSON is valid and says which value is which."""
    import json

    from warptd.metrics import catalog

    fake_nvml.gpus[0].temperature = 44
    args = ["sample", "--json", "--backend", "nvidia", "--interval", "0.1", "--sysfs", str(tmp_path)]
    assert main(args) == 0
    snapshot = json.loads(capsys.readouterr().out)
    devices = snapshot["nvidia"]["devices"]
    assert [d["index"] for d in devices] == [0, 1] and devices[0]["temperatures_celsius"]["gpu"] == 44
    labelled = [
        (name, series)
        for device in devices
        for kind in ("gauges", "counters", "counter_totals")
        for name, series in device[kind].items()
    ]
    assert any(catalog.BY_NAME[name].labels[3:] for name, _ in labelled)  # some have labels of their own
    for name, series in labelled:
        for one in series:
            assert set(one) == {*catalog.BY_NAME[name].labels[3:], "value"}
            assert isinstance(one["value"], int | float)


def _setting_flags() -> list[tuple[str, argparse.Action]]:
    """Every flag of every command that sets a setting, by the command it belongs to."""
    from warptd.arguments import build_parser
    from warptd.config import Settings

    parser = build_parser()
    commands = {"warptd": parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands.update({f"warptd {name}": sub for name, sub in action.choices.items()})
    return [
        (command, action)
        for command, each in commands.items()
        for action in each._actions
        if action.dest in Settings.model_fields and action.option_strings
    ]


def test_every_flags_help_default_is_its_settings_default():
    """--help once said --health-interval defaults to 1 while the setting said 10: each default the
    help shows, read back as the setting, is the setting's own, and every value flag shows one."""
    from warptd.config import Settings, load_settings

    flags = _setting_flags()
    assert len(flags) > 60
    for command, action in flags:
        where = f"{command} {action.option_strings[0]}"
        default = Settings.model_fields[action.dest].default
        shown = re.findall(r"\(default ([^)]*)\)", action.help or "")
        if action.nargs == 0 or default in (None, []):  # a switch, or a setting unset (or empty) by default
            assert not shown, where
            continue
        assert len(shown) == 1, f"{where} shows no default: {action.help!r}"
        assert load_settings(**{action.dest: shown[0]}).model_dump()[action.dest] == default, where


# -- issue 39, finding 20: what a one-shot command prints means something there ------------------------
@pytest.mark.slow
def test_sample_prints_the_devices_and_not_its_own_one_second_process(tmp_path, capsys):
    paths = ["--sysfs", str(tmp_path), "--procfs", str(tmp_path)]
    assert main(["--backend", "cpu", *paths, "sample"]) == 0
    families = set(re.findall(r"^# TYPE (\S+)", capsys.readouterr().out, flags=re.MULTILINE))
    assert "warptd_device_up" in families and "warptd_backend_up" in families
    assert not {name for name in families if name.startswith("process_")}


def test_list_verbose_says_each_reason_once(capsys):
    from warptd.cli import unavailable_lines

    driver = "libnvidia-ml.so.1 not found: no NVIDIA driver on this host"
    unavailable = {"nvml": driver, "nvidia": driver, "rapl": "no RAPL zones", "nvidia_mig": driver}
    assert unavailable_lines(unavailable) == [
        ("nvidia, nvidia_mig, nvml", driver),
        ("rapl", "no RAPL zones"),
    ]


def test_list_verbose_on_this_node_repeats_no_reason(tmp_path, capsys):
    assert main(["--sysfs", str(tmp_path), "--log-level", "error", "list", "--verbose"]) == 0
    notes = [line.split(": ", 1)[1] for line in capsys.readouterr().err.splitlines() if line.startswith("# ")]
    assert notes and len(notes) == len(set(notes))
