"""The default selection's bound (issue 39 #14): at most 60 series per GPU on every GPU model the
doubles know, NVLink included, busy (every media engine kind decoding, so each kind's average shows)
as well as idle; each MIG device counts apart. An XID that happens adds its series beyond the bound."""

from __future__ import annotations

#: README.md and docs/metrics.md: what a GPU costs Prometheus at the defaults.
import pytest

from tests.doubles.amdsmi import FakeAmdsmi
from tests.doubles.amdsmi import FakeGpu as AmdGpu
from tests.doubles.nvml import GIB, FakeGpu, FakeMig, FakeNvml
from tests.fleet import series_by_family, series_per_gpu
from tests.helpers import http, serving, wait_until
from warptd.cli import main
from warptd.config import SettingsError, load_settings
from warptd.metrics import catalog as m
from warptd.metrics import nvidia
from warptd.metrics.selection import DEFAULT_EXCLUDE, EVERYTHING, select

MAX_SERIES_PER_GPU = 60
SLICES = [
    FakeMig("MIG-aaaaaaaa-1111-5222-8333-444444444444", gpu_instance=1, memory_total=40 * GIB),
    FakeMig("MIG-bbbbbbbb-1111-5222-8333-444444444444", gpu_instance=2, memory_total=10 * GIB),
]
#: Every kind of media engine an H100 or H200 has, each busy: the averages of all three show.
BUSY = {"nvdec": 7, "nvjpg": 7, "ofa": 1}


def _h100_with_mig(index: int) -> FakeGpu:
    gpu = FakeGpu(index=index)
    gpu.mig_devices = SLICES if index == 0 else []
    return gpu


NVIDIA = {
    "H100 SXM, 18 NVLinks": lambda index: FakeGpu(index=index),
    "H200, no NVLink": FakeGpu.h200,
    "H100 SXM, MIG on one GPU": _h100_with_mig,
}


def scraped(port: int) -> str:
    """The /metrics text the daemon on ``port`` serves."""
    return http(port, "GET", "/metrics")[2].decode()


@pytest.mark.slow
@pytest.mark.parametrize("model", list(NVIDIA))
@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
def test_every_nvidia_model_of_the_double_costs_at_most_60_series_per_gpu(settings, model, busy):
    gpus = [NVIDIA[model](i) for i in range(2)]
    for gpu in gpus:
        if busy and not gpu.mig_devices:  # the averages are not supported with MIG on (nvml.h)
            gpu.busy_engines(BUSY)
    fake = FakeNvml(gpus)
    settings.backends = ["nvidia", "nvidia_mig"]
    with fake.installed(), serving(settings) as daemon:

        def settled() -> bool:  # GPM needs two samples; the averages come with the slow values
            found = series_by_family(scraped(daemon.port))
            ready = len(found.get(nvidia.SM_ACTIVE.name, {})) >= 1
            return ready and (not busy or len(found.get(nvidia.OFA_UTILIZATION.name, {})) >= 1)

        assert wait_until(settled, timeout=15)
        body = scraped(daemon.port)
    fake.close()
    per_gpu, per_mig = series_per_gpu(body), series_per_gpu(body, "nvidia_mig")
    assert set(per_gpu) == {gpu.uuid for gpu in gpus}
    assert max(per_gpu.values()) <= MAX_SERIES_PER_GPU, per_gpu
    if gpus[0].mig_devices:
        assert set(per_mig) == {device.uuid for device in SLICES}
        assert max(per_mig.values()) <= MAX_SERIES_PER_GPU, per_mig
    families = series_by_family(body)
    assert nvidia.NVLINK_LINK_ERRORS.name not in families and nvidia.NVLINK_LINK_BYTES.name not in families
    if gpus[1].nvlink_count:
        assert max(families[nvidia.NVLINK_ERRORS.name].values()) == 4  # every link's, by kind
        assert max(families[nvidia.NVLINK_BYTES.name].values()) == 2
    if busy:
        for spec in (nvidia.DECODER_UTILIZATION, nvidia.JPEG_UTILIZATION, nvidia.OFA_UTILIZATION):
            assert gpus[1].uuid in families[spec.name], spec.name


@pytest.mark.slow
def test_the_amd_double_s_mi300x_costs_at_most_60_series_per_gpu_with_its_xgmi_links_summed(settings):
    fake = FakeAmdsmi([AmdGpu(index=0), AmdGpu(index=1)])
    settings.backends = ["amd"]
    with fake.installed(), serving(settings) as daemon:
        assert wait_until(lambda: series_per_gpu(scraped(daemon.port), "amd"), timeout=10)
        body = scraped(daemon.port)
    per_gpu, families = series_per_gpu(body, "amd"), series_by_family(body, "amd")
    assert len(per_gpu) == 2 and max(per_gpu.values()) <= MAX_SERIES_PER_GPU, per_gpu
    assert max(families[nvidia.NVLINK_BYTES.name].values()) == 2  # the 7 XGMI links summed, by direction
    assert nvidia.NVLINK_LINK_BYTES.name not in families


def test_the_default_leaves_out_only_its_list_and_an_include_brings_one_back():
    default = select()
    assert {s.name for s in m.EVERY} - default.exported == set(DEFAULT_EXCLUDE)
    engines = nvidia.ENGINE_ACTIVE.name
    assert not default.wants(engines)
    assert select(include=("warptd_device_engine_*",)).wants(engines)
    assert select(include=("*",)).exported == EVERYTHING.exported


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
