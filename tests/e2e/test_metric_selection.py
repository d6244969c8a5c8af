"""--metrics-exclude / --metrics-include: which families are exported and read, the fleet-sized
default, and a bad glob's one-line error."""

from __future__ import annotations

import time

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.fleet import BUSY_ENGINES, series_by_family, series_per_gpu
from tests.helpers import serving, wait_until
from tests.metrics.test_selection import scraped
from warptd.exporter.text import render_text
from warptd.metrics import catalog as m
from warptd.metrics import nvidia
from warptd.metrics.selection import DEFAULT_EXCLUDE, EVERYTHING, select
from warptd.metrics.series_counts import MODELS, SERIES_PER_GPU


@pytest.fixture
def h200s():
    fake = FakeNvml([FakeGpu.h200(i) for i in range(8)])
    with fake.installed():
        yield fake
    fake.close()


def _rendered(daemon, selection) -> str:
    """The daemon's whole registry (XIDs too) as ``selection`` would export it, from the same snapshot."""
    metrics = daemon.exposition.registry.collect()
    return render_text([mf for mf in metrics if selection.exports(mf.name, mf.type)]).decode()


def _gpm_in(body: str) -> bool:
    return len(series_by_family(body).get(nvidia.SM_ACTIVE.name, {})) == 8  # GPM needs two samples


@pytest.mark.slow
def test_the_default_leaves_out_the_engines_and_the_sampled_throttle_flags(settings, h200s):
    """The part of the bound this change owns: the default exclusions' families are absent from a
    plain serve, and the series per GPU fall by exactly theirs."""
    settings.backends = ["nvidia"]
    with serving(settings) as daemon:
        assert wait_until(lambda: _gpm_in(scraped(daemon.port)), timeout=10)
        everything = _rendered(daemon, EVERYTHING)
        served = scraped(daemon.port)
    full, plain = series_by_family(everything), series_by_family(served)
    assert set(full) - set(plain) == {name for name in DEFAULT_EXCLUDE if name in full}
    assert m.THROTTLE_ACTIVE.name in set(full) - set(plain)
    assert nvidia.ENGINE_ACTIVE.name in DEFAULT_EXCLUDE  # idle engines: shown only once active anyway
    gpu = h200s.gpus[0].uuid
    left_out = sum(full[name][gpu] for name in DEFAULT_EXCLUDE if name in full)
    assert series_per_gpu(served)[gpu] == series_per_gpu(everything)[gpu] - left_out


@pytest.mark.slow
def test_excluding_the_clock_globs_removes_every_clock_series_and_no_other_family(settings, h200s):
    settings.backends = ["nvidia", "cpu"]
    settings.metrics_exclude = ["warptd_device_clock_*"]
    with serving(settings) as daemon:
        assert wait_until(lambda: _gpm_in(scraped(daemon.port)), timeout=10)
        served = scraped(daemon.port)
        default = _rendered(daemon, select())
        cpu = daemon.snapshot.get("cpu").devices[0].reading
    assert "warptd_device_clock" not in served
    assert "warptd_device_clock_hertz" in default  # there to remove: the GPUs' clocks
    without, with_clocks = series_by_family(served), series_by_family(default)
    assert set(with_clocks) - set(without) == {m.CLOCK.name}
    assert {k: v for k, v in with_clocks.items() if k != m.CLOCK.name} == without
    # The CPU's clock is not even read (psutil parses /proc/cpuinfo for it); the rest of it is there.
    assert cpu.clocks_hertz == {} and series_by_family(served, "cpu") == series_by_family(default, "cpu")
    assert m.MEMORY_USED.name in series_by_family(served, "cpu")


@pytest.mark.slow
def test_without_the_xid_families_no_event_thread_unless_compat_reads_them(settings, h200s):
    settings.backends = ["nvidia"]
    settings.metrics_exclude = ["warptd_device_*xid*"]
    with serving(settings) as daemon:
        assert daemon.event_monitors == []
    settings.compat = "dcgm-exporter"  # DCGM_FI_DEV_XID_ERRORS is made from the XID counts
    with serving(settings) as daemon:
        assert daemon.event_monitors != []
    settings.compat, settings.metrics_exclude = None, []
    with serving(settings) as daemon:
        assert daemon.event_monitors != []


@pytest.mark.slow
def test_without_the_pod_energy_families_no_energy_split(settings, fake_nvml, tmp_path):
    """Pod energy splits each allocated device's energy every sample: not done where none of its
    families is exported; the allocations are still served."""
    from tests.kubelet import FakeKubelet

    kubelet = FakeKubelet(tmp_path / "kubelet.sock").start()
    kubelet.pods = {("ml", "train-0", "trainer"): {"nvidia.com/gpu": [fake_nvml.gpus[0].uuid]}}
    settings.backends, settings.kubelet_socket = ["nvidia"], kubelet.socket
    try:
        for excluded, split in (([], True), (["warptd_pod_energy_*"], False)):
            settings.metrics_exclude = excluded
            with serving(settings) as daemon:
                assert wait_until(lambda d=daemon: "warptd_device_allocation_info{" in scraped(d.port))
                listeners = [getattr(listener, "__self__", None) for listener in daemon.sampler.listeners]
                assert any(type(owner).__name__ == "PodEnergy" for owner in listeners) is split
                energy = wait_until(lambda d=daemon: "warptd_pod_energy_joules_total{" in scraped(d.port), 2)
                assert energy is split
    finally:
        kubelet.stop()


@pytest.mark.slow
@pytest.mark.parametrize("model", range(len(MODELS)), ids=lambda i: MODELS[i])
def test_the_documented_series_per_gpu_are_what_a_daemon_over_the_double_exports(settings, model):
    """docs/metrics.md's figures (warptd/metrics/series_counts.py, written by bench/series_bench.py)
    are today's: a change in what a GPU exports fails here until the bench is run again. As the bench
    does, every media engine turns busy once GPM has two samples."""
    pytest.importorskip("torch")  # the stress series of a GPU: only where torch is installed
    make = FakeGpu.h200 if MODELS[model].startswith("H200") else FakeGpu
    fake = FakeNvml([make(index=i) for i in range(8)])
    settings.backends, settings.metrics_include = ["nvidia"], ["*"]
    with fake.installed(), serving(settings) as daemon:
        assert wait_until(lambda: _gpm_in(scraped(daemon.port)), timeout=10)
        for gpu in fake.gpus:
            gpu.busy_engines(BUSY_ENGINES)

        def busy() -> bool:  # each kind's average shows once the kind is busy
            return len(series_by_family(scraped(daemon.port)).get(nvidia.OFA_UTILIZATION.name, {})) == 8

        assert wait_until(busy, timeout=10)
        time.sleep(1.5)  # a GPM period past the busy one, and a health read
        found = series_by_family(scraped(daemon.port))
    fake.close()
    measured = {family: max(per_gpu.values()) for family, per_gpu in found.items()}
    documented = {family: counts[model] for family, counts in SERIES_PER_GPU.items() if counts[model]}
    assert measured == documented, "run python bench/series_bench.py --write, then regenerate docs/metrics.md"
