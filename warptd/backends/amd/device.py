"""One logical AMD GPU (a whole GPU, or a partition of one): its amdsmi handle, what is kept about it
between samples, and its reading, built in one constructor call. amdsmi reports MB, %, W, µW (power
cap), µJ ticks, °C and MHz; the readings are in base units.

What a read costs: amdsmi's activity, power, energy and clock getters each read the whole GPU metrics
table again (``amd_smi.cc``, ``rocm_smi.cc``), and on MI300 every read of the table sends the SMU
firmware a message (the driver keeps no cache of it). So a read takes all of them from the one table it
reads (``metrics_table``); a device without a table asks the getters (charged as ``utilization``,
``power``, ``energy``, ``clocks``). Temperatures (``temperatures``: hwmon files behind the driver's 1 ms
sensor cache) and VRAM (``memory``: DRM queries) each read; the power cap and the fan at the health
cadence (``health``, with ECC, replays and bad pages on the primary partition). The kinds are those
charged to ``read_costs`` (docs/hardware.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from warptd.backends.amd.handle import AmdHandle, Call
from warptd.backends.amd.health import Health, read_health
from warptd.backends.amd.metrics_table import MetricsTable
from warptd.backends.amd.values import integer, number, one, reported, text
from warptd.backends.cadence import DeviceCadence
from warptd.backends.costs import ReadCosts, ReadKind, thread_time
from warptd.backends.device import ReadPlan, ValueDevice, throttle_states
from warptd.metrics import nvidia
from warptd.models import GPUInfo, LabelledValues, MemoryUsage, Utilization

if TYPE_CHECKING:
    from warptd.config import Settings

#: Sensors (``AmdSmiTemperatureType`` members) by the names warptd exports.
_TEMPERATURES = {"edge": "EDGE", "junction": "HOTSPOT", "memory": "VRAM"}
_CLOCKS = {"graphics": "GFX", "memory": "MEM"}
#: The metrics-table field of each clock (MHz): what ``amdsmi_get_clock_info`` answers as ``clk``.
_TABLE_CLOCKS = {"graphics": "current_gfxclk", "memory": "current_uclk"}
#: Socket power (W) fields, in the table and in ``amdsmi_get_power_info`` alike: current on MI300 and
#: newer, average before.
_POWER_FIELDS = ("current_socket_power", "average_socket_power")
#: What amdsmi reports as the energy accumulator's resolution (µJ): rocm_smi's ``kEnergyCounterResolution``
#: (15.3F), rounded from the accumulator's real unit, 2^-16 J (kgd_pp_interface.h), which reads 0.27 % high.
_ROUNDED_RESOLUTION_UJ = 15.3
_ENERGY_TICK_UJ = 1e6 / 2**16
#: ``power_cap`` is µW on Linux bare metal but W from the virtualisation-host build (amdsmi.h):
#: no GPU is capped below this many µW (0.1 W), so a smaller number is watts.
_POWER_CAP_MICROWATTS_MIN = 100_000
#: The fan sensor read: amdsmi has no fan count, and boards with fans report them as sensor 0.
_FAN_SENSOR = 0


@dataclass(frozen=True, slots=True)
class Sensors:
    """The package's enum members for the sensors and clocks read, looked up once per backend."""

    temperatures: dict[str, tuple[Any, Any]]
    clocks: dict[str, Any]

    @classmethod
    def of(cls, sdk: ModuleType) -> Sensors:
        """Raises AttributeError or KeyError for an amdsmi too old to have them."""
        types, current = sdk.AmdSmiTemperatureType, sdk.AmdSmiTemperatureMetric.CURRENT
        return cls(
            temperatures={sensor: (types[t], current) for sensor, t in _TEMPERATURES.items()},
            clocks={clock: sdk.AmdSmiClkType[kind] for clock, kind in _CLOCKS.items()},
        )


class AmdDevice(AmdHandle, ValueDevice):
    """One handle amdsmi gave (a whole GPU, or a partition of one) and what is kept about it."""

    def __init__(
        self,
        index: int,
        handle: Any,
        sdk: ModuleType,
        call: Call,
        sensors: Sensors,
        *,
        costs: ReadCosts,
        settings: Callable[[], Settings],
    ) -> None:
        """``settings()`` gives the settings in force (a reload changes the health interval live);
        ``costs`` is the backend's, charged by kind of read."""
        super().__init__(index, handle, sdk, call)
        self._sensors = sensors
        self._costs = costs
        self.hip_id: int | None = None
        self._fan_max: float | None = None
        self.table = MetricsTable()
        #: ECC and replay counters and the pending-retirement gauge, as last read at the health cadence.
        self.health = Health()
        #: The power cap (W) and the fan's speed ratio, as last read at the health cadence.
        self.power_cap: float | None = None
        self.fan_speed: float | None = None
        self._health_cadence = DeviceCadence(settings)

    def describe(self, driver: str | None, identify: Callable[[], str | None]) -> GPUInfo:
        """The device's identity and extras; ``identify()`` gives its stable identity (the backend
        tells partitions apart by their shared PCI address)."""
        asic = self.get("asic", "amdsmi_get_gpu_asic_info") or {}
        enumeration = self.get("enumeration", "amdsmi_get_gpu_enumeration_info") or {}
        if (hip_id := integer(enumeration.get("hip_id"))) is not None:
            self.hip_id = hip_id
        gfx = text(asic.get("target_graphics_version"))
        gfx = gfx if gfx and "ffffffff" not in gfx else None  # "gfx" + hex(UINT64_MAX): unsupported
        uuid = identify()
        extras = {
            "device_id": text(asic.get("device_id")),
            "serial": text(asic.get("asic_serial")),
            "compute_units": integer(asic.get("num_compute_units")),
            "hip_id": self.hip_id,
            "partition_id": self.partition,  # the serial and PCI address name the whole GPU
        }
        memory = self.memory()
        model = text(asic.get("market_name"))
        return GPUInfo(
            index=self.index,
            model=f"AMD GPU {model}" if model and model.startswith("0x") else model or "AMD GPU",
            **GPUInfo.memory_fields(memory.total if memory else None),
            uuid=uuid,
            compute_capability=gfx,
            pci_bus_id=self.address(),
            driver_version=driver,
            extra_metrics={k: v for k, v in extras.items() if v is not None} or None,
        )

    # -- one read -----------------------------------------------------------------------------
    def begin(self, plan: ReadPlan) -> None:
        """One GPU metrics table per read, power-only reads included: power, energy, activity, clocks,
        throttle residency, engine activities and XGMI counters all come from it. The power cap and the
        fan at the health cadence, and ECC, replays and bad pages, by the primary partition."""
        started = thread_time()
        self.table.update(self.get("metrics_table", "amdsmi_get_gpu_metrics_info") or {})
        self._costs.charge(ReadKind.METRICS_TABLE, started)
        if plan.power_only or not self._health_cadence.due():
            return
        started = thread_time()
        self.power_cap = self._power_cap()
        self.fan_speed = self._fan_speed()
        if self.primary:
            self.health = read_health(self.get, self._sdk.amdsmi_wrapper)
        self._costs.charge(ReadKind.HEALTH, started)

    def _asked(self, kind: ReadKind, what: str, fn_name: str, *args: object) -> Any:
        """A getter asked where the device has no metrics table this read (:meth:`get`), charged as
        ``kind``."""
        started = thread_time()
        answer = self.get(what, fn_name, *args)
        self._costs.charge(kind, started)
        return answer

    # -- the values ---------------------------------------------------------------------------
    def memory(self) -> MemoryUsage | None:
        """VRAM total, used and free, bytes (amdsmi: MB)."""
        started = thread_time()
        vram = self.get("memory", "amdsmi_get_gpu_vram_usage")
        self._costs.charge(ReadKind.MEMORY, started)
        if vram is None:
            return None
        total, used = number(vram.get("vram_total")), number(vram.get("vram_used"))
        if total is None or used is None:
            return None
        total_bytes, used_bytes = int(total) * 2**20, int(used) * 2**20  # MB (MiB) → bytes
        return MemoryUsage(total=total_bytes, used=used_bytes, free=total_bytes - used_bytes)

    def utilization(self) -> Utilization | None:
        """GFX and UMC activity (%): the table's ``average_*_activity``, which ``amdsmi_get_gpu_activity``
        answers as ``*_activity``."""
        table = self.table.fields
        if table:
            gfx, umc = number(table.get("average_gfx_activity")), number(table.get("average_umc_activity"))
        else:
            activity = self._asked(ReadKind.UTILIZATION, "utilization", "amdsmi_get_gpu_activity") or {}
            gfx, umc = number(activity.get("gfx_activity")), number(activity.get("umc_activity"))
        if gfx is None and umc is None:
            return None
        return Utilization(
            compute=gfx / 100 if gfx is not None else None, memory=umc / 100 if umc is not None else None
        )

    def temperatures(self) -> dict[str, float]:
        """Edge, junction and memory sensors, °C."""
        temperatures = {}
        started = thread_time()
        for sensor, (kind, metric) in self._sensors.temperatures.items():
            # °C, although amdsmi.h calls the value millidegrees.
            celsius = number(self.get(f"temp_{sensor}", "amdsmi_get_temp_metric", kind, metric))
            if celsius is not None:
                temperatures[sensor] = celsius
        self._costs.charge(ReadKind.TEMPERATURES, started)
        return temperatures

    def power(self) -> float | None:
        """Watts: ``current_socket_power`` on MI300 and newer, ``average_socket_power`` before; the
        field a GPU does not fill is "N/A", all ones or 0."""
        info = self.table.fields or self._asked(ReadKind.POWER, "power", "amdsmi_get_power_info")
        if not info:
            return None
        return next((w for key in _POWER_FIELDS if (w := number(info.get(key)))), None)

    def power_limit(self) -> float | None:
        """The power cap, W, as last read at the health cadence."""
        return self.power_cap

    def _power_cap(self) -> float | None:
        cap = self.get("power_cap", "amdsmi_get_power_cap_info")
        value = number(cap.get("power_cap")) if cap else None
        if not value:
            return None
        return value / 1e6 if value >= _POWER_CAP_MICROWATTS_MIN else value

    def energy(self) -> float | None:
        """The raw 64-bit accumulator in J; the sampler handles resets. The table counts 2^-16 J ticks;
        ``amdsmi_get_energy_count`` reports their resolution rounded to 15.3 µJ."""
        table = self.table.fields
        if table:
            ticks = number(table.get("energy_accumulator"))
            return ticks * _ENERGY_TICK_UJ / 1e6 if ticks is not None else None
        count = self._asked(ReadKind.ENERGY, "energy", "amdsmi_get_energy_count")
        if count is None:
            return None
        ticks = number(count.get("energy_accumulator", count.get("power")))  # "power" before ROCm 6.1
        resolution = number(count.get("counter_resolution"))
        if ticks is None or not resolution:
            return None
        if abs(resolution - _ROUNDED_RESOLUTION_UJ) < 1e-3:  # a float32 15.3
            resolution = _ENERGY_TICK_UJ
        return ticks * resolution / 1e6

    def clocks(self) -> dict[str, float]:
        """GFX and memory clocks (MHz): the table's ``current_gfxclk`` and ``current_uclk``, which
        ``amdsmi_get_clock_info`` answers as ``clk``."""
        table = self.table.fields
        clocks = {}
        for clock, kind in self._sensors.clocks.items():
            if table:
                mhz = number(table.get(_TABLE_CLOCKS[clock]))
            else:
                info = self._asked(ReadKind.CLOCKS, f"clock_{clock}", "amdsmi_get_clock_info", kind)
                mhz = number(info.get("clk")) if info else None
            if mhz is not None:
                clocks[clock] = mhz * 1e6
        return clocks

    def throttle(self) -> dict[str, bool]:
        """The reasons the metrics table's residency accumulators count, by whether each moved."""
        return throttle_states(self.table.supported_throttle_reasons(), self.table.throttle_reasons())

    def throttle_counters(self) -> dict[str, float]:
        """Seconds in each throttle reason, from the residency accumulators."""
        return self.table.throttle_counters()

    def gauges(self) -> dict[str, LabelledValues]:
        """Media engine activity, the fan's speed ratio and pages pending retirement."""
        return reported(
            {
                "warptd_device_engine_active_ratio": self.table.engine_activity(),
                "warptd_device_fan_speed_ratio": one(self.fan_speed, str(_FAN_SENSOR)),
                "warptd_device_retired_pages_pending": one(self.health.retirement_pending),
            }
        )

    def _fan_speed(self) -> float | None:
        """Fan speed over its maximum, both on the PWM scale (0..255); the maximum is read once."""
        if self._fan_max is None:
            top = number(self.get("fan_speed_max", "amdsmi_get_gpu_fan_speed_max", _FAN_SENSOR))
            if not top:
                return None  # no fan (NOT_SUPPORTED, remembered by call) or failing now: asked again
            self._fan_max = top
        speed = number(self.get("fan_speed", "amdsmi_get_gpu_fan_speed", _FAN_SENSOR))
        return speed / self._fan_max if speed is not None else None

    def counters(self) -> dict[str, LabelledValues]:
        """ECC, replays and XGMI bytes: socket-wide, so on the primary partition only."""
        if not self.primary:
            return {}  # socket-wide counters: the primary partition reports them, once
        return reported({**self.health.counters, nvidia.NVLINK_LINK_BYTES.name: self.table.xgmi_bytes()})
