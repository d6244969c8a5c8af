"""--metrics-exclude / --metrics-include: which families are exported and read, the fleet-sized
default, and a bad glob's one-line error."""

from __future__ import annotations

import pytest

from tests.helpers import Rig
from warptd.cli import main
from warptd.config import SettingsError, load_settings


@pytest.mark.parametrize(
    ("glob", "message"),
    [
        ("warptd_gpu_*", "'warptd_gpu_*' matches no metric family (docs/metrics.md lists them)"),
        ("warptd_device_[clock", "unclosed '[' in 'warptd_device_[clock'"),
        ("warptd device", "not a metric name glob: 'warptd device'"),
        ("warptd_device_energy_joules", "matches no metric family"),  # a counter's name has _total
    ],
)
def test_a_bad_glob_is_one_line_and_exit_2(glob, message, capsys):
    with pytest.raises(SettingsError) as info:
        load_settings(metrics_include=[glob])
    assert message in str(info.value) and "\n" not in str(info.value)
    assert main(["serve", "--metrics-exclude", glob]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert err.startswith("warptd: invalid setting metrics_exclude")


def test_a_change_of_selection_needs_a_restart():
    from warptd.config import RELOADABLE

    assert not {"metrics_exclude", "metrics_include"} & RELOADABLE


def test_a_read_serving_only_excluded_families_is_not_made(settings, monkeypatch):
    """The CPU backend's clock (cpufreq, else /proc/cpuinfo) and temperatures are not read once their
    families are left out; the rest of its reading is."""
    from warptd.backends.cpu.clock import CpuClock

    calls = []
    monkeypatch.setattr(CpuClock, "read", lambda self: calls.append(1) or 2.4e9)
    settings.metrics_exclude = ["warptd_device_clock_hertz", "warptd_device_temperature_celsius"]
    rig = Rig(settings.model_copy(update={"backends": ["cpu"]}))
    try:
        rig.tick("cpu")
        reading = rig.snapshot.get("cpu").devices[0].reading
    finally:
        rig.close()
    assert calls == [] and reading.clocks_hertz == {} and reading.memory is not None
    settings.metrics_exclude = []
    rig = Rig(settings.model_copy(update={"backends": ["cpu"]}))
    try:
        rig.tick("cpu")
    finally:
        rig.close()
    assert calls  # read where exported
