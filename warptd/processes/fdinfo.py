"""A DRM client's engine time and memory from ``/proc/PID/fdinfo/FD``, as the kernel's DRM client
usage stats specify them (Documentation/gpu/drm-usage-stats.rst; amdgpu, i915, xe and others).

Keys are ``drm-``-prefixed, one ``key: value`` a line, numbers with an optional unit:

- ``drm-engine-<name>: <uint> ns``: time the engine spent busy on this client; it may read lower than
  before for a while, and the reader is to stay with the larger value until it catches up;
  ``drm-engine-capacity-<name>``: the engines behind one name (1 where absent);
- ``drm-cycles-<name>`` over ``drm-total-cycles-<name>`` (xe): busy cycles over the GPU's timestamp;
- ``drm-resident-<region>`` (alias ``drm-memory-<region>``, deprecated) and ``drm-total-<region>``:
  bytes, ``KiB`` or ``MiB``; only device-local regions count where there are any (docs/workloads.md);
- ``drm-client-id`` (with ``drm-pdev`` where unique per device only): one ``struct drm_file``, so a
  file shared by dup'd descriptors or processes is counted once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from warptd.processes.engine_time import EngineCount

_SIZE_UNITS = {"": 1, "KiB": 1024, "MiB": 1024 * 1024}  # the spec's only units for memory
#: The regions in the device's own memory (amdgpu ``vram``, xe ``vram0``, i915 ``local0``); the others
#: (amdgpu ``gtt``/``cpu``, i915 ``system0``, xe ``gtt``) are host memory the device maps.
_DEVICE_LOCAL = ("vram", "local")
ClientKey = tuple[str, str]  # (drm-pdev, drm-client-id), or ("", "<pid>/<fd>") without an id


@dataclass(frozen=True)
class DrmClient:
    """What one DRM file's fdinfo says about its client."""

    driver: str
    pdev: str = ""
    client_id: str | None = None
    engine_ns: dict[str, int] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    cycles: dict[str, int] = field(default_factory=dict)
    total_cycles: dict[str, int] = field(default_factory=dict)
    #: Bytes held (resident where told, else the total created) in the device-local regions where the
    #: file reports any, else in every region (an integrated GPU has system memory only); None: not told.
    memory_bytes: int | None = None

    def count(self) -> EngineCount:
        """Its busy counters for :class:`~warptd.processes.engine_time.EngineTime`: engine time where
        told, else busy cycles over the GPU's timestamp cycles (xe)."""
        if self.engine_ns:
            return EngineCount(self.engine_ns, capacity=self.capacity)
        return EngineCount(self.cycles, capacity=self.capacity, ticks=self.total_cycles)


def parse_fdinfo(text: str) -> DrmClient | None:
    """The DRM client an fdinfo file describes, or None for a file of another kind (no ``drm-driver``)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.startswith("drm-"):
            values[key.strip()] = value.strip()
    driver = values.get("drm-driver")
    if driver is None:
        return None
    engines, capacity, cycles, total_cycles = {}, {}, {}, {}
    resident: dict[str, int] = {}
    created: dict[str, int] = {}
    for key, value in values.items():
        for prefix, into, units in (
            ("drm-engine-capacity-", capacity, None),
            ("drm-engine-", engines, "ns"),
            ("drm-total-cycles-", total_cycles, None),
            ("drm-cycles-", cycles, None),
            ("drm-resident-", resident, "size"),
            ("drm-memory-", resident, "size"),  # the deprecated alias of drm-resident-
            ("drm-total-", created, "size"),
        ):
            if key.startswith(prefix):
                number = _number(value, units)
                if number is not None:
                    into[key.removeprefix(prefix)] = number
                break
    memory = resident or created
    local = {region: size for region, size in memory.items() if region.startswith(_DEVICE_LOCAL)}
    return DrmClient(
        driver=driver,
        pdev=values.get("drm-pdev", ""),
        client_id=values.get("drm-client-id"),
        engine_ns=engines,
        capacity={name: count for name, count in capacity.items() if count > 0},  # zero is not allowed
        cycles=cycles,
        total_cycles=total_cycles,
        memory_bytes=sum((local or memory).values()) if memory else None,
    )


def _number(value: str, units: str | None) -> int | None:
    """``<uint>`` with the unit the key allows: ``ns`` (optional) for engine time, bytes/KiB/MiB for
    memory, none for counts; anything else is not a value of the spec."""
    number, _, unit = value.partition(" ")
    unit = unit.strip()
    if not number.isdigit():
        return None
    if units == "size":
        scale = _SIZE_UNITS.get(unit)
        return None if scale is None else int(number) * scale
    if unit and unit != units:
        return None
    return int(number)
