"""Google Cloud TPUs: chips from the PCI devices under ``--sysfs``, usage from the libtpu runtime.

Chips are found with tpu-info's own vendor id and chip table; HBM bytes, duty cycle and HBM
bandwidth come from the libtpu runtime metrics gRPC service (tpu-info's stubs), which answers only
while a TPU workload runs. TPUs report no power, energy, temperature, clocks or throttling.
"""

from __future__ import annotations

import inspect
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import structlog

from warptd.backends.base import AcceleratorBackend
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import import_failure
from warptd.models import DeviceReading, GPUInfo, MemoryUsage, Utilization, pci_address
from warptd.sysfs import read_text

if TYPE_CHECKING:
    from collections.abc import Hashable
    from types import ModuleType

    from warptd.config import Settings

log = structlog.get_logger("warptd.backend")

#: All runtime RPCs of one sample share this deadline (and at most half the sample timeout).
RPC_BUDGET_S = 1.0
#: Retry a runtime that went away within seconds, not after gRPC's default 2-minute backoff.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 5000),
)
# tpu-info's MetricName members we read, and the Gauge field tpu-info parses each from.
_METRICS = {
    "TOTAL_MEMORY": "as_int",
    "MEMORY_USAGE": "as_int",
    "DUTY_CYCLE_PCT": "as_double",
    "HBM_BW_UTIL": "as_double",  # newer tpu-info/libtpu only: absent series otherwise
}
_NUMBER = re.compile(r"(\d+)")


@dataclass(slots=True)
class TpuChipDevice:
    """One chip: its PCI functions (``bus/pci/devices/<addr>``, function 0 first) and device node."""

    kind: Any  # tpu_info.device.TpuChip
    functions: list[Path]
    node: str | None
    driver: str | None
    first_core: int = 0  # the runtime's device id of this chip's first core

    @property
    def address(self) -> str:
        return pci_address(self.functions[0].name) or self.functions[0].name

    @property
    def cores(self) -> range:
        return range(self.first_core, self.first_core + self.kind.value.devices_per_chip)


class TpuBackend(AcceleratorBackend):
    """One device per TPU chip; the runtime's metrics are read once per sample for every chip."""

    name: ClassVar[str] = "tpu"
    source: ClassVar[str] = "tpu-info"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        try:
            import grpc
            from tpu_info import device, metrics
            from tpu_info.proto import tpu_metric_service_pb2, tpu_metric_service_pb2_grpc
        except ImportError as exc:
            raise BackendUnavailableError(import_failure("tpu-info", "tpu_info", "tpu", exc)) from exc
        self._grpc, self._pb = grpc, tpu_metric_service_pb2
        self.chips = _discover(settings.sysfs, device)
        if not self.chips:
            raise BackendUnavailableError(
                f"no TPU chip (PCI vendor {device.GOOGLE_PCI_VENDOR_ID}) in {settings.sysfs}/bus/pci/devices"
            )
        #: MetricName member → (libtpu's metric name, Gauge field), for the members this tpu-info has.
        self._metrics = {
            name: (member.value, gauge_field)
            for name, gauge_field in _METRICS.items()
            if (member := getattr(metrics.MetricName, name, None)) is not None
        }
        self.address = (
            settings.tpu_runtime_address
            or inspect.signature(metrics.get_chip_usage).parameters["addr"].default
        )
        # The same channel tpu-info opens, made once and kept: gRPC reconnects it by itself.
        self._channel = grpc.secure_channel(
            self.address, grpc.local_channel_credentials(), options=_CHANNEL_OPTIONS
        )
        self._stub = tpu_metric_service_pb2_grpc.RuntimeMetricServiceStub(self._channel)
        self._budget = min(RPC_BUDGET_S, settings.sample_timeout / 2)
        self._runtime: dict[str, dict[int, float]] | None = None  # this pass's values, by member name
        self._runtime_up: bool | None = None
        self._closed = False

    # -- the runtime metrics service --------------------------------------------------------
    def classify_error(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, self._grpc.RpcError):
            codes = self._grpc.StatusCode
            code = exc.code()
            if code in (codes.NOT_FOUND, codes.UNIMPLEMENTED, codes.INVALID_ARGUMENT):
                return ErrorKind.NOT_SUPPORTED  # a metric this libtpu does not know
            if code == codes.DEADLINE_EXCEEDED:
                return ErrorKind.TIMEOUT
            if code in (codes.PERMISSION_DENIED, codes.UNAUTHENTICATED):
                return ErrorKind.PERMISSION
            return ErrorKind.SDK_ERROR
        return super().classify_error(exc)

    def on_error(self, key: Hashable, kind: ErrorKind, exc: BaseException) -> None:
        if isinstance(exc, self._grpc.RpcError) and exc.code() == self._grpc.StatusCode.UNAVAILABLE:
            self._set_runtime_up(False)  # no workload runs: absent values, not an error
            return
        super().on_error(key, kind, exc)

    def _set_runtime_up(self, up: bool) -> None:
        if up == self._runtime_up:
            return
        self._runtime_up = up
        if not up:  # the next workload may bring another libtpu: ask it again what it supports
            self._unsupported.difference_update(("runtime", metric) for metric in self._metrics)
        log.info(
            "tpu_runtime_up" if up else "tpu_runtime_unavailable", backend=self.name, address=self.address
        )

    def _fetch(self, metric: str, timeout: float) -> dict[int, float]:
        """One metric for every core (or chip): device id → value, parsed as tpu-info parses it."""
        libtpu_name, gauge_field = self._metrics[metric]
        request = self._pb.MetricRequest(metric_name=libtpu_name)
        response = self._stub.GetRuntimeMetric(request, timeout=timeout)
        return {m.attribute.value.int_attr: getattr(m.gauge, gauge_field) for m in response.metric.metrics}

    def _read_runtime(self) -> dict[str, dict[int, float]]:
        """Every metric once, within one deadline; stop at the first failure but an unknown metric."""
        values: dict[str, dict[int, float]] = {}
        deadline = time.monotonic() + self._budget
        for metric in self._metrics:
            key = ("runtime", metric)
            if key in self._unsupported:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.count_error(ErrorKind.TIMEOUT)
                break
            result = self.guarded(key, self._fetch, metric, remaining)
            if result is not None:
                values[metric] = result
                self._set_runtime_up(True)
            elif key not in self._unsupported:
                break  # unavailable, timed out or failing: the other metrics would be too
        return values

    def _per_chip(self, metric: str, index: int) -> list[float] | None:
        """The values of chip ``index``: one per core where the runtime reports per core, else one."""
        by_id = (self._runtime or {}).get(metric)
        if not by_id:
            return None
        chip = self.chips[index]
        ids = chip.cores if len(by_id) > len(self.chips) else range(index, index + 1)
        found = [by_id[i] for i in ids if i in by_id]
        return found if len(found) == len(ids) else None

    # -- discovery and identity -------------------------------------------------------------
    def is_available(self) -> bool:
        return bool(self.chips)

    def get_device_count(self) -> int:
        return len(self.chips)

    def get_driver_version(self) -> str | None:
        return None  # libtpu lives in the workload's process; its version is not visible from here

    def list_devices(self) -> list[GPUInfo]:
        devices = []
        for index, chip in enumerate(self.chips):
            spec = chip.kind.value
            # hbm_gib is per core on v2/v3 and per chip on 7x: trust it only for one-core chips.
            nominal = spec.hbm_gib * 2**30 if spec.devices_per_chip == 1 else None
            extra = {
                "chip_type": spec.name,
                "device_node": chip.node,
                "devices_per_chip": spec.devices_per_chip,
            }
            if chip.driver:
                extra["driver"] = chip.driver
            devices.append(
                GPUInfo(
                    index=index,
                    model=str(chip.kind).removesuffix(" chip"),
                    **GPUInfo.memory_fields(nominal),
                    uuid=self.device_identity(index),
                    pci_bus_id=chip.address,
                    driver_version=self.get_driver_version(),
                    extra_metrics=extra,
                )
            )
        return devices

    def device_identity(self, index: int) -> str | None:
        """TPUs expose no serial number: the chip's PCI address, fixed for a VM's lifetime."""
        return f"TPU-{self.chips[index].address}"

    def get_pytorch_device_string(self, device_id: int) -> str:
        return f"xla:{device_id}"  # torch_xla

    # -- telemetry --------------------------------------------------------------------------
    def begin_sample(self) -> None:
        self._runtime = self._read_runtime()  # every chip's values in one pass, not per chip

    def read_device(self, index: int) -> DeviceReading:
        if self._runtime is None:  # read outside the sampler (warptd list, tests)
            self.begin_sample()
        return super().read_device(index)

    def device_present(self, index: int) -> bool:
        return all(function.exists() for function in self.chips[index].functions)  # not unbound

    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        total = self._per_chip("TOTAL_MEMORY", index)
        used = self._per_chip("MEMORY_USAGE", index)
        if not total or used is None or sum(total) <= 0:
            return None
        return MemoryUsage(total=int(sum(total)), used=int(sum(used)), free=int(sum(total) - sum(used)))

    def get_utilization(self, index: int) -> Utilization | None:
        duty = self._per_chip("DUTY_CYCLE_PCT", index)
        hbm = self._per_chip("HBM_BW_UTIL", index)
        if duty is None and hbm is None:
            return None
        return Utilization(
            compute=sum(duty) / len(duty) / 100 if duty else None,
            memory=sum(hbm) / len(hbm) / 100 if hbm else None,
        )

    def get_temperatures(self, index: int) -> dict[str, float]:
        return {}  # not reported by TPUs

    def get_power_usage(self, index: int) -> float | None:
        return None  # not reported by TPUs

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._channel.close()


def _discover(sysfs: Path, device: ModuleType) -> list[TpuChipDevice]:
    """TPU chips under ``sysfs``/bus/pci/devices, grouped and ordered as tpu-info's ``get_chips``.

    tpu-info's own functions read the real /sys; this reads ``--sysfs`` with its constants instead.
    """
    functions: dict[str, list[Path]] = {}
    kinds: dict[str, Any] = {}
    for path in sorted((sysfs / "bus" / "pci" / "devices").glob("*")):
        try:
            if read_text(path / "vendor") != device.GOOGLE_PCI_VENDOR_ID:
                continue
            subsystem = path / "subsystem_device"  # tells v2 from v3 only
            kind = device.TpuChip.from_pci_device_id(
                read_text(path / "device"), read_text(subsystem) if subsystem.exists() else ""
            )
        except OSError:
            continue
        if kind is None:
            continue  # gVNIC and other Google devices
        base, _, _ = path.name.rpartition(".")  # domain:bus:device; the function is the core
        functions.setdefault(base, []).append(path)
        kinds[base] = kind
    chips = []
    for base, paths in functions.items():
        paths.sort(key=_function)
        chips.append(TpuChipDevice(kinds[base], paths, _node(paths[0]), _driver(paths[0])))
    chips.sort(key=lambda chip: (chip.node is None, _natural(chip.node or ""), chip.address))
    first_core = 0
    for position, chip in enumerate(chips):
        chip.node = chip.node or device.chip_path(chip.kind, position)
        chip.first_core = first_core
        first_core += chip.kind.value.devices_per_chip
    return chips


def _function(path: Path) -> int:
    return int(path.name.rpartition(".")[2] or "0", 16)


def _node(path: Path) -> str | None:
    """``/dev/accelN`` (the accel class device under the PCI device), else tpu-info's vfio group node."""
    accel = sorted((path / "accel").glob("accel*"), key=lambda p: _natural(p.name))
    if accel:
        return f"/dev/{accel[0].name}"
    try:
        return f"/dev/vfio/{os.path.basename(os.readlink(path / 'iommu_group'))}"
    except OSError:
        return None


def _driver(path: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(path / "driver"))
    except OSError:
        return None


def _natural(text: str) -> list[Any]:
    """Sort key that puts ``/dev/vfio/2`` before ``/dev/vfio/10``."""
    return [int(part) if part.isdigit() else part for part in _NUMBER.split(text)]
