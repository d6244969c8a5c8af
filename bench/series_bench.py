"""Series per GPU of each metric family, and a node's own, scraped from the real daemon over the NVML
double.

    python bench/series_bench.py [--gpus 8] [--write]

Two GPUs as the double models them, 8 of each on a node: an H200 PCIe without NVLink (its links
answer NOT_SUPPORTED, as ../shared/notes/real-h200.md found) and an H100 SXM with 18 NVLinks. For
each, the daemon runs twice side by side: every family exported (``--metrics-include '*'``) and a
plain ``warptd serve`` (the default's exclusions). Once GPM has two samples, every media engine of
the GPUs turns busy (tests/fleet.py BUSY_ENGINES), so that each kind's average and each busy engine
show: the figures are a busy GPU's, the most the default exports. A family's series per GPU count
every series that carries an NVIDIA GPU's ``device``/``uuid``; a node's own are the rest. ``--write``
puts the figures into ``warptd/metrics/series_counts.py``, which docs/metrics.md and docs/deploy.md
are generated from (``python -m warptd.metrics.docs``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ROOT, emit, free_port, get, stop, wait_http

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.fleet import BUSY_ENGINES, node_series, series_by_family
from warptd.metrics import nvidia
from warptd.metrics.catalog import EVERY
from warptd.metrics.selection import DEFAULT_EXCLUDE

TABLE = ROOT / "warptd" / "metrics" / "series_counts.py"
#: The GPUs measured, as docs/metrics.md's columns name them, and how to make one in the double.
MODELS = {
    "H200 PCIe, no NVLink": FakeGpu.h200,
    "H100 SXM, 18 NVLinks": lambda index: FakeGpu(index=index),
}


def scrape(make_gpu, gpus: int, *extra: str) -> tuple[dict[str, int], Counter[str]]:
    """Series per GPU of each family (the most any GPU has), and the node's own by family, from a
    daemon serving ``gpus`` GPUs whose media engines are all busy."""
    fake = FakeNvml([make_gpu(i) for i in range(gpus)], keep=True)
    port = free_port()
    environment = {**os.environ, **fake.environment(), "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "warptd", "serve", "--backend", "nvidia", "--listen", f"127.0.0.1:{port}"]
    args += ["--interval", "0.5", "--health-interval", "0.5", "--log-level", "warning", *extra]
    proc = subprocess.Popen(args, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL)
    try:
        wait_http(port, "/readyz")
        _until(port, lambda found: len(found.get(nvidia.SM_ACTIVE.name, {})) == gpus)  # two GPM samples
        for gpu in fake.gpus:
            gpu.busy_engines(BUSY_ENGINES)
        _until(port, lambda found: len(found.get(nvidia.OFA_UTILIZATION.name, {})) == gpus)
        time.sleep(1.5)  # a GPM period past the busy one, and a health read: every series is there
        body = get(port)[1].decode()
        found = series_by_family(body)
        return {family: max(per_gpu.values()) for family, per_gpu in found.items()}, node_series(body)
    finally:
        stop(proc)
        fake.close()
        Path(fake.path).unlink(missing_ok=True)


def _until(port: int, ready, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready(series_by_family(get(port)[1].decode())):
            return
        time.sleep(0.2)
    raise RuntimeError("the daemon did not export what the bench waits for")


def _rows(by_family: dict[str, dict[str, int]], order: list[str]) -> str:
    families = sorted({f for per_model in by_family.values() for f in per_model}, key=order.index)
    return "\n".join(
        f'    "{family}": ({", ".join(str(by_family[model].get(family, 0)) for model in MODELS)}),'
        for family in families
    )


def write_table(every: dict[str, dict[str, int]], nodes: dict[str, dict[str, Counter[str]]]) -> None:
    names = [spec.name for spec in EVERY]
    node_families = sorted(
        {f for per_model in nodes.values() for per_run in per_model.values() for f in per_run},
        key=lambda f: (names.index(f) if f in names else len(names), f),
    )

    def counts(family: str) -> str:
        return ", ".join(f"({nodes[m]['default'][family]}, {nodes[m]['every'][family]})" for m in MODELS)

    node_rows = "\n".join(f'    "{family}": ({counts(family)}),' for family in node_families)
    models = "\n".join(f'    "{model}",' for model in MODELS)
    TABLE.write_text(
        '"""Series per GPU of each metric family, and a node\'s own, as bench/series_bench.py measured them\n'
        "over the NVML double (8 GPUs of a model on a node, every media engine busy): docs/metrics.md and\n"
        "docs/deploy.md are generated from it. Regenerate with ``python bench/series_bench.py --write``\n"
        '(then ``python -m warptd.metrics.docs``)."""\n\n'
        "#: The GPUs measured (8 on a node), as docs/metrics.md's columns name them.\n"
        f"MODELS = (\n{models}\n)\n"
        "#: GPUs on the node measured.\n"
        "GPUS_PER_NODE = 8\n"
        "#: Family (as docs/metrics.md names it) -> its series per GPU on each of MODELS, every family\n"
        "#: exported.\n"
        f"SERIES_PER_GPU: dict[str, tuple[int, ...]] = {{\n{_rows(every, names)}\n}}\n"
        "#: A node's own series (on no GPU) by family -> on each of MODELS, (a plain serve, every family).\n"
        f"NODE_SERIES: dict[str, tuple[tuple[int, int], ...]] = {{\n{node_rows}\n}}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(ROOT)}")
    args = parser.parse_args()
    every: dict[str, dict[str, int]] = {}
    nodes: dict[str, dict[str, Counter[str]]] = {}
    rows = []
    for model, make in MODELS.items():
        every[model], every_node = scrape(make, args.gpus, "--metrics-include", "*")
        plain, plain_node = scrape(make, args.gpus)
        nodes[model] = {"default": plain_node, "every": every_node}
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
        totals = {
            "TOTAL per GPU": (sum(every[model].values()), sum(plain.values())),
            "node's own": (sum(every_node.values()), sum(plain_node.values())),
        }
        for label, (with_every, by_default) in totals.items():
            rows.append(
                {"gpu": model, "family": label, "every_family": with_every, "default": by_default,
                 "left_out_by_default": ""}
            )  # fmt: skip
    emit(rows, f"series per GPU, {args.gpus} GPUs on the node, plain serve against --metrics-include '*'")
    if args.write:
        write_table(every, nodes)
        print(f"wrote {TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
