"""--metrics-exclude / --metrics-include: which families are exported and read, the fleet-sized
default, and a bad glob's one-line error."""

from __future__ import annotations

from warptd.metrics import catalog as m
from warptd.metrics.selection import matching, select


def test_an_include_wins_over_an_exclude_so_a_broad_exclude_keeps_what_it_names():
    kept = select(exclude=("warptd_device_*",), include=("warptd_device_power_watts", "warptd_device_info"))
    devices = {s.name for s in m.EVERY if s.name.startswith("warptd_device_")}
    assert kept.exported & devices == {"warptd_device_power_watts", "warptd_device_info"}
    assert kept.wants(m.BACKEND_UP.name)  # not a device family: untouched
    assert select(exclude=("warptd_device_clock_hertz",), include=("warptd_device_clock_hertz",)).wants(
        m.CLOCK.name
    )


def test_the_compat_series_sources_are_read_though_not_exported():
    selection = select(exclude=("warptd_device_clock_hertz", "warptd_device_xid_errors_total"), compat=True)
    assert not selection.wants(m.CLOCK.name) and selection.reads(m.CLOCK.name)
    assert selection.reads(m.XID_ERRORS.name)
    assert not select(exclude=("warptd_device_clock_hertz",)).reads(m.CLOCK.name)


def test_globs_match_names_as_docs_list_them():
    assert matching("warptd_device_clock_*") == {m.CLOCK.name, m.CLOCK_EVENT_ACTIVE.name}
    assert matching("warptd_device_energy_joules_total") == {m.ENERGY.name}
    assert matching("warptd_*_info") >= {m.DEVICE_INFO.name, m.BUILD_INFO.name}
