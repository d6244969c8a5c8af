"""One Tenstorrent chip as a device object: pyluwen's telemetry (``get_telemetry()``: raw 32-bit words
in the firmware's own encodings) read once per read and decoded as tt-smi decodes them, into W, °C and
Hz. pyluwen has no energy counter (the sampler integrates power), no memory or utilization reading."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from warptd.backends.device import Call, ReadPlan, ValueDevice
from warptd.models import DeviceReading

T = TypeVar("T")
ALL_ONES = 0xFFFF_FFFF
ARCHES = {"bh": "Blackhole", "wh": "Wormhole", "gs": "Grayskull"}  # PciChip.as_<short>()
# Firmware version words and their byte layouts, as tt-smi decodes them (tt_tools_common hex_to_semver*).
_BYTES4 = ((24, 0xFF), (16, 0xFF), (8, 0xFF), (0, 0xFF))
_BYTES3 = ((16, 0xFF), (8, 0xFF), (0, 0xFF))
_ETH = ((16, 0xFF), (12, 0xF), (0, 0xFFF))
FIRMWARE = {
    "fw_bundle_version": ("fw_bundle_version", _BYTES4),
    "arc_fw_version": ("arc0_fw_version", _BYTES3),
    "eth_fw_version": ("eth_fw_version", _ETH),
    "m3_app_fw_version": ("m3_app_fw_version", _BYTES4),
    "m3_bl_fw_version": ("m3_bl_fw_version", _BYTES4),
    "tt_flash_version": ("tt_flash_version", _BYTES4),
}
BLACKHOLE_FIRMWARE = {"arc_fw_version": _BYTES4}  # the CMFW version: four bytes


class SdkPanicError(RuntimeError):
    """A Rust panic inside pyluwen: ``pyo3_runtime.PanicException`` derives from BaseException."""


def unpanic(fn: Callable[..., T], *args: object) -> T:
    """Call into pyluwen, turning a panic into an ordinary exception that the guard counts."""
    try:
        return fn(*args)
    except (Exception, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        raise SdkPanicError(str(exc)) from exc


def word(value: object) -> int | None:
    """A telemetry word, or None where the firmware left it unset (None, 0 or all-ones)."""
    return value if isinstance(value, int) and value not in (0, ALL_ONES) else None


def low(value: object) -> int | None:
    """The reading in the low half of a word whose high half holds a limit (Wormhole)."""
    found = word(value)
    return None if found is None else word(found & 0xFFFF)


def board_id(telemetry: Any) -> int | None:
    """The board's serial number from its two telemetry words (tt-smi's board id)."""
    high, low_word = word(telemetry.board_id_high), telemetry.board_id_low
    return None if high is None or not isinstance(low_word, int) else high << 32 | low_word


def reads_all_ones(telemetry: Any) -> bool:
    """PCIe reads of a device that left the bus return all-ones: so does its telemetry."""
    return telemetry.board_id_high == ALL_ONES and telemetry.board_id_low == ALL_ONES


def asic_celsius(arch: str, raw: object) -> float | None:
    """Blackhole: signed 16.16 fixed point. Wormhole and Grayskull: 1/16 °C in the low half."""
    found = word(raw)
    if found is None or not arch:
        return None
    if arch == "Blackhole":
        return (found - (1 << 32) if found & 0x8000_0000 else found) / 65536
    return (found & 0xFFFF) / 16


def limit(arch: str, telemetry: Any, name: str) -> int | None:
    """The ``tdp`` (W), ``tdc`` (A) or ``aiclk`` (MHz) limit: its own word on Blackhole, the high half
    of the reading's word on Wormhole and Grayskull."""
    if arch == "Blackhole":  # the *_limit_max words came with pyluwen 0.8
        return word(getattr(telemetry, f"{name}_limit_max", None))
    raw = word(getattr(telemetry, name))
    return None if raw is None else word(raw >> 16)


def versions(arch: str, telemetry: Any) -> dict[str, str]:
    """The firmware versions the telemetry holds, by name."""
    found = {}
    for key, (attr, default) in FIRMWARE.items():
        layout = BLACKHOLE_FIRMWARE.get(key, default) if arch == "Blackhole" else default
        if (version := _version(getattr(telemetry, attr), layout)) is not None:
            found[key] = version
    return found


def _version(raw: object, layout: tuple[tuple[int, int], ...]) -> str | None:
    found = word(raw)
    if found is None or (layout is _ETH and found == 0xFF_FFFF):
        return None
    return ".".join(str(found >> shift & mask) for shift, mask in layout)


#: A chip's telemetry outside a read (read at every ask), and inside one before its first ask.
_OUTSIDE_READ, _UNREAD = object(), object()


class ChipGoneError(Exception):
    """Telemetry read back as all-ones (PCIe reads of a vanished chip) or names another board."""


@dataclass(slots=True)
class Identity:
    """What is known about a chip once, at detection."""

    arch: str  # "Wormhole", "Blackhole", "Grayskull" or "" (unknown to this module)
    remote: bool  # reached over Ethernet through another chip (the second ASIC of an n300)
    board_id: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    pci_interface: int | None = None


class TtChip(ValueDevice):
    """One detected chip (``handle``: a pyluwen ``PciChip``), read through the backend's guarded ``call``."""

    def __init__(self, index: int, handle: Any, identity: Identity, call: Call) -> None:
        super().__init__(index)
        self.handle, self.identity, self._call = handle, identity, call
        self._telemetry: Any = _OUTSIDE_READ  # the telemetry of the read in progress

    def read(self, plan: ReadPlan) -> DeviceReading:
        """The values of one telemetry read."""
        self._telemetry = _UNREAD
        try:
            return super().read(plan)
        finally:
            self._telemetry = _OUTSIDE_READ

    def telemetry(self) -> Any:
        """The chip's telemetry: once within a read, at every ask outside one; None where it failed."""
        if self._telemetry is not _UNREAD and self._telemetry is not _OUTSIDE_READ:
            return self._telemetry
        telemetry = self._call(self.index, "telemetry", self._read)
        if self._telemetry is _UNREAD:
            self._telemetry = telemetry
        return telemetry

    def _read(self) -> Any:
        """A chip that left the bus or was replaced by another board is lost."""
        telemetry = unpanic(self.handle.get_telemetry)
        if reads_all_ones(telemetry):
            raise ChipGoneError(f"chip {self.index} ({self.identity.uuid}) reads back all-ones")
        board, known = board_id(telemetry), self.identity.board_id
        if board is not None and known is not None and board != known:
            raise ChipGoneError(f"chip {self.index} is now board {board:016x}, not {self.identity.uuid}")
        return telemetry

    def temperatures(self) -> dict[str, float]:
        """The ASIC's temperature, °C."""
        telemetry = self.telemetry()
        celsius = (
            asic_celsius(self.identity.arch, telemetry.asic_temperature) if telemetry is not None else None
        )
        return {"asic": celsius} if celsius is not None else {}

    def power(self) -> float | None:
        """The TDP word's reading, W."""
        telemetry = self.telemetry()
        watts = low(telemetry.tdp) if telemetry is not None else None
        return float(watts) if watts is not None else None

    def power_limit(self) -> float | None:
        """The TDP limit, W."""
        telemetry = self.telemetry()
        watts = limit(self.identity.arch, telemetry, "tdp") if telemetry is not None else None
        return float(watts) if watts is not None else None

    def clocks(self) -> dict[str, float]:
        """The AI clock, Hz (telemetry: MHz)."""
        telemetry = self.telemetry()
        mhz = low(telemetry.aiclk) if telemetry is not None else None
        return {"ai": mhz * 1e6} if mhz is not None else {}
