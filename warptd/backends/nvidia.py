"""NVIDIA GPUs through NVML (nvidia-ml-py). NVML reports mW, mJ, MHz and percent; we convert."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, ClassVar

from warptd.backends import nvml_session
from warptd.backends.base import AcceleratorBackend
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.models import DeviceReading, GPUInfo, MemoryUsage, Utilization

if TYPE_CHECKING:
    from warptd.config import Settings

# NVML clock-event (throttle) bits, by the reason names warptd exports for every vendor.
_THROTTLE_BITS: dict[str, str] = {
    "gpu_idle": "nvmlClocksEventReasonGpuIdle",
    "applications_clocks_setting": "nvmlClocksEventReasonApplicationsClocksSetting",
    "sw_power_cap": "nvmlClocksEventReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksEventReasonHwSlowdown",
    "sync_boost": "nvmlClocksEventReasonSyncBoost",
    "sw_thermal_slowdown": "nvmlClocksEventReasonSwThermalSlowdown",
    "hw_thermal_slowdown": "nvmlClocksEventReasonHwThermalSlowdown",
    "hw_power_brake_slowdown": "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    "display_clock_setting": "nvmlClocksEventReasonDisplayClockSetting",
}
# NVML violation counters (ns below application clocks) that back the same reasons.
_VIOLATION_POLICIES: dict[str, str] = {
    "sw_power_cap": "NVML_PERF_POLICY_POWER",
    "sw_thermal_slowdown": "NVML_PERF_POLICY_THERMAL",
    "sync_boost": "NVML_PERF_POLICY_SYNC_BOOST",
}
_CLOCKS: dict[str, str] = {
    "graphics": "NVML_CLOCK_GRAPHICS",
    "sm": "NVML_CLOCK_SM",
    "memory": "NVML_CLOCK_MEM",
}


class NvidiaBackend(AcceleratorBackend):
    """NVIDIA GPUs; handles come from the shared :mod:`nvml_session`, cached once."""

    name: ClassVar[str] = "nvidia"
    source: ClassVar[str] = "nvml"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._lease = nvml_session.lease()
        self._session = self._lease.session
        try:
            self._nvml = nvml = self._session.nvml
            self._handles = self._session.handles
            self._throttle_bits = {reason: getattr(nvml, const) for reason, const in _THROTTLE_BITS.items()}
            self._policies = {reason: getattr(nvml, const) for reason, const in _VIOLATION_POLICIES.items()}
            self._clocks = {clock: getattr(nvml, const) for clock, const in _CLOCKS.items()}
        except AttributeError as exc:  # an nvidia-ml-py too old for these constants
            self._lease.release()
            raise BackendUnavailableError(f"nvidia-ml-py too old: {exc}") from exc
        self._supported_masks: dict[int, int] = {}
        self._uuids: dict[int, str] = {}
        self._known: dict[int, GPUInfo] = {}  # last identity read per index
        self._generation = self._session.generation
        self._suspect = False

    def classify_error(self, exc: BaseException) -> ErrorKind:
        return self._session.classify(exc)

    def on_error(self, key: Hashable, kind: ErrorKind, exc: BaseException) -> None:
        nvml = self._nvml
        if isinstance(exc, nvml.NVMLError) and exc.value == nvml.NVML_ERROR_UNINITIALIZED:
            # NVML was shut down under us: nothing of this device is readable until it is reopened.
            if isinstance(key, tuple):
                self._lost_now.add(key[1])
            self._suspect = True
        elif kind is ErrorKind.DEVICE_LOST:
            self._suspect = True
        super().on_error(key, kind, exc)

    def needs_rediscovery(self) -> bool:
        return self._suspect

    def rediscover(self) -> bool:
        """Reopen NVML; stay suspect (retry later) while a GPU is missing or NVML is not back."""
        before = len(self._handles)
        complete = self._session.reopen()
        self._sync_generation()
        self._suspect = not complete or len(self._handles) < before
        return True

    def _sync_generation(self) -> None:
        """After a reopen (by this or another backend on the session) per-device caches are stale."""
        if self._generation != self._session.generation:
            self._generation = self._session.generation
            self._lost_now.clear()
            self._supported_masks.clear()
            self._unsupported.clear()
            self._uuids.clear()

    def device_identity(self, index: int) -> str | None:
        if self._handles[index] is None:
            known = self._known.get(index)
            return known.uuid if known else None
        if index not in self._uuids:
            uuid = self._get(index, "uuid", "nvmlDeviceGetUUID")
            if uuid is None:
                return None
            self._uuids[index] = nvml_session.text(uuid)
        return self._uuids[index]

    def read_device(self, index: int) -> DeviceReading:
        with self._session.lock:
            self._sync_generation()
            return super().read_device(index)

    def read_power(self, index: int) -> tuple[float | None, float | None] | None:
        with self._session.lock:
            self._sync_generation()
            return super().read_power(index)

    def device_present(self, index: int) -> bool:
        """False for an index gone from the list, or a GPU whose handle the last reopen could not get."""
        if index < len(self._handles) and self._handles[index] is not None:
            return True
        self._suspect = True  # retry the reopen later
        return False

    # -- discovery and identity -------------------------------------------------------------
    def is_available(self) -> bool:
        return self.get_device_count() > 0

    def get_device_count(self) -> int:
        return len(self._handles)

    def get_driver_version(self) -> str | None:
        version = self.guarded("driver", self._nvml.nvmlSystemGetDriverVersion)
        return nvml_session.text(version) if version is not None else None

    def list_devices(self) -> list[GPUInfo]:
        nvml, driver = self._nvml, self.get_driver_version()
        devices = []
        for index, handle in enumerate(self._handles):
            if handle is None:  # lost at the last reopen: keep its identity, so it shows as down
                devices.append(self._known.get(index) or GPUInfo(index=index, model="NVIDIA GPU"))
                continue
            name = self.call(index, "name", nvml.nvmlDeviceGetName, handle)
            uuid = self.call(index, "uuid", nvml.nvmlDeviceGetUUID, handle)
            cc = self.call(index, "cc", nvml.nvmlDeviceGetCudaComputeCapability, handle)
            pci = self.call(index, "pci", nvml.nvmlDeviceGetPciInfo, handle)
            memory = self.get_memory_usage(index)
            devices.append(
                GPUInfo(
                    index=index,
                    model=nvml_session.text(name) if name is not None else "NVIDIA GPU",
                    **GPUInfo.memory_fields(memory.total if memory else None),
                    uuid=nvml_session.text(uuid) if uuid is not None else None,
                    compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
                    pcie_gen=self.call(index, "pcie_gen", nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
                    pci_bus_id=nvml_session.text(pci.busId) if pci is not None else None,
                    driver_version=driver,
                )
            )
            self._known[index] = devices[-1]
        return devices

    def get_pytorch_device_string(self, device_id: int) -> str:
        return f"cuda:{device_id}"

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """CUDA orders GPUs fastest-first and honours CUDA_VISIBLE_DEVICES, NVML does neither:
        pin the worker to this GPU by UUID so the GPU that runs is the one measured."""
        if not info.uuid:
            return self.get_pytorch_device_string(info.index), {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        return "cuda:0", {"CUDA_VISIBLE_DEVICES": info.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    # -- telemetry --------------------------------------------------------------------------
    def _get(self, index: int, what: str, fn_name: str, *args: object) -> Any:
        return self.call(index, what, getattr(self._nvml, fn_name), self._handles[index], *args)

    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        info = self._get(index, "memory", "nvmlDeviceGetMemoryInfo")
        return MemoryUsage(total=info.total, used=info.used, free=info.free) if info is not None else None

    def get_utilization(self, index: int) -> Utilization | None:
        rates = self._get(index, "utilization", "nvmlDeviceGetUtilizationRates")
        return Utilization(compute=rates.gpu / 100, memory=rates.memory / 100) if rates is not None else None

    def get_temperatures(self, index: int) -> dict[str, float]:
        gpu = self._get(index, "temperature", "nvmlDeviceGetTemperature", self._nvml.NVML_TEMPERATURE_GPU)
        return {"gpu": float(gpu)} if gpu is not None else {}

    def get_power_usage(self, index: int) -> float | None:
        milliwatts = self._get(index, "power", "nvmlDeviceGetPowerUsage")
        return milliwatts / 1000 if milliwatts is not None else None

    def get_power_limit(self, index: int) -> float | None:
        milliwatts = self._get(index, "power_limit", "nvmlDeviceGetEnforcedPowerLimit")
        return milliwatts / 1000 if milliwatts is not None else None

    def get_energy_counter(self, index: int) -> float | None:
        millijoules = self._get(index, "energy", "nvmlDeviceGetTotalEnergyConsumption")
        return millijoules / 1000 if millijoules is not None else None

    def get_clocks(self, index: int) -> dict[str, float]:
        clocks = {}
        for clock, kind in self._clocks.items():
            mhz = self._get(index, f"clock_{clock}", "nvmlDeviceGetClockInfo", kind)
            if mhz is not None:
                clocks[clock] = mhz * 1e6
        return clocks

    def _supported_mask(self, index: int) -> int:
        if index not in self._supported_masks:
            mask = self._get(index, "throttle_supported", "nvmlDeviceGetSupportedClocksEventReasons")
            if mask is None:
                return 0  # lost or failing now: ask again next sample
            self._supported_masks[index] = mask
        return self._supported_masks[index]

    def get_supported_throttle_reasons(self, index: int) -> list[str]:
        mask = self._supported_mask(index)
        return [reason for reason, bit in self._throttle_bits.items() if mask & bit]

    def get_throttle_reasons(self, index: int) -> list[str] | None:
        mask = self._get(index, "throttle", "nvmlDeviceGetCurrentClocksEventReasons")
        if mask is None:
            return None
        return [reason for reason, bit in self._throttle_bits.items() if mask & bit]

    def get_throttle_counters(self, index: int) -> dict[str, float]:
        counters = {}
        for reason, policy in self._policies.items():
            status = self._get(index, f"violation_{reason}", "nvmlDeviceGetViolationStatus", policy)
            if status is not None:
                counters[reason] = status.violationTime / 1e9
        return counters

    def shutdown(self) -> None:
        self._lease.release()
