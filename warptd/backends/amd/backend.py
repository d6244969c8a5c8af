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
from warptd.models import GPUInfo

if TYPE_CHECKING:
    from warptd.config import Settings


class AmdBackend(AcceleratorBackend):
    """AMD Instinct and Radeon GPUs; handles come from the shared amdsmi session, looked up once."""

    name: ClassVar[str] = "amd"
    source: ClassVar[str] = "amdsmi"
    sdk: ClassVar[str | None] = "amdsmi"

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
        self.devices = [
            AmdDevice(
                index, handle, sdk, self.call, sensors, costs=self.read_costs, settings=lambda: self.settings
            )
            for index, handle in enumerate(self._session.handles)
        ]

    def classify_error(self, exc: BaseException) -> ErrorKind:
        kind = self._session.classify(exc)
        return kind if kind is not None else super().classify_error(exc)

    # -- discovery and identity -------------------------------------------------------------
    def get_driver_version(self) -> str | None:
        info = self.devices[0].get("driver", "amdsmi_get_gpu_driver_info") if self.devices else None
        return text(info.get("driver_version")) if info else None

    def list_devices(self) -> list[GPUInfo]:
        driver = self.get_driver_version()
        return [
            device.describe(driver, partial(self.device_identity, device.index)) for device in self.devices
        ]

    def device_identity(self, index: int) -> str | None:
        """The UUID; for a partition ``<uuid>/<partition id>`` (:func:`identify`)."""
        return identify(self.devices, index)

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """ROCm builds of torch call AMD GPUs ``cuda``, numbered in HIP's order, which may differ from
        amdsmi's: pin the worker to this GPU's HIP id."""
        index = info.index
        hip_id = self.devices[index].hip_id if 0 <= index < len(self.devices) else None
        if hip_id is None:  # amdsmi did not say (or there is no such device)
            return f"cuda:{index}", {}
        return "cuda:0", {"HIP_VISIBLE_DEVICES": str(hip_id)}

    def shutdown(self) -> None:
        self._lease.release()
