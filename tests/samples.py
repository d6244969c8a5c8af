"""Device samples as the sampler hands them on, built for tests: one GPU's at a power and energy, several
GPUs' at once, a GPU's with what NVIDIA GPM gives, and a recorder fed with those."""

from __future__ import annotations

from warptd.models import DeviceReading, Utilization
from warptd.recording.recorder import Recorder, Target
from warptd.sampling.snapshot import DeviceSample


def sample(
    watts: float | None, energy: float | None, *, counter: bool = True, util: float = 0.5
) -> DeviceSample:
    """GPU 0 at ``watts`` with ``energy`` counted (its own counter unless ``counter`` is off), its
    temperature and power-cap throttling following the power."""
    reading = DeviceReading(
        index=0,
        power_watts=watts,
        energy_counter_joules=energy if counter else None,
        utilization=Utilization(compute=util),
        temperatures_celsius={"gpu": 40 + (watts or 0) / 10, "memory": 30},
        throttle_active={"sw_power_cap": (watts or 0) > 250},
    )
    return DeviceSample(
        reading,
        energy_joules=energy,
        throttle_seconds={"sw_power_cap": (watts or 0) / 100},
        energy_counted_joules=energy if counter else None,
    )


def telemetry_sample(  # noqa: PLR0917 - a compact fixture builder
    t_power: float | None,
    energy: float | None,
    counter: float | None,
    util: float,
    temp: float,
    throttle: dict[str, float] | None = None,
    active: dict[str, bool] | None = None,
) -> DeviceSample:
    """GPU 0 with each value given, as the stress telemetry reads it."""
    reading = DeviceReading(
        index=0,
        power_watts=t_power,
        energy_counter_joules=counter,
        utilization=Utilization(compute=util),
        temperatures_celsius={"gpu": temp},
        throttle_active=active or {},
    )
    return DeviceSample(reading=reading, energy_joules=energy, throttle_seconds=throttle or {})


def gpu_samples(count: int, energy: float) -> list[DeviceSample]:
    """``count`` busy GPUs at 300 W, each at ``energy`` joules."""
    return [
        DeviceSample(
            DeviceReading(index=i, uuid=f"GPU-{i}", power_watts=300.0, utilization=Utilization(compute=0.9)),
            energy_joules=energy,
        )
        for i in range(count)
    ]


GPUS = [Target("device", "nvidia", str(i)) for i in range(8)]


PIPES = ("tensor", "fp64", "fp32", "fp16", "int")


CLOCKS = {"graphics": 1.41e9, "sm": 1.41e9, "memory": 2.6e9, "video": 1.2e9}


def gpm_sample(index: int, n: int) -> DeviceSample:
    """A sample with what NVIDIA GPM gives: 4 clocks, 8 activity ratios, throttle reasons."""
    gauges = {f"warptd_device_{k}_ratio": {(): 0.25 + n % 3 / 10} for k in ("sm_active", "sm_occupancy")}
    gauges["warptd_device_dram_bandwidth_ratio"] = {(): 0.125}
    gauges["warptd_device_pipe_active_ratio"] = {(p,): 0.1 * (i + 1) for i, p in enumerate(PIPES)}
    reading = DeviceReading(
        index=index,
        power_watts=100.0 + n % 7,
        energy_counter_joules=float(n),
        utilization=Utilization(compute=0.5),
        temperatures_celsius={"gpu": 50.0 + n % 5},
        clocks_hertz=CLOCKS,
        gauges=gauges,
        throttle_active={"sw_power_cap": n % 2 == 1, "hw_slowdown": False},
    )
    return DeviceSample(reading, energy_joules=float(n), throttle_seconds={"sw_power_cap": n / 20})


def feed(recorder: Recorder, samples: int, start: int = 0) -> None:
    """``samples`` GPM samples of each of the recorder's GPUs, a tenth of a second apart."""
    for n in range(start, start + samples):
        devices = [gpm_sample(i, n) for i in range(len(recorder.targets))]
        recorder.on_sample("nvidia", devices, None, at=1000.0 + n / 10)
