"""The ``warptd`` command as a newcomer meets it: short output, each command's own help, one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.browser import browse
from tests.doubles.amdsmi import FakeAmdsmi
from tests.doubles.nvml import FakeNvml
from tests.plotted import plotted, with_probe
from tests.recordings import sample_recording
from tests.sysfs_tree import drm_card
from warptd.cli import main
from warptd.config import Settings, load_settings
from warptd.recording.report import render_html

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


ROOT = Path(__file__).parents[1]


CHART = ROOT / "helm" / "warptd"


def test_chart_copies_of_rules_and_dashboard_are_current():
    assert (CHART / "files" / "alerts.yml").read_bytes() == (
        ROOT / "deploy/prometheus/alerts.yml"
    ).read_bytes()
    assert (CHART / "files" / "warptd.json").read_bytes() == (
        ROOT / "deploy/grafana/warptd.json"
    ).read_bytes()


NESTED = 5000


def deep_toml(path: Path) -> Path:
    path.write_text(f"backends = {'[' * NESTED}{']' * NESTED}\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "content", "error"),
    [
        ("deep.yml", f"basic_auth_users: {'[' * NESTED}{']' * NESTED}\n".encode(), "is nested too deep"),
        ("latin1.yml", b"basic_auth_users:\n  caf\xe9: x\n", "not UTF-8 (byte 23)"),
        ("bad.yml", b"basic_auth_users:\n  a: [\n  - b: {\n", "at line 3, column 3"),
    ],
)
def test_a_bad_web_config_file_is_one_line_and_exit_2(name, content, error, tmp_path, capsys):
    from warptd.cli import main

    web = tmp_path / name
    web.write_bytes(content)
    argv = [
        "--backend",
        "cpu",
        "--sysfs",
        str(tmp_path),
        "--listen",
        "127.0.0.1:0",
        "--web-config-file",
        str(web),
    ]
    assert main(argv) == 2
    printed = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("{")]  # logs
    assert len(printed) == 1 and printed[0].startswith("warptd: invalid setting web_config_file: ")
    assert error in printed[0]


def test_a_config_file_nested_too_deep_is_one_line_and_exit_2(tmp_path, capsys):
    from warptd.cli import main

    assert main(["list", "--config", str(deep_toml(tmp_path / "warptd.toml"))]) == 2  # RecursionError, exit 1
    assert capsys.readouterr().err == f"warptd: invalid config file {tmp_path}/warptd.toml: nested too deep\n"


BACKENDS = ["nvidia", "amd", "hwmon", "cpu"]


@pytest.fixture
def node(settings, sysfs):
    """2 NVIDIA GPUs, 2 AMD GPUs (the first also seen by amdgpu's hwmon), an Intel iGPU, the CPU."""
    nvml, amd = FakeNvml(gpus=2), FakeAmdsmi(gpus=2)
    amd_bdf = amd.gpus[0].pci_bus_id
    drm_card(sysfs, 0, "amdgpu", amd_bdf, {"gpu_busy_percent": 50}, {"power1_input": 90_000_000})
    drm_card(sysfs, 1, "i915", "0000:00:02.0", {"device": "0xa780"}, {"energy1_input": 5_000_000})
    settings.backends = BACKENDS
    with nvml.installed(), amd.installed():
        yield settings, nvml, amd


def test_warptd_list_shows_every_vendor(node, capsys):
    settings, _, amd = node
    args = ["--sysfs", str(settings.sysfs), "--log-level", "error"]
    for backend in BACKENDS:
        args += ["--backend", backend]
    assert main([*args, "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["DEVICE", "SOURCE", "MODEL", "MEMORY", "PCI", "UUID"]
    devices = [line.split()[:2] for line in table[1:]]
    assert devices == [
        ["nvidia:0", "nvml"],
        ["nvidia:1", "nvml"],
        ["amd:0", "amdsmi"],
        ["amd:1", "amdsmi"],
        ["hwmon:0", "sysfs"],
        ["cpu:0", "psutil"],
    ]
    assert main([*args, "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["backend"], d["pci_bus_id"]) for d in listed if d["backend"] == "amd"] == [
        ("amd", gpu.pci_bus_id) for gpu in amd.gpus
    ]


def test_warptd_report_writes_the_page_and_refuses_a_non_recording(tmp_path, capsys):
    recording = sample_recording(count=5)
    source = tmp_path / "run.json"
    source.write_text(recording.model_dump_json())
    assert main(["report", str(source), "-o", str(tmp_path / "run.html")]) == 0
    assert (tmp_path / "run.html").read_text(encoding="utf-8") == render_html(recording)
    assert "run.html" in capsys.readouterr().out
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**recording.model_dump(mode="json"), "duration_seconds": "long"}))
    assert main(["report", str(broken)]) == 2
    assert capsys.readouterr().err == (
        f"warptd report: {broken}: not a recording: duration_seconds: "
        "Input should be a valid number, unable to parse string as a number\n"
    )
    assert main(["report", str(tmp_path / "absent.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_report_help_names_its_arguments(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = capsys.readouterr().out
    assert "RECORDING.json" in text and "--output" in text and "--backend" not in text


def test_report_refuses_three_recordings_and_a_negative_price(tmp_path, capsys):
    source = tmp_path / "a.json"
    source.write_text(sample_recording(count=3).model_dump_json())
    assert main(["report", str(source), str(source), str(source)]) == 2
    assert "one recording, or two to compare; got 3" in capsys.readouterr().err
    assert main(["report", str(source), "--energy-price", "-1"]) == 2
    assert "--energy-price must be a number of 0 or more" in capsys.readouterr().err
    assert main(["report", "-", "-"]) == 2
    assert "only one recording can come from stdin" in capsys.readouterr().err


@pytest.mark.slow
def test_energy_bars_say_their_joules_source_carbon_and_cost(tmp_path, capsys):
    recording = sample_recording(count=12)
    source, output = tmp_path / "run.json", tmp_path / "run.html"
    source.write_text(recording.model_dump_json())
    argv = ["report", str(source), "-o", str(output), "--carbon-intensity", "400", "--energy-price", "0.25"]
    assert main(argv) == 0
    capsys.readouterr()
    output.write_text(with_probe(output.read_text(encoding="utf-8")), encoding="utf-8")
    dom, console = browse(output.as_uri())
    assert console == []
    labels = plotted(dom)["plots"]["plot-energy"]["barText"]
    words = {"counter": "energy counter", "integrated": "integrated power"}
    expected = []
    for target in recording.targets:
        joules = target.energy_joules
        assert (joules is not None and joules >= 1000) or target.kind == "domain"
        shown = f"{joules:,.0f} J" if joules >= 1000 else f"{joules:,.1f} J"
        grams, cost = joules / 3.6e6 * 400, joules / 3.6e6 * 0.25
        expected.append([shown, words[target.energy_source], f"{grams:,.3g} g CO2e", f"cost {cost:,.4g}"])
    assert labels == expected
    totals = re.search(r'<p class="totals">(.*?)</p>', dom).group(1)
    total = recording.energy_joules
    assert f"<b>carbon</b>{total / 3.6e6 * 400:,.3g} g CO2e" in totals
    assert f"<b>cost</b>{total / 3.6e6 * 0.25:,.4g}" in totals
