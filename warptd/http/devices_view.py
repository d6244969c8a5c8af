"""The ``GET /devices`` answer: each backend's device identities and latest readings, from the snapshot."""

from __future__ import annotations

from warptd.models import BackendKind, DeviceReading, GPUInfo, WireModel
from warptd.sampling.snapshot import Snapshot


class LatestReading(WireModel):
    """The last sample of one device as the samplers recorded it (no SDK call); null = unsupported."""

    power_watts: float | None = None
    #: The primary sensor's (NVIDIA: ``gpu``, the core, as nvidia-smi shows), named by ``temperature_sensor``.
    temperature_celsius: float | None = None
    temperature_sensor: str | None = None
    temperatures_celsius: dict[str, float] = {}  # every sensor
    utilization_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None


class DeviceView(GPUInfo):
    """A device's identity, whether it answers, and its latest reading (null while its backend is stale)."""

    up: bool | None = None
    latest: LatestReading | None = None


class BackendView(WireModel):
    backend: str
    kind: BackendKind
    up: bool
    devices: list[DeviceView] | None = None  # accelerator backends
    domains: list[str] | None = None  # power backends


class DevicesView(WireModel):
    backends: list[BackendView]


def latest(reading: DeviceReading) -> LatestReading:
    sensor, celsius = reading.primary_temperature or (None, None)
    memory, utilization = reading.memory, reading.utilization
    return LatestReading(
        power_watts=reading.power_watts,
        temperature_celsius=celsius,
        temperature_sensor=sensor,
        temperatures_celsius=dict(reading.temperatures_celsius),
        utilization_ratio=utilization.compute if utilization is not None else None,
        memory_used_bytes=memory.used if memory is not None else None,
        memory_total_bytes=memory.total if memory is not None else None,
    )


def devices_view(snapshot: Snapshot) -> DevicesView:
    """Every loaded backend with its devices (accelerators) or power domains."""
    backends = []
    for state in snapshot.states():
        fresh = snapshot.is_fresh(state)
        if not state.has_devices:
            domains = [d.domain for d in state.domains]
            backends.append(BackendView(backend=state.name, kind=state.kind, up=fresh, domains=domains))
            continue
        readings = {s.reading.index: s.reading for s in state.devices}
        devices = []
        for info in state.devices_info:
            reading = readings.get(info.index)
            live = reading is not None and reading.up and fresh
            devices.append(
                DeviceView(
                    **info.model_dump(),
                    up=reading.up if reading is not None else None,
                    latest=latest(reading) if live and reading is not None else None,
                )
            )
        backends.append(BackendView(backend=state.name, kind=state.kind, up=fresh, devices=devices))
    return DevicesView(backends=backends)
