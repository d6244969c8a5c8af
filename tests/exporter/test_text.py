"""Our fast writers produce exactly prometheus_client's bytes, for both formats."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client import generate_latest as text_reference
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_reference

from tests.helpers import Rig
from warptd.exporter.text import render_openmetrics, render_text


class Awkward:
    def collect(self):
        g = GaugeMetricFamily("t_weird_ratio", 'help with \\ backslash\nand "quotes"', labels=["a", "b"])
        g.add_metric(['va"l\\ue\nx', ""], 0.5)
        g.add_metric(["inf", "nan"], float("inf"))
        g.add_metric(["big", "neg"], -1e22)
        g.add_metric(["nan", "x"], float("nan"))
        yield g
        c = CounterMetricFamily("t_things", "Things.", labels=["k"])
        c.add_metric(["1"], 12345678.0)
        yield c


class Frozen:
    def __init__(self, metrics):
        self.metrics = metrics

    def collect(self):
        return iter(self.metrics)


def _registries(settings, fake_nvml, sysfs):
    sysfs.rapl_zone("intel-rapl:0", "package-0", 1)
    rig = Rig(settings)
    rig.tick()
    rig.tick()
    extra = CollectorRegistry()
    extra.register(Awkward())
    ProcessCollector(registry=extra)
    return rig, [rig.exposition.registry, extra]


def test_byte_identical_to_prometheus_client(settings, fake_nvml, sysfs):
    rig, registries = _registries(settings, fake_nvml, sysfs)
    for registry in registries:
        frozen = Frozen(list(registry.collect()))  # process metrics change between two collects
        assert render_text(frozen.collect()) == text_reference(frozen)
        assert render_openmetrics(frozen.collect()) == openmetrics_reference(frozen)
    assert b"warptd_device_energy_joules_total" in render_text(registries[0].collect())
    rig.close()
