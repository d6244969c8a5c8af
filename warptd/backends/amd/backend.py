"""The ``amd`` backend: AMD Instinct and Radeon GPUs through amdsmi, one :class:`AmdDevice` per handle of
the shared session. It classifies amdsmi's errors and tells partitions of one GPU apart; each device
reads its own values."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, ClassVar

from warptd.backends.amd import session
from warptd.backends.amd.device import AmdDevice, Sensors
from warptd.backends.amd.handle import identify
from warptd.backends.amd.values import text
from warptd.backends.base import AcceleratorBackend
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.models import DeviceReading, GPUInfo, LabelledValues, MemoryUsage, Utilization

if TYPE_CHECKING:
    from warptd.config import Settings


class AmdBackend(AcceleratorBackend):
    """AMD Instinct and Radeon GPUs; handles come from the shared amdsmi session, looked up once."""

    name: ClassVar[str] = "amd"
    source: ClassVar[str] = "amdsmi"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._lease = session.lease()
        self._session = self._lease.session
        sdk = self._sdk = self._session.sdk
        try:
            sensors = Sensors.of(sdk)
        except (AttributeError, KeyError) as exc:
            self.shutdown()
            raise BackendUnavailableError(f"amdsmi too old: {exc}") from exc
        self._devices = [
            AmdDevice(
                index, handle, sdk, self.call, sensors, costs=self.read_costs, settings=lambda: self.settings
            )
            for index, handle in enumerate(self._session.handles)
        ]

    def classify_error(self, exc: BaseException) -> ErrorKind:
        kind = self._session.classify(exc)
        return kind if kind is not None else super().classify_error(exc)

    # -- discovery and identity -------------------------------------------------------------
    def is_available(self) -> bool:
        return self.get_device_count() > 0

    def get_device_count(self) -> int:
        return len(self._devices)

    def get_driver_version(self) -> str | None:
        info = self._devices[0].get("driver", "amdsmi_get_gpu_driver_info") if self._devices else None
        return text(info.get("driver_version")) if info else None

    def list_devices(self) -> list[GPUInfo]:
        driver = self.get_driver_version()
        return [
            device.describe(driver, partial(self.device_identity, device.index)) for device in self._devices
        ]

    def device_identity(self, index: int) -> str | None:
        """The UUID; for a partition ``<uuid>/<partition id>`` (:func:`identify`)."""
        return identify(self._devices, index)

    def get_pytorch_device_string(self, device_id: int) -> str:
        """ROCm builds of torch call AMD GPUs ``cuda``, numbered in HIP's order."""
        hip_id = self._hip_id(device_id)
        return f"cuda:{device_id if hip_id is None else hip_id}"

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """HIP may number GPUs differently from amdsmi: pin the worker to this GPU's HIP id."""
        hip_id = self._hip_id(info.index)
        if hip_id is None:
            return self.get_pytorch_device_string(info.index), {}
        return "cuda:0", {"HIP_VISIBLE_DEVICES": str(hip_id)}

    def _hip_id(self, index: int) -> int | None:
        """Device ``index``'s HIP id, None where amdsmi did not say (or there is no such device)."""
        return self._devices[index].hip_id if 0 <= index < len(self._devices) else None

    # -- telemetry: each device reads its own -----------------------------------------------
    def begin_read(self, index: int, power_only: bool) -> None:
        self._devices[index].begin_read(power_only)

    def read_values(self, index: int) -> DeviceReading:
        return self._devices[index].read()

    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        return self._devices[index].memory()

    def get_utilization(self, index: int) -> Utilization | None:
        return self._devices[index].utilization()

    def get_temperatures(self, index: int) -> dict[str, float]:
        return self._devices[index].temperatures()

    def get_power_usage(self, index: int) -> float | None:
        return self._devices[index].power()

    def get_power_limit(self, index: int) -> float | None:
        return self._devices[index].power_cap

    def get_energy_counter(self, index: int) -> float | None:
        return self._devices[index].energy()

    def get_clocks(self, index: int) -> dict[str, float]:
        return self._devices[index].clocks()

    def get_supported_throttle_reasons(self, index: int) -> list[str]:
        return self._devices[index].table.supported_throttle_reasons()

    def get_throttle_reasons(self, index: int) -> list[str] | None:
        return self._devices[index].table.throttle_reasons()

    def get_throttle_counters(self, index: int) -> dict[str, float]:
        return self._devices[index].table.throttle_counters()

    def get_gauges(self, index: int) -> dict[str, LabelledValues]:
        return self._devices[index].gauges()

    def get_counters(self, index: int) -> dict[str, LabelledValues]:
        return self._devices[index].counters()

    def shutdown(self) -> None:
        self._lease.release()
