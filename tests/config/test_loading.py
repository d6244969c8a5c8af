"""Flags, WARPTD_* environment and the TOML file map onto one settings model; bad values fail clearly."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from tests.backends.cpu.test_backend import unreadable_cpuinfo
from tests.helpers import Rig
from tests.sysfs_tree import cpuinfo
from warptd.backends import cadence
from warptd.backends.cpu.backend import CpuBackend
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


def test_without_cpufreq_cpuinfo_is_read_at_the_health_cadence_only(sysfs, procfs, monkeypatch):
    settings = load_settings(sysfs=sysfs.root, procfs=procfs, interval=1.0, health_interval=10.0)
    cpuinfo(procfs, "AuthenticAMD", megahertz=[2596.136, 1500.0])
    now = [100.0]
    monkeypatch.setattr(cadence, "time", SimpleNamespace(monotonic=lambda: now[0]))
    backend = CpuBackend(settings)
    assert backend.devices[0].clocks() == {"cpu": pytest.approx(2048.068e6)}
    unreadable_cpuinfo(procfs)  # a read between two health reads would fail, and be counted
    for _ in range(9):
        now[0] += 1.0
        assert backend.devices[0].clocks() == {"cpu": pytest.approx(2048.068e6)}
    assert not backend.take_errors()
    now[0] += 1.0  # 10 s after the first read: read again, and now it fails
    assert backend.devices[0].clocks() == {}
    assert backend.take_errors() == {"unexpected": 1}
    assert backend.read_costs.totals()["clock"].reads == 2


def test_compat_is_a_setting_flag_and_environment_value(monkeypatch):
    assert load_settings().compat is None
    monkeypatch.setenv("WARPTD_COMPAT", "dcgm-exporter")
    assert load_settings().compat == "dcgm-exporter"
    monkeypatch.setenv("WARPTD_COMPAT", "nvidia-smi")
    with pytest.raises(SettingsError, match="compat"):
        load_settings()


def test_lease_bounds_must_be_in_order():
    with pytest.raises(SettingsError, match="window_lease_min \\(10\\) is above window_lease_max \\(5\\)"):
        load_settings(window_lease_min=10, window_lease_max=5)


def _job_seconds(sampler, name):
    return sampler.scheduler.get_job(f"sample-{name}").trigger.interval.total_seconds()


@pytest.mark.rig("rapl", doubles=["two_sockets"])
def test_rapl_is_scheduled_within_its_max_interval_other_backends_at_interval(sysfs, procfs):
    sysfs.rapl_amd(sockets=1)
    settings = load_settings(
        listen="127.0.0.1:0", sysfs=sysfs.root, procfs=procfs, interval=3600, backends=["rapl", "cpu"]
    )
    rig = Rig(settings)
    cap = rig.sampler.backends["rapl"].max_interval
    with capture_logs() as logs:
        rig.sampler.start()
    try:
        assert _job_seconds(rig.sampler, "rapl") == pytest.approx(cap) and cap < 20
        assert _job_seconds(rig.sampler, "cpu") == 3600
        capped = [e for e in logs if e["event"] == "sample_interval_capped"]
        assert len(capped) == 1 and capped[0]["backend"] == "rapl" and capped[0]["log_level"] == "info"
        rig.sampler.reconfigure(settings.model_copy(update={"interval": 5.0}))
        assert _job_seconds(rig.sampler, "rapl") == 5.0 and _job_seconds(rig.sampler, "cpu") == 5.0
        rig.sampler.reconfigure(settings.model_copy(update={"interval": 600.0}))
        assert _job_seconds(rig.sampler, "rapl") == pytest.approx(cap)
        assert _job_seconds(rig.sampler, "cpu") == 600
    finally:
        rig.close()


def test_workload_settings_from_flags_and_environment(monkeypatch):
    from warptd.arguments import build_parser
    from warptd.cli import _settings
    from warptd.config import SettingsError, load_settings

    args = build_parser().parse_args(
        ["--workloads", "--workload-kinds", "slurm_job, user", "--workload-max", "5", "--cgroupfs", "/cg"]
    )
    settings = _settings(args)
    assert (settings.workloads, settings.workload_kinds, settings.workload_max) == (
        True,
        ["slurm_job", "user"],
        5,
    )
    assert str(settings.cgroupfs) == "/cg" and settings.workload_retention == 600.0
    assert load_settings().workloads is False  # off by default (docs/workloads.md says why)
    monkeypatch.setenv("WARPTD_WORKLOAD_KINDS", "container")
    monkeypatch.setenv("WARPTD_WORKLOAD_RETENTION", "30")
    assert (load_settings().workload_kinds, load_settings().workload_retention) == (["container"], 30.0)
    for bad in (
        {"workload_kinds": "pod"},
        {"workload_kinds": ""},
        {"workload_max": 0},
        {"workload_retention": -1},
    ):
        with pytest.raises(SettingsError):
            load_settings(**bad)
