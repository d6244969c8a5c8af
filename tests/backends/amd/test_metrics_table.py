"""One AMD GPU's metrics table, kept by its device object (warptd/backends/amd/metrics_table.py), and
the AMD package's place below sampling."""

from __future__ import annotations

from warptd.backends.amd.metrics_table import MetricsTable, ResidencySeconds


def test_residency_seconds_from_accumulator_deltas():
    """Δresidency / Δcycles of the time between two readings: exact, whatever the cycle's period."""
    counted = ResidencySeconds()
    assert counted.update(1_000, 50_000, 10.0) == 0.0  # the first reading is the base
    assert counted.update(1_000 + 250, 50_000 + 1_000, 12.0) == 0.5  # a quarter of 2 s
    assert counted.active
    assert counted.update(1_250, 51_000, 12.5) == 0.5  # the table not refreshed: nothing, base kept
    assert counted.active
    assert counted.update(1_250, 52_000, 13.0) == 0.5  # 1 s without throttling
    assert not counted.active
    assert counted.update(10, 300, 14.0) == 0.5  # the counters restarted (driver reload): a new base
    assert counted.update(510, 800, 15.0) == 1.5


def _table(cycles: int, seconds: float, ppt: int, prochot: int, **fields: object) -> dict[str, object]:
    stamp = {"accumulation_counter": cycles, "system_clock_counter": int(seconds * 1e9)}
    return {**stamp, "ppt_residency_acc": ppt, "prochot_residency_acc": prochot, **fields}


def test_each_table_counts_throttle_seconds_and_a_read_without_one_reports_no_state():
    table = MetricsTable()
    assert table.throttle_reasons() is None and table.throttle_counters() == {}
    table.update(_table(1_000, 10.0, ppt=0, prochot=0))
    assert table.supported_throttle_reasons() == ["sw_power_cap", "hw_thermal_slowdown"]
    assert table.throttle_reasons() == []
    table.update(_table(2_000, 12.0, ppt=500, prochot=0))  # PPT half of 2 s
    assert table.throttle_reasons() == ["sw_power_cap"]
    assert table.throttle_counters() == {"sw_power_cap": 1.0, "hw_thermal_slowdown": 0.0}
    table.update({})  # unsupported or failing this read: unknown, not "none active"
    assert table.throttle_reasons() is None and table.throttle_counters() == {}
    assert table.supported_throttle_reasons() == ["sw_power_cap", "hw_thermal_slowdown"]
    table.update(_table(3_000, 14.0, ppt=500, prochot=1_000))  # the totals went on meanwhile
    assert table.throttle_counters() == {"sw_power_cap": 1.0, "hw_thermal_slowdown": 2.0}


def test_engine_activity_and_xgmi_traffic_come_from_this_reads_table():
    table = MetricsTable()
    table.update({"vcn_activity": [10, "N/A"], "jpeg_activity": [0xFFFF, 40], "xgmi_read_data_acc": [1, 2]})
    assert table.engine_activity() == {("vcn", "0"): 0.1, ("jpeg", "1"): 0.4}
    assert table.xgmi_bytes() == {("0", "rx"): 1024, ("1", "rx"): 2048}
    assert table.throttle_reasons() is None  # no residency accumulators: no throttle state at all
    table.update({})
    assert table.engine_activity() == {} and table.xgmi_bytes() == {}
