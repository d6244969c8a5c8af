"""The dcgm-exporter compatibility rig and what it should serve: values scripted per GPU on the NVML
double, the series dcgm-exporter would show for them, and a scrape under the names Prometheus stores."""

from __future__ import annotations

import pynvml

from tests.doubles.nvml import GIB, FakeNvml
from tests.helpers import Rig, Sample, parse
from warptd.exporter.dcgm import DcgmCompatCollector

MIB = 2**20


DRIVER = "580.65.06"  # the double's default driver


GPM = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: (0.7, 0.45),
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: (0.4, 0.1),
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: (0.55, 0.25),
}


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
    """One GPM sample further on every GPU, at its fractions of GPM."""
    for i, gpu in enumerate(fake.gpus):
        gpu.advance_gpm(activity={metric: fractions[i] for metric, fractions in GPM.items()})


def compat_rig(settings, *backends: str, **collector) -> Rig:
    """A rig over these backends whose exposition also serves the dcgm-exporter series."""
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
    """The identity labels dcgm-exporter puts on this GPU's series."""
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
