"""dcgm-exporter's series (``--compat dcgm-exporter``), rendered from the same snapshot as warptd's own.

Every value comes from a warptd series through :data:`warptd.metrics.dcgm.COMPAT` (series, selector,
factor): this module knows dcgm-exporter's labels, never a unit or a device field of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from warptd.events.xid import XidMonitor
from warptd.exporter.collector import SnapshotCollector
from warptd.metrics import catalog as m
from warptd.metrics import dcgm
from warptd.models import GPUInfo
from warptd.sampling.snapshot import BackendState, DeviceSample, Snapshot

#: Warptd's series each compat metric may read, by name: the rest of a device's series are not kept.
_WANTED = frozenset(source.spec.name for metric in dcgm.COMPAT for source in metric.sources)
_NO_POD = ("", "", "")


class PodOwners(Protocol):
    """Who holds a device (the pod attribution, :class:`warptd.k8s.attribution.PodAttribution`): each
    owner has ``namespace``, ``pod`` and ``container``. A protocol, so the exporter imports no feature."""

    def owners(self, info: GPUInfo) -> Sequence[Any]: ...


class _Values:
    """The wanted series of one device, by (metric name, its own label values)."""

    __slots__ = ("by_key",)

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, tuple[str, ...]], float] = {}

    def add(self, spec: m.MetricSpec, labels: list[str], value: float | None) -> None:
        if value is not None and spec.name in _WANTED:
            self.by_key[(spec.name, tuple(labels))] = value


def _family(metric: dcgm.CompatMetric, labels: tuple[str, ...]) -> Metric:
    """A family whose samples carry dcgm-exporter's name as is: its counters have no ``_total``."""
    if metric.type == "gauge":
        return GaugeMetricFamily(metric.name, metric.help, labels=labels)
    return Metric(metric.name, metric.help, "counter")


class DcgmCompatCollector(Collector):
    """The series dcgm-exporter serves by default, for NVIDIA GPUs and MIG devices; never calls an SDK."""

    def __init__(
        self,
        snapshot: Snapshot,
        node: str,
        attribution: PodOwners | None = None,
        xid: XidMonitor | None = None,
        release: str = dcgm.LATEST,
    ) -> None:
        """``release``: the dcgm-exporter release whose labels the series carry
        (``--dcgm-exporter-release``)."""
        self.snapshot = snapshot
        self.node = node
        self.release = release
        #: With pod attribution: one series per container holding the device.
        self.attribution = attribution
        self.xid = xid

    def collect(self) -> Iterator[Metric]:
        pods = self.attribution is not None
        names = {metric.name: dcgm.labels_of(metric, pods, self.release) for metric in dcgm.COMPAT}
        families = {metric.name: _family(metric, names[metric.name]) for metric in dcgm.COMPAT}
        states = {s.name: s for s in self.snapshot.states() if s.name in dcgm.BACKENDS}
        fresh = {name: s for name, s in states.items() if self.snapshot.is_fresh(s)}
        gpus = {info.uuid: info for info in states["nvidia"].devices_info} if "nvidia" in states else {}
        last_xid = {d.uuid: d.last_code or 0 for d in self.xid.devices()} if self.xid is not None else {}
        for state in fresh.values():
            infos = {info.index: info for info in state.devices_info}
            for sample in state.devices:
                info = infos.get(sample.reading.index)
                if info is None or not sample.reading.up:
                    continue
                identity = self._identity(state, sample, info, gpus)
                if identity is None:
                    continue
                owners = self._owners(info) if pods else [()]
                values = _Values()
                SnapshotCollector.device_values(values, [], sample)
                xid_code = last_xid.get(info.uuid or "") if state.name == "nvidia" else None
                for metric in dcgm.COMPAT:
                    value = _value(metric, values.by_key, xid_code)
                    if value is None:
                        continue
                    extra = [str(int(value))] if metric.extra_labels else []
                    for owner in owners:
                        _add(families[metric.name], names[metric.name], [*identity, *extra, *owner], value)
        yield from (family for family in families.values() if family.samples)

    def _identity(
        self, state: BackendState, sample: DeviceSample, info: GPUInfo, gpus: dict[str | None, GPUInfo]
    ) -> list[str] | None:
        """gpu, UUID, pci_bus_id, device, modelName, hostname, driver, GPU_I_PROFILE, GPU_I_ID: on a MIG
        device those of its parent GPU (as dcgm-exporter labels a GPU instance) and its instance's."""
        profile = instance = ""
        gpu = info
        if state.name == "nvidia_mig":
            mig = next(iter(sample.reading.gauges.get(m.MIG_INFO.name, {})), None)
            if mig is None or mig[0] not in gpus:
                return None  # a MIG device whose GPU warptd does not read: nothing to label it with
            parent_uuid, instance, _, profile = mig
            gpu = gpus[parent_uuid]
        index = str(gpu.index)
        return [
            index,
            gpu.uuid or "",
            gpu.pci_bus_id or "",
            f"nvidia{index}",
            gpu.model,
            self.node,
            gpu.driver_version or "",
            profile,
            instance,
        ]

    def _owners(self, info: GPUInfo) -> list[tuple[str, ...]]:
        """(pod, namespace, container) per container holding the device; one empty set when none."""
        assert self.attribution is not None
        owners = self.attribution.owners(info)
        return [(o.pod, o.namespace, o.container) for o in owners] or [_NO_POD]


def _value(
    metric: dcgm.CompatMetric, by_key: dict[tuple[str, tuple[str, ...]], float], xid_code: int | None
) -> float | None:
    """The metric's value in dcgm-exporter's unit: its first source the device has, times its factor."""
    for source in metric.sources:
        if source is dcgm.LAST_XID_CODE:
            return None if xid_code is None else float(xid_code)
        value = by_key.get((source.spec.name, source.selector))
        if value is not None:
            return value * source.factor
    return None


def _add(family: Metric, names: tuple[str, ...], labels: list[str], value: float) -> None:
    if isinstance(family, GaugeMetricFamily):
        family.add_metric(labels, value)
    else:  # a counter under dcgm-exporter's name, without prometheus_client's _total
        family.add_sample(family.name, dict(zip(names, labels, strict=True)), value)
