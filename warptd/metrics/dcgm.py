"""dcgm-exporter's default series as warptd derives them (``--compat dcgm-exporter``): one table that the
compat collector, docs/migrating-from-dcgm-exporter.md, the recording rules and their tests are built from.

Names, types, help texts and units are those of dcgm-exporter's etc/default-counters.csv; label names
those of its collector (``toMetric`` in internal/pkg/collector/gpu_collector.go) at commit
:data:`RELEASE`, with the default ``UUID`` spelling (``uuid`` only under its --use-old-namespace). The
node's label is the one of the release a user replaces (:func:`node_label`): ``hostname`` since that
commit, ``Hostname`` before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from warptd.metrics import catalog as m
from warptd.metrics.spec import DEVICE_LABELS

#: The dcgm-exporter source whose names and labels these are (NVIDIA/dcgm-exporter, main, 2026-05-12;
#: its README's image then: 4.4.0-4.5.0).
RELEASE = "NVIDIA/dcgm-exporter d5e5f510a1b6b393f39a43293ccd9dc985defc79"
#: ``--dcgm-exporter-release`` by default: the current release.
LATEST = "latest"
#: The last release whose node label is ``Hostname`` (DCGM 4.5.3, dcgm-exporter 4.8.2): the releases
#: after it carry PR #655 (commit d5e5f51), which renamed it ``hostname``.
LAST_HOSTNAME_CAPITALISED = "4.5.3-4.8.2"
#: A release as its images are tagged, ``4.5.3-4.8.2`` (DCGM's version, then dcgm-exporter's), with
#: the image's distribution or not (``-ubuntu22.04``), or dcgm-exporter's own version alone.
_RELEASE = re.compile(r"(?:\d+\.\d+\.\d+-)?(\d+)\.(\d+)\.(\d+)(?:-[a-z][a-z0-9.]*)?")


def exporter_version(release: str) -> tuple[int, int, int]:
    """dcgm-exporter's own version in a release (``4.5.3-4.8.2``: 4.8.2); ValueError naming the forms
    it takes otherwise."""
    match = _RELEASE.fullmatch(release.strip())
    if match is None:
        raise ValueError(
            f"not a dcgm-exporter release: {release[:40]!r} ({LATEST}, or its image's version: "
            f"{LAST_HOSTNAME_CAPITALISED}, or dcgm-exporter's own: 4.8.2)"
        )
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def check_release(release: str) -> str:
    """``release`` as given, once known to be :data:`LATEST` or a release."""
    if release != LATEST:
        exporter_version(release)
    return release


def node_label(release: str = LATEST) -> str:
    """The node's label in ``release``'s series: ``hostname``, or ``Hostname`` up to 4.5.3-4.8.2."""
    if release != LATEST and exporter_version(release) <= exporter_version(LAST_HOSTNAME_CAPITALISED):
        return "Hostname"
    return "hostname"


def identity_labels(release: str = LATEST) -> tuple[str, ...]:
    """Labels of every series, in dcgm-exporter's order: the GPU's index, UUID, PCI address, device
    node, model, the node's name (:func:`node_label`), the driver version (DCGM_FI_DRIVER_VERSION is a
    label in its default CSV), and on a MIG device its GPU instance's profile and id (empty on a whole
    GPU, so absent in Prometheus)."""
    return (
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        node_label(release),
        "DCGM_FI_DRIVER_VERSION",
        "GPU_I_PROFILE",
        "GPU_I_ID",
    )


#: With pod attribution on: the container holding the GPU (one series per container on a shared GPU).
POD_LABELS = ("pod", "namespace", "container")
#: The backends whose devices dcgm-exporter would see: NVIDIA GPUs and their MIG devices.
BACKENDS = ("nvidia", "nvidia_mig")


@dataclass(frozen=True, slots=True)
class Source:
    """One warptd series a dcgm-exporter value comes from: ``spec`` with its own labels equal to
    ``selector`` (the labels after backend/device/uuid), times ``factor``."""

    spec: m.MetricSpec
    selector: tuple[str, ...] = ()
    factor: float = 1.0

    def promql(self) -> str:
        """The warptd series as a PromQL selector (used by the recording rules)."""
        own = self.spec.labels[len(DEVICE_LABELS) :]
        matchers = ",".join(f'{name}="{value}"' for name, value in zip(own, self.selector, strict=True))
        return f"{self.spec.name}{{{matchers}}}" if matchers else self.spec.name


@dataclass(frozen=True, slots=True)
class CompatMetric:
    """One dcgm-exporter series: its name, type and help as its CSV gives them, the unit its value
    is in, and the warptd series it comes from (the first one a device has)."""

    name: str
    type: Literal["gauge", "counter"]
    help: str
    unit: str
    sources: tuple[Source, ...]
    #: Labels beyond the identity ones, and what differs from dcgm-exporter (docs).
    extra_labels: tuple[str, ...] = ()
    note: str = ""
    #: A rate of a warptd counter over this window: served by the recording rules only (the collector
    #: renders one snapshot and keeps no earlier value to take a rate from).
    rate_window: str = ""


def _served(
    name: str,
    type_: Literal["gauge", "counter"],
    help_: str,
    unit: str,
    *,
    extra_labels: tuple[str, ...] = (),
    note: str = "",
    rate_window: str = "",
) -> CompatMetric:
    """dcgm-exporter's series ``name`` as its CSV line gives it, made of the warptd series whose catalog
    entry declares it their twin (:attr:`MetricSpec.dcgm`), a fallback twin last."""
    twins = [(twin, spec) for spec in m.EVERY for twin in spec.dcgm if twin.name == name]
    twins.sort(key=lambda pair: pair[0].fallback)  # stable: the catalog's order otherwise
    sources = tuple(Source(spec, twin.labels, twin.scale) for twin, spec in twins)
    return CompatMetric(name, type_, help_, unit, sources, extra_labels, note, rate_window)


#: The code of the device's last XID event, which the XID monitor gives (warptd_device_xid_errors_total).
_XID = _served(
    "DCGM_FI_DEV_XID_ERRORS",
    "gauge",
    "Value of the last XID error encountered.",
    "XID code",
    extra_labels=("err_code",),
    note="The code of the last XID event since warptd started (0 before any); dcgm-exporter's "
    "err_msg label is not served. Needs XID events (on by default).",
)
LAST_XID_CODE = _XID.sources[0]

COMPAT: tuple[CompatMetric, ...] = (
    _served("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "MHz"),
    _served("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "MHz"),
    _served(
        "DCGM_FI_DEV_MEMORY_TEMP",
        "gauge",
        "Memory temperature (in C).",
        "°C",
        note="HBM GPUs only, as in DCGM.",
    ),
    _served("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "°C"),
    _served(
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        "Power draw (in W).",
        "W",
        note="nvmlDeviceGetPowerUsage as DCGM field 155 reads it: the driver's 1 s average on Ampere and "
        "newer, the instantaneous reading before (where warptd has no average).",
    ),
    _served(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "mJ",
        note="Starts at the driver's counter like DCGM's, but keeps counting across driver reloads "
        "(and restarts with --state-dir) where DCGM's restarts at 0.",
    ),
    _served(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "Total number of PCIe retries.",
        "count",
        note="Monotonic across driver reloads, where DCGM's restarts at 0.",
    ),
    _served("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "%"),
    _served("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "%"),
    _served("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "%"),
    _served("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "%"),
    _XID,
    _served("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "MiB"),
    _served("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "MiB"),
    _served("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "MiB"),
    _served(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "rows",
    ),
    _served(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "rows",
    ),
    _served("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "0/1"),
    _served(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        "ratio",
        note="NVML GPM (Hopper and newer, no DCGM needed); absent before Hopper, where DCGM's profiling "
        "module is the only source.",
    ),
    _served(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "ratio",
        note="NVML GPM (Hopper and newer); absent before.",
    ),
    _served(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "ratio",
        note="NVML GPM (Hopper and newer); absent before.",
    ),
)

#: dcgm-exporter's rates of bytes, which only the recording rules derive.
RULES_ONLY: tuple[CompatMetric, ...] = tuple(
    _served(
        f"DCGM_FI_PROF_PCIE_{direction.upper()}_BYTES",
        "gauge",
        f"The rate of data {verb} over the PCIe bus - including both protocol headers and data payloads "
        "- in bytes per second.",
        "B/s",
        rate_window="2m",  # 4 reads of the byte counter at a 30 s --health-interval (metrics.cadence)
    )
    for direction, verb in (("tx", "transmitted"), ("rx", "received"))
)
#: dcgm-exporter's default counters warptd does not serve under their names with --compat, and why.
NOT_SERVED: dict[str, str] = {
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "DCGM documents no unit for this counter ('bandwidth counters "
    "for all lanes'), so no factor from warptd's bytes is defensible; warptd_device_nvlink_bytes_total "
    "counts the GPU's NVLink bytes by direction (warptd_device_nvlink_link_bytes_total per link).",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "vGPU licensing is a property of a vGPU guest's driver; warptd "
    "reads no vGPU state.",
    **{
        metric.name: "a rate over DCGM's own sample period, where warptd keeps the byte counter "
        f"{metric.sources[0].promql()}; the recording rules (deploy/prometheus/dcgm-exporter-rules.yml) "
        "derive it as that counter's rate."
        for metric in RULES_ONLY
    },
}
#: Fields dcgm-exporter's CSV serves as a label of every series, not as series of their own.
AS_LABELS = frozenset({"DCGM_FI_DRIVER_VERSION"})


def labels_of(metric: CompatMetric, pods: bool, release: str = LATEST) -> tuple[str, ...]:
    """The label names of a compat series as ``release`` names them: identity, the metric's own, and
    the pod's when attributed."""
    return (*identity_labels(release), *metric.extra_labels, *(POD_LABELS if pods else ()))
