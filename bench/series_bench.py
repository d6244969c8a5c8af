"""Series per GPU of each metric family, scraped from the real daemon over the NVML double.

    python bench/series_bench.py [--gpus 8] [--write]

Two GPUs as the double models them, 8 of each on a node: an H200 PCIe without NVLink (its links
answer NOT_SUPPORTED, as ../shared/notes/real-h200.md found) and an H100 SXM with 18 NVLinks. For
each, the daemon runs twice side by side: every family exported (``--metrics-include '*'``) and a
plain ``warptd serve`` (the default's exclusions). A family's series per GPU count every series that
carries an NVIDIA GPU's ``device``/``uuid``. ``--write`` puts the every-family figures into
``warptd/metrics/series_counts.py``, which docs/metrics.md is generated from.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ROOT, emit, free_port, get, stop, wait_http

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.fleet import series_by_family
from warptd.metrics.catalog import EVERY
from warptd.metrics.selection import DEFAULT_EXCLUDE

TABLE = ROOT / "warptd" / "metrics" / "series_counts.py"
#: The GPUs measured, as docs/metrics.md's columns name them, and how to make one in the double.
MODELS = {
    "H200 PCIe, no NVLink": FakeGpu.h200,
    "H100 SXM, 18 NVLinks": lambda index: FakeGpu(index=index),
}


def scrape_families(make_gpu, gpus: int, *extra: str) -> dict[str, int]:
    """Series per GPU of each family (the most any GPU has) from a daemon serving ``gpus`` GPUs."""
    fake = FakeNvml([make_gpu(i) for i in range(gpus)], keep=True)
    port = free_port()
    environment = {**os.environ, **fake.environment(), "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "warptd", "serve", "--backend", "nvidia", "--listen", f"127.0.0.1:{port}"]
    args += ["--interval", "0.5", "--health-interval", "0.5", "--log-level", "warning", *extra]
    proc = subprocess.Popen(args, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL)
    try:
        wait_http(port, "/readyz")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # GPM values need two of its samples
            found = series_by_family(get(port)[1].decode())
            if len(found.get("warptd_device_sm_active_ratio", {})) == gpus:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # one more sample: the health values read every --health-interval
        found = series_by_family(get(port)[1].decode())
        return {family: max(per_gpu.values()) for family, per_gpu in found.items()}
    finally:
        stop(proc)
        fake.close()
        Path(fake.path).unlink(missing_ok=True)


def write_table(figures: dict[str, dict[str, int]]) -> None:
    names = [spec.name for spec in EVERY]
    families = sorted({f for per_model in figures.values() for f in per_model}, key=names.index)
    rows = "\n".join(
        f'    "{family}": ({", ".join(str(figures[model].get(family, 0)) for model in MODELS)}),'
        for family in families
    )
    models = "\n".join(f'    "{model}",' for model in MODELS)
    TABLE.write_text(
        '"""Series per GPU of each metric family, as bench/series_bench.py measured them over the NVML\n'
        "double with every family exported: docs/metrics.md is generated from it. Regenerate with\n"
        '``python bench/series_bench.py --write`` (then ``python -m warptd.metrics.docs``)."""\n\n'
        "#: The GPUs measured (8 on a node), as docs/metrics.md's columns name them.\n"
        f"MODELS = (\n{models}\n)\n"
        "#: Family (as docs/metrics.md names it) -> its series per GPU on each of MODELS.\n"
        f"SERIES_PER_GPU: dict[str, tuple[int, ...]] = {{\n{rows}\n}}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(ROOT)}")
    args = parser.parse_args()
    every: dict[str, dict[str, int]] = {}
    rows = []
    for model, make in MODELS.items():
        every[model] = scrape_families(make, args.gpus, "--metrics-include", "*")
        plain = scrape_families(make, args.gpus)
        for family, count in every[model].items():
            rows.append(
                {
                    "gpu": model,
                    "family": family,
                    "every_family": count,
                    "default": plain.get(family, 0),
                    "left_out_by_default": family in DEFAULT_EXCLUDE,
                }
            )
        rows.append(
            {
                "gpu": model,
                "family": "TOTAL per GPU",
                "every_family": sum(every[model].values()),
                "default": sum(plain.values()),
                "left_out_by_default": "",
            }
        )
    emit(rows, f"series per GPU, {args.gpus} GPUs on the node, plain serve against --metrics-include '*'")
    if args.write:
        write_table(every)
        print(f"wrote {TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
