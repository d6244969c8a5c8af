"""Fleet-sized helpers: an H200 without NVLink in the NVML double, and series counted per GPU and per
node.

Shared by tests/metrics/test_selection.py, tests/e2e/test_metric_selection.py and bench/, so the
figures docs/metrics.md and docs/deploy.md give come from the same counting as the tests' bound.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from prometheus_client.parser import text_string_to_metric_families

from warptd.metrics import catalog as m

#: What nvidia-smi calls an H200 (141 GB HBM3e), as ../shared/notes/real-h200.md ran it.
H200 = "NVIDIA H200"
#: Every kind of media engine an H100 or H200 has, all of them busy (FakeGpu.busy_engines): the
#: measured figures count each kind's average, which a GPU with MIG off shows once the kind is busy.
BUSY_ENGINES = {"nvdec": 7, "nvjpg": 7, "ofa": 1}


#: The catalog by the names prometheus_client's parser gives a family (counters without _total).
_SPECS = {(spec.family, spec.type): spec for spec in m.EVERY}


def series_by_family(body: str, backend: str = "nvidia") -> dict[str, Counter[str]]:
    """For each catalog family (as docs/metrics.md names it), its series per device (by UUID) of
    ``backend``: every series carrying that backend and a device, XIDs, stress and processes too
    (a device without a UUID, the CPU, by its index)."""
    families = list(text_string_to_metric_families(body))
    uuids = {  # the stress series name a device by its index alone
        s.labels["device"]: s.labels["uuid"]
        for family in families
        for s in family.samples
        if s.labels.get("backend") == backend and s.labels.get("uuid") and "device" in s.labels
    }
    found: dict[str, Counter[str]] = defaultdict(Counter)
    for family in families:
        spec = _SPECS.get((family.name, family.type))
        for sample in family.samples:
            labels = sample.labels
            if labels.get("backend") == backend and labels.get("device"):  # "": the backend's own
                device = labels.get("uuid") or uuids.get(labels["device"], labels["device"])
                found[spec.name if spec else family.name][device] += 1
    return dict(found)


def series_per_gpu(body: str, backend: str = "nvidia") -> Counter[str]:
    """The series of each device of ``backend``, by UUID (index where it has none)."""
    total: Counter[str] = Counter()
    for per_device in series_by_family(body, backend).values():
        total.update(per_device)
    return total


def node_series(body: str, backend: str = "nvidia") -> Counter[str]:
    """The series of each family that belong to no device of ``backend``: the node's own (backends'
    sample health, errors by kind, windows, build info, ``process_*``)."""
    found: Counter[str] = Counter()
    for family in text_string_to_metric_families(body):
        spec = _SPECS.get((family.name, family.type))
        for sample in family.samples:
            if not (sample.labels.get("backend") == backend and "device" in sample.labels):
                found[spec.name if spec else family.name] += 1
    return found
