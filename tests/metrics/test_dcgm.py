"""Which dcgm-exporter release ``--compat dcgm-exporter`` replaces, and so its node label (issue 39,
finding 21): ``hostname`` since dcgm-exporter's PR #655, ``Hostname`` in 4.5.3-4.8.2 and before."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pynvml
import pytest

from tests.doubles.nvml import GIB, FakeNvml
from tests.helpers import Rig, Sample, parse, select
from warptd.config import SettingsError, load_settings
from warptd.exporter.dcgm import DcgmCompatCollector
from warptd.metrics import dcgm
from warptd.metrics.dcgm_docs import render_rules


@pytest.mark.parametrize(
    ("release", "label"),
    [
        ("latest", "hostname"),
        ("4.5.3-4.8.2", "Hostname"),  # the last release before the rename
        ("4.8.2", "Hostname"),  # dcgm-exporter's own version alone
        ("4.4.0-4.5.0", "Hostname"),
        ("3.3.9-3.6.1-ubuntu22.04", "Hostname"),  # an image tag as pulled
        ("4.5.3-4.8.3", "hostname"),
        ("4.6.0-4.9.0", "hostname"),
    ],
)
def test_the_node_label_is_the_one_of_the_release_replaced(release, label):
    assert dcgm.node_label(release) == label
    assert dcgm.identity_labels(release)[5] == label
    assert label in dcgm.labels_of(dcgm.COMPAT[0], pods=True, release=release)


def test_the_default_is_the_current_release():
    assert load_settings().dcgm_exporter_release == "latest"
    assert dcgm.node_label() == "hostname"


@pytest.mark.parametrize("release", ["newest", "4.8", "4.5.3-4.8.2; rm -rf /", ""])
def test_a_release_that_is_none_is_one_line_naming_the_forms(release):
    with pytest.raises(SettingsError) as refused:
        load_settings(dcgm_exporter_release=release or " ")
    message = str(refused.value)
    assert "\n" not in message and "dcgm_exporter_release" in message
    assert (
        "not a dcgm-exporter release" in message and "latest, or its image's version: 4.5.3-4.8.2" in message
    )


def test_the_recording_rules_carry_the_label_of_the_release_they_are_made_for():
    current, older = render_rules(), render_rules("4.5.3-4.8.2")
    assert '"hostname", "$1", "node"' in current and "Hostname" not in current.split("groups:")[1]
    assert '"Hostname", "$1", "node"' in older and "hostname" not in older.split("groups:")[1]
    assert "modelName, Hostname, DCGM_FI_DRIVER_VERSION) warptd:dcgm_identity" in older


ROOT = Path(__file__).parents[2]


DATA = ROOT / "tests" / "data" / "dcgm-exporter"


GUIDE = ROOT / "docs" / "migrating-from-dcgm-exporter.md"


MIB = 2**20


DRIVER = "580.65.06"  # the double's default driver


GPM = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: (0.7, 0.45),
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: (0.4, 0.1),
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: (0.55, 0.25),
}


def default_counters() -> list[tuple[str, str, str]]:
    """(name, type, help) of every line of dcgm-exporter's etc/default-counters.csv."""
    rows = []
    with (DATA / "default-counters.csv").open() as handle:
        for row in csv.reader(line for line in handle if line.strip() and not line.startswith("#")):
            name, kind, *help_ = (part.strip() for part in row)
            rows.append((name, kind, ",".join(help_).strip()))
    return rows


def test_every_default_counter_is_served_or_documented_as_not_served_with_its_reason():
    counters = default_counters()
    assert len([kind for _, kind, _ in counters if kind != "label"]) == 25  # and the driver version label
    served = {metric.name for metric in dcgm.COMPAT}
    guide = GUIDE.read_text()
    for name, _, _ in counters:
        if name in served or name in dcgm.AS_LABELS:
            continue
        assert name in dcgm.NOT_SERVED, f"{name}: neither served nor listed as not served"
        assert dcgm.NOT_SERVED[name] in guide, f"{name}: the guide does not give the reason"
    assert served | dcgm.AS_LABELS | set(dcgm.NOT_SERVED) == {name for name, _, _ in counters}


def test_names_types_and_help_are_dcgm_exporter_s():
    by_name = {metric.name: metric for metric in (*dcgm.COMPAT, *dcgm.RULES_ONLY)}
    for name, kind, help_ in default_counters():
        if name in by_name:
            assert (by_name[name].type, by_name[name].help) == (kind, help_), name
        else:
            assert kind == "label" or name in dcgm.NOT_SERVED


def script(fake: FakeNvml) -> None:
    """Different values per GPU, so a series carrying another GPU's value fails."""
    for i, gpu in enumerate(fake.gpus):
        gpu.util_gpu, gpu.util_memory = 61 + i, 23 + i
        gpu.temperature, gpu.memory_temperature = 55 + i, 49 + i
        gpu.memory_used, gpu.memory_reserved = (3 + i) * GIB, 534 * MIB
        gpu.clocks_mhz[pynvml.NVML_CLOCK_SM] = 1755 - 100 * i
        gpu.clocks_mhz[pynvml.NVML_CLOCK_MEM] = 2619 - 10 * i
        gpu.power_mw = 312_000 + 1_000 * i
        gpu.energy_mj = 7_000_000 + 5_000 * i
        gpu.pcie_replays = 3 + i
        gpu.encoder_util, gpu.decoder_util = 17 + i, 29 + i
        gpu.remapped[0], gpu.remapped[1], gpu.remapped[3] = 4 + i, 1 + i, i


def expected(fake: FakeNvml, index: int) -> dict[str, float]:
    """What dcgm-exporter would read from DCGM on this GPU of the double, in its units."""
    gpu = fake.gpus[index]
    used, reserved = gpu.memory_used, gpu.memory_reserved
    return {
        "DCGM_FI_DEV_SM_CLOCK": gpu.clocks_mhz[pynvml.NVML_CLOCK_SM],
        "DCGM_FI_DEV_MEM_CLOCK": gpu.clocks_mhz[pynvml.NVML_CLOCK_MEM],
        "DCGM_FI_DEV_MEMORY_TEMP": gpu.memory_temperature,
        "DCGM_FI_DEV_GPU_TEMP": gpu.temperature,
        "DCGM_FI_DEV_POWER_USAGE": gpu.power_mw / 1000,  # one level held for the last second
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": gpu.energy_mj,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": gpu.pcie_replays,
        "DCGM_FI_DEV_GPU_UTIL": gpu.util_gpu,
        "DCGM_FI_DEV_MEM_COPY_UTIL": gpu.util_memory,
        "DCGM_FI_DEV_ENC_UTIL": gpu.encoder_util,
        "DCGM_FI_DEV_DEC_UTIL": gpu.decoder_util,
        "DCGM_FI_DEV_FB_FREE": (gpu.memory_total - used - reserved) / MIB,
        "DCGM_FI_DEV_FB_USED": used / MIB,
        "DCGM_FI_DEV_FB_RESERVED": reserved / MIB,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": gpu.remapped[0],
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": gpu.remapped[1],
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": gpu.remapped[3],
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": GPM[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL][index],
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": GPM[pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL][index],
        "DCGM_FI_PROF_DRAM_ACTIVE": GPM[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL][index],
    }


def advance_gpm(fake: FakeNvml) -> None:
    for i, gpu in enumerate(fake.gpus):
        gpu.advance_gpm(activity={metric: fractions[i] for metric, fractions in GPM.items()})


def compat_rig(settings, *backends: str, **collector) -> Rig:
    settings.backends = list(backends)
    settings.interval = settings.health_interval = 0.1  # GPM samples 0.11 s apart
    rig = Rig(settings)
    rig.exposition.registry.register(DcgmCompatCollector(rig.snapshot, settings.node, **collector))
    return rig


def scrape(rig: Rig) -> list[Sample]:
    """The exposition's samples under the names Prometheus stores. prometheus_client's parser names a
    counter's samples ``_total`` whatever the text says; dcgm-exporter's counters have no ``_total``,
    which the raw text shows."""
    body = rig.exposition.render(None, None)[0].decode()
    assert "_total{" not in "".join(line for line in body.splitlines() if line.startswith("DCGM_"))
    return [
        Sample(s.name.removesuffix("_total"), s.labels, s.value) if s.name.startswith("DCGM_") else s
        for s in parse(body)
    ]


def identity(fake: FakeNvml, index: int, node: str) -> dict[str, str]:
    gpu = fake.gpus[index]
    return {
        "gpu": str(index),
        "UUID": gpu.uuid,
        "device": f"nvidia{index}",
        "modelName": gpu.name,
        "pci_bus_id": gpu.pci_bus_id,
        "hostname": node,  # the current release's label (issue 39, finding 21)
        "DCGM_FI_DRIVER_VERSION": DRIVER,
        "GPU_I_ID": "",
        "GPU_I_PROFILE": "",
    }


@pytest.mark.slow
def test_every_served_series_equals_the_double_in_dcgm_exporter_s_units_and_labels(settings, fake_nvml):
    script(fake_nvml)
    time.sleep(1.15)  # the 1 s average (field 185 refreshed every 100 ms): let it hold the new level
    rig = compat_rig(settings, "nvidia")
    try:
        rig.tick()
        advance_gpm(fake_nvml)
        rig.tick_gpm()
        samples = scrape(rig)
    finally:
        rig.close()
    served = {s.name for s in samples if s.name.startswith("DCGM_")}
    assert served == {metric.name for metric in dcgm.COMPAT} - {"DCGM_FI_DEV_XID_ERRORS"}  # no XID monitor
    for index in (0, 1):
        labels = identity(fake_nvml, index, settings.node)
        for name, want in expected(fake_nvml, index).items():
            found = select(samples, name, gpu=str(index))
            assert len(found) == 1, (name, found)
            assert found[0].labels == labels, name
            assert found[0].value == pytest.approx(want, rel=1e-6), (name, index)


def test_the_helm_value_passes_the_flag_and_refuses_another_exporter():
    from tests.e2e.test_deploy import by_kind, render

    def args(values: dict[str, str]) -> list[str]:
        return by_kind(render(values), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"]

    assert "--compat=dcgm-exporter" in args({"compat": "dcgm-exporter"})
    assert not [arg for arg in args({}) if arg.startswith("--compat")]  # off by default
    stderr = render({"compat": "nvidia-smi"}, expect_ok=False)[0]["stderr"]
    assert "compat" in stderr and "values don't meet the specifications of the schema" in stderr
