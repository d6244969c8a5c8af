"""Wall time of one ``amd`` sample with 8 MI300X in CPX (64 logical GPUs) over the amdsmi double.

    python bench/amd_partitions_bench.py [--samples 5] [--sockets 8] [--partitions 8] [--code DIR]
                                         [--table-read-ms 0]

The sampler's worker read (every device, validation, totals), timed by the wall clock: the double's
``amdsmi_get_violation_status`` sleeps its 100 ms as amd_smi.cc does, so that time counts. Each row
also counts the GPU metrics tables read per logical GPU a sample (amdsmi's activity, power, energy and
clock getters each read one), and ``--table-read-ms`` prices each read in CPU burned (undocumented: no
hardware measured it; 0 by default). ``--code`` runs another checkout's ``warptd`` (e.g. main,
extracted with ``git archive main warptd | tar -x -C DIR``) over this checkout's double, to compare
before and after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]


if TYPE_CHECKING:
    from warptd.sampling.sampler import Sampler


def make_samples(sampler: Sampler, name: str) -> None:
    """One read of backend ``name`` made samples by its tracks, as a tick does, but not published."""
    if not hasattr(sampler, "publisher"):  # a ``--code`` tree from before the tracks
        sampler._devices(name, sampler._read(name))  # type: ignore[attr-defined]
        return
    tracks = sampler.publisher.tracks[name]
    tracks.follow(sampler.snapshot.get(name).devices_info)  # type: ignore[union-attr,arg-type]
    # a ``--code`` tree from before ReadsInFlight keeps the reader on the Sampler
    reader = sampler.reads.reader if hasattr(sampler, "reads") else sampler._reader  # type: ignore[attr-defined]
    raw = reader.read(name)
    tracks.update(raw.readings, raw.at)  # type: ignore[arg-type]


def measure(sockets: int, partitions: int, samples: int, table_read_s: float = 0.0) -> dict[str, object]:
    """Wall and CPU seconds of ``samples`` reads of ``sockets`` times ``partitions`` logical GPUs."""
    from tests.doubles.amdsmi import FakeAmdsmi
    from tests.helpers import Rig
    from warptd.config import load_settings

    fake = FakeAmdsmi.partitioned(sockets=sockets, partitions=partitions)
    fake.table_read_cpu_s = table_read_s
    settings = load_settings(listen="127.0.0.1:0", interval=1, sample_timeout=600, backends=["amd"])
    walls, cpus = [], []
    with fake.installed():
        rig = Rig(settings)
        sampler = rig.sampler
        try:
            make_samples(sampler, "amd")  # identities, first totals
            tables = sum(gpu.table_reads for gpu in fake.gpus)
            for _ in range(samples):
                fake.advance(1.0)
                started, cpu = time.perf_counter(), time.process_time()
                make_samples(sampler, "amd")
                walls.append(time.perf_counter() - started)
                cpus.append(time.process_time() - cpu)
            tables = sum(gpu.table_reads for gpu in fake.gpus) - tables
        finally:
            rig.close()
    return {
        "logical_gpus": sockets * partitions,
        "wall_s_per_sample": round(statistics.median(walls), 3),
        "cpu_s_per_sample": round(statistics.median(cpus), 3),
        "tables_per_gpu_sample": round(tables / samples / (sockets * partitions), 2),
        "fits_1hz": max(walls) < 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--sockets", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--code", type=Path, help="a directory holding the warptd package to measure")
    parser.add_argument("--table-read-ms", type=float, default=0.0, help="CPU a metrics table read burns")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.code:
        sys.path.insert(0, str(args.code.resolve()))
    import warptd
    from bench.common import emit

    row = measure(args.sockets, args.partitions, args.samples, args.table_read_ms / 1e3)
    emit(
        [{**row, "warptd": str(Path(warptd.__file__).parent)}],
        "amd sample, MI300X partitions (amdsmi double)",
    )


if __name__ == "__main__":
    main()
