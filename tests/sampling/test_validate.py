"""The further gauges and counters any backend may report: validated, made monotonic, exported."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warptd.models import DeviceReading
from warptd.power.base import DomainReading
from warptd.sampling.validate import sanitize_device, sanitize_domain


def test_a_dict_handed_over_again_is_not_checked_again_but_a_new_one_is():
    """The last reading's dicts pass by identity; a new dict, even equal to an old one, is checked."""
    from warptd.models import DeviceReading
    from warptd.sampling.validate import sanitize_device

    steady = {("correctable",): 3.0}
    first = DeviceReading(index=0, gauges={"warptd_device_remapped_rows": steady})
    first, rejected = sanitize_device(first)
    assert rejected == 0
    again = DeviceReading(index=0, gauges={"warptd_device_remapped_rows": steady})
    again, rejected = sanitize_device(again, first)
    assert rejected == 0 and again.gauges["warptd_device_remapped_rows"] is steady
    garbage = DeviceReading(index=0, gauges={"warptd_device_remapped_rows": {("correctable",): -1.0}})
    garbage, rejected = sanitize_device(garbage, first)
    assert rejected == 1 and garbage.gauges["warptd_device_remapped_rows"] == {}


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
def test_nan_power_from_a_plugin_is_rejected(settings):
    import math

    from warptd.models import DeviceReading
    from warptd.sampling.validate import sanitize_device

    reading = DeviceReading(index=0, power_watts=math.nan, temperatures_celsius={"a": 40.0, "b": math.inf})
    reading, rejected = sanitize_device(reading)
    assert rejected == 2
    assert reading.power_watts is None and reading.temperatures_celsius == {"a": 40.0}


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
@pytest.mark.parametrize(
    ("field", "garbage"),
    [
        ("power_watts", -1.0),
        ("power_average_watts", float("inf")),
        ("power_limit_watts", 20_000.0),
        ("energy_counter_joules", float("nan")),
        ("energy_counter_joules", float("inf")),
        ("power_watts", "400"),
    ],
)
def test_each_impossible_power_value_is_dropped_alone(field, garbage):
    """The power values pass in one expression when sane; one that is not is dropped and counted,
    the others kept."""
    from warptd.models import DeviceReading
    from warptd.sampling.validate import sanitize_device

    sane = {
        "power_watts": 400.0,
        "power_average_watts": 390.0,
        "power_limit_watts": 700,
        "energy_counter_joules": 5e6,
    }
    reading, rejected = sanitize_device(DeviceReading(index=0, **{**sane, field: garbage}))
    assert rejected == 1
    assert getattr(reading, field) is None
    assert all(getattr(reading, name) == value for name, value in sane.items() if name != field)
    clean, rejected = sanitize_device(DeviceReading(index=0, **sane))
    assert rejected == 0 and clean.power_limit_watts == 700


def test_the_checks_return_the_reading_itself_unless_they_rejected_something():
    reading = DeviceReading(index=0, power_watts=300.0, temperatures_celsius={"gpu": 40.0})
    assert sanitize_device(reading) == (reading, 0)
    bad = replace(reading, power_watts=-1.0)
    checked, rejected = sanitize_device(bad)
    assert rejected == 1 and checked is not bad and checked.power_watts is None
    assert bad.power_watts == -1.0  # the backend's reading is left as it was
    domain = DomainReading("package-0", power_watts=10.0)
    assert sanitize_domain(domain) == (domain, 0)
    checked_domain, rejected = sanitize_domain(replace(domain, energy_counter_joules=float("nan")))
    assert rejected == 1 and checked_domain.energy_counter_joules is None
