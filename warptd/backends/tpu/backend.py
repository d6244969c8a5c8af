"""The ``tpu`` backend: Google Cloud TPU chips (:mod:`~warptd.backends.tpu.chips`) and the libtpu runtime.

HBM bytes, duty cycle and HBM bandwidth come from the libtpu runtime metrics gRPC service (tpu-info's
stubs), which answers only while a TPU workload runs, once per sample for every chip. TPUs report no
power, energy, temperature, clocks or throttling.
"""

from __future__ import annotations

import inspect
import time
from typing import TYPE_CHECKING, ClassVar

import structlog

from warptd.backends.base import AcceleratorBackend
from warptd.backends.tpu.chips import RuntimeValues, discover
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import import_failure
from warptd.models import GPUInfo

if TYPE_CHECKING:
    from collections.abc import Hashable

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


class TpuBackend(AcceleratorBackend):
    """One device per TPU chip; the runtime's metrics are read once per sample for every chip."""

    name: ClassVar[str] = "tpu"
    source: ClassVar[str] = "tpu-info"
    sdk: ClassVar[str | None] = "tpu-info"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        try:
            import grpc
            from tpu_info import device, metrics
            from tpu_info.proto import tpu_metric_service_pb2, tpu_metric_service_pb2_grpc
        except ImportError as exc:
            raise BackendUnavailableError(import_failure("tpu-info", "tpu_info", "tpu", exc)) from exc
        self._grpc, self._pb = grpc, tpu_metric_service_pb2
        self.chips = self.devices = discover(settings.sysfs, device, self._runtime_values)
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
        self._runtime: RuntimeValues | None = None  # this pass's values, by member name
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

    def _runtime_values(self) -> RuntimeValues:
        """This sample's values (read now where the sampler has not begun one: ``warptd list``, tests)."""
        if self._runtime is None:
            self.begin_sample()
        return self._runtime or {}

    # -- discovery and identity -------------------------------------------------------------
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
                    driver_version=None,  # libtpu lives in the workload's process: not visible here
                    extra_metrics=extra,
                )
            )
        return devices

    def device_identity(self, index: int) -> str | None:
        """TPUs expose no serial number: the chip's PCI address, fixed for a VM's lifetime."""
        return f"TPU-{self.chips[index].address}"

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """torch_xla's device."""
        return f"xla:{info.index}", {}

    # -- telemetry --------------------------------------------------------------------------
    def begin_sample(self) -> None:
        self._runtime = self._read_runtime()  # every chip's values in one pass, not per chip

    def device_present(self, index: int) -> bool:
        return self.chips[index].present()

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._channel.close()
