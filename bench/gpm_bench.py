"""The cost of GPM: one sample of the ``nvidia`` backend with and without GPM, side by side in one run.

    python bench/gpm_bench.py [--samples 300] [--gpus 8 64]

In process over the C NVML double (so the CPU is warptd's and the double's C code, not a Python
fake): the backend's reads, validation and counter totals, as the sampler's worker does them.
The GPUs' GPM counters advance between samples outside the timed part. Three rows per GPU count:
GPM off; ``on``, every read taking a GPM sample (the reads wait the GPM gap, 0.11 s, outside the
timed part: the driver refreshes its counters every 100 ms, so ~35 s at 300 samples); ``kept``,
reads sooner than that (a window's between two GPM samples), which keep the last GPM values.
Reports CPU per sample, what that is at 1 Hz and 10 Hz, and NVML calls per GPU per sample.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit
from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import Rig
from warptd.backends.nvidia.gpm import sample_gap
from warptd.config import load_settings
from warptd.sampling.sampler import Sampler

SM_UTIL, TENSOR_UTIL = 2, 5  # NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_ANY_TENSOR_UTIL


def make_samples(sampler: Sampler, name: str) -> None:
    """One read of backend ``name`` made samples by its tracks, as a tick does, but not published."""
    tracks = sampler.publisher.tracks[name]
    tracks.follow(sampler.snapshot.get(name).devices_info)  # type: ignore[union-attr,arg-type]
    raw = sampler.reads.reader.read(name)
    tracks.update(raw.readings, raw.at)  # type: ignore[arg-type]


def measure(gpus: int, gpm: str, samples: int) -> dict[str, object]:
    """CPU seconds and NVML calls of ``samples`` reads of ``gpus`` GPUs, ``gpm`` off, on (a GPM
    sample each read) or kept (reads between two GPM samples)."""
    fake = FakeNvml([FakeGpu(index=i) for i in range(gpus)])
    for gpu in fake.gpus:
        gpu.gpm_supported = gpm != "off"
    # every read reads the slow values too, as at the default 1 s and 1 s
    settings = load_settings(
        listen="127.0.0.1:0", interval=0.1, health_interval=0.1, sample_timeout=5, backends=["nvidia"]
    )
    wait = sample_gap(settings) if gpm == "on" else 0.0
    with fake.installed():
        rig = Rig(settings)
        sampler, cpu = rig.sampler, 0.0
        try:
            for _ in range(3):  # GPM's first pair, first totals
                time.sleep(sample_gap(settings))
                make_samples(sampler, "nvidia")
            calls = fake.total_calls()
            for _ in range(samples):
                for gpu in fake.gpus:
                    gpu.advance_gpm(activity={SM_UTIL: 0.5, TENSOR_UTIL: 0.2}, pcie=(2**20, 2**19))
                time.sleep(wait)
                started = time.process_time()
                make_samples(sampler, "nvidia")
                cpu += time.process_time() - started
            calls = fake.total_calls() - calls
        finally:
            rig.close()
    fake.close()
    per_sample = cpu / samples
    return {
        "gpus": gpus,
        "gpm": gpm,
        "cpu_ms_per_sample": per_sample * 1e3,
        "pct_core_1hz": per_sample * 100,
        "pct_core_10hz": per_sample * 1000,
        "nvml_calls_per_gpu_sample": calls / samples / gpus,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 64])
    args = parser.parse_args()
    rows = [measure(gpus, gpm, args.samples) for gpus in args.gpus for gpm in ("off", "on", "kept")]
    emit(rows, "nvidia backend sample with and without GPM (NVML double, in process)")


if __name__ == "__main__":
    main()
