"""Tenstorrent Wormhole and Blackhole chips through pyluwen, the library behind tt-smi.

pyluwen hands out one snapshot of raw 32-bit telemetry words per chip (``get_telemetry()``),
in the firmware's own encodings, decoded here once per sample. It has no energy counter (the
sampler integrates power), no memory or utilization reading, and no PyTorch device.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from warptd.backends.base import AcceleratorBackend
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import install_command
from warptd.models import DeviceReading, GPUInfo, MemoryUsage, Utilization, pci_address
from warptd.sysfs import read_text

if TYPE_CHECKING:
    from warptd.config import Settings

T = TypeVar("T")
_ALL_ONES = 0xFFFF_FFFF
#: A chip's telemetry outside a read (read at every ask), and inside one before its first ask.
_OUTSIDE_READ, _UNREAD = object(), object()
_ARCHES = {"bh": "Blackhole", "wh": "Wormhole", "gs": "Grayskull"}  # PciChip.as_<short>()
# Firmware version words and their byte layouts, as tt-smi decodes them (tt_tools_common hex_to_semver*).
_BYTES4 = ((24, 0xFF), (16, 0xFF), (8, 0xFF), (0, 0xFF))
_BYTES3 = ((16, 0xFF), (8, 0xFF), (0, 0xFF))
_ETH = ((16, 0xFF), (12, 0xF), (0, 0xFFF))
_FIRMWARE = {
    "fw_bundle_version": ("fw_bundle_version", _BYTES4),
    "arc_fw_version": ("arc0_fw_version", _BYTES3),
    "eth_fw_version": ("eth_fw_version", _ETH),
    "m3_app_fw_version": ("m3_app_fw_version", _BYTES4),
    "m3_bl_fw_version": ("m3_bl_fw_version", _BYTES4),
    "tt_flash_version": ("tt_flash_version", _BYTES4),
}
_BLACKHOLE_FIRMWARE = {"arc_fw_version": _BYTES4}  # the CMFW version: four bytes
# Messages of pyluwen's plain ``Exception``s (it exports no exception types), by error kind.
_MESSAGES = (
    (ErrorKind.NOT_SUPPORTED, ("unsupported fw version", "not implemented", "not supported")),
    (ErrorKind.PERMISSION, ("permission denied", "operation not permitted")),
    (ErrorKind.TIMEOUT, ("timed out", "timeout", "arc is hung")),
    (
        ErrorKind.DEVICE_LOST,
        ("no such device", "os error 19", "no such file", "0xffffffff", "failed to open"),
    ),
)


class ChipGoneError(Exception):
    """Telemetry read back as all-ones (PCIe reads of a vanished chip) or names another board."""


class SdkPanicError(RuntimeError):
    """A Rust panic inside pyluwen: ``pyo3_runtime.PanicException`` derives from BaseException."""


def _unpanic(fn: Callable[..., T], *args: object) -> T:
    """Call into pyluwen, turning a panic into an ordinary exception that the guard counts."""
    try:
        return fn(*args)
    except (Exception, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        raise SdkPanicError(str(exc)) from exc


@dataclass(slots=True)
class _Chip:
    """One detected chip: what is known about it once, at detection, and the telemetry of a read."""

    handle: Any  # pyluwen.PciChip
    arch: str  # "Wormhole", "Blackhole", "Grayskull" or "" (unknown to this module)
    remote: bool  # reached over Ethernet through another chip (the second ASIC of an n300)
    board_id: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    pci_interface: int | None = None
    #: The telemetry of the read in progress, read once per read (:meth:`TenstorrentBackend._one_read`).
    telemetry: Any = _OUTSIDE_READ


def _word(value: object) -> int | None:
    """A telemetry word, or None where the firmware left it unset (None, 0 or all-ones)."""
    return value if isinstance(value, int) and value not in (0, _ALL_ONES) else None


def _low(value: object) -> int | None:
    """The reading in the low half of a word whose high half holds a limit (Wormhole)."""
    word = _word(value)
    return None if word is None else _word(word & 0xFFFF)


def _board_id(telemetry: Any) -> int | None:
    """The board's serial number from its two telemetry words (tt-smi's board id)."""
    high, low = _word(telemetry.board_id_high), telemetry.board_id_low
    return None if high is None or not isinstance(low, int) else high << 32 | low


def _reads_all_ones(telemetry: Any) -> bool:
    """PCIe reads of a device that left the bus return all-ones: so does its telemetry."""
    return telemetry.board_id_high == _ALL_ONES and telemetry.board_id_low == _ALL_ONES


def asic_celsius(arch: str, raw: object) -> float | None:
    """Blackhole: signed 16.16 fixed point. Wormhole and Grayskull: 1/16 °C in the low half."""
    word = _word(raw)
    if word is None or not arch:
        return None
    if arch == "Blackhole":
        return (word - (1 << 32) if word & 0x8000_0000 else word) / 65536
    return (word & 0xFFFF) / 16


def limit(arch: str, telemetry: Any, word: str) -> int | None:
    """The ``tdp`` (W), ``tdc`` (A) or ``aiclk`` (MHz) limit: its own word on Blackhole, the high half
    of the reading's word on Wormhole and Grayskull."""
    if arch == "Blackhole":  # the *_limit_max words came with pyluwen 0.8
        return _word(getattr(telemetry, f"{word}_limit_max", None))
    raw = _word(getattr(telemetry, word))
    return None if raw is None else _word(raw >> 16)


def _version(raw: object, layout: tuple[tuple[int, int], ...]) -> str | None:
    word = _word(raw)
    if word is None or (layout is _ETH and word == 0xFF_FFFF):
        return None
    return ".".join(str(word >> shift & mask) for shift, mask in layout)


class TenstorrentBackend(AcceleratorBackend):
    """Every chip ``pyluwen.detect_chips()`` finds, local (PCIe) and remote (Ethernet) alike."""

    name: ClassVar[str] = "tenstorrent"
    source: ClassVar[str] = "pyluwen"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        try:
            import pyluwen
        except ImportError as exc:
            raise BackendUnavailableError(
                f"pyluwen is not installed: {install_command('tenstorrent')}"
            ) from exc
        self._luwen = pyluwen
        self._suspect = False
        self._chips = self._identify(_unpanic(pyluwen.detect_chips))
        if not self._chips:
            raise BackendUnavailableError("no Tenstorrent chip found")

    def _identify(self, handles: list[Any]) -> list[_Chip]:
        """Architecture, board, position and PCI address of each chip, read once."""
        chips, taken = [], set()
        for index, handle in enumerate(handles):
            remote = bool(self._ask(index, "remote", handle.is_remote))
            chip = _Chip(handle, self._arch(index, handle), remote)
            chips.append(chip)
            if not chip.remote:
                chip.pci_bus_id = pci_address(self._ask(index, "pci_bdf", handle.get_pci_bdf))
                chip.pci_interface = self._ask(index, "pci_interface", handle.get_pci_interface_id)
            telemetry = self._ask(index, "telemetry", handle.get_telemetry)
            if telemetry is None or _reads_all_ones(telemetry):
                continue
            chip.board_id = _board_id(telemetry)
            if chip.board_id is not None:  # uuid: the board's serial number and the chip's place on it
                position = _word(getattr(telemetry, "asic_location", None)) or 0  # pyluwen 0.8+
                while (chip.board_id, position) in taken:  # both chips of an n300 may say 0
                    position += 1
                taken.add((chip.board_id, position))
                chip.uuid = f"{chip.board_id:016x}-{position}"
        return chips

    def _ask(self, index: int, what: str, method: Callable[[], T]) -> T | None:
        """One guarded pyluwen call for chip ``index``."""
        return self.call(index, what, _unpanic, method)

    def _arch(self, index: int, handle: Any) -> str:
        for short, arch in _ARCHES.items():
            as_arch = getattr(handle, f"as_{short}", None)  # pyluwen 0.10 dropped as_gs with Grayskull
            if as_arch is not None and self._ask(index, f"as_{short}", as_arch) is not None:
                return arch
        return ""

    def classify_error(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, ChipGoneError):
            return ErrorKind.DEVICE_LOST
        if type(exc) is not Exception and not isinstance(exc, OSError | RuntimeError):
            return super().classify_error(exc)  # a TypeError or AttributeError is our bug, not the SDK's
        message = str(exc).lower()
        kind = next((kind for kind, words in _MESSAGES if any(w in message for w in words)), None)
        return kind or ErrorKind.SDK_ERROR

    def on_error(self, key: Hashable, kind: ErrorKind, exc: BaseException) -> None:
        if kind is ErrorKind.DEVICE_LOST:
            self._suspect = True
        super().on_error(key, kind, exc)

    # -- one telemetry read per sample --------------------------------------------------------
    def _read(self, index: int) -> Any:
        """The chip's telemetry; a chip that left the bus or was replaced by another board is lost."""
        chip = self._chips[index]
        telemetry = _unpanic(chip.handle.get_telemetry)
        if _reads_all_ones(telemetry):
            raise ChipGoneError(f"chip {index} ({chip.uuid}) reads back all-ones")
        board = _board_id(telemetry)
        if board is not None and chip.board_id is not None and board != chip.board_id:
            raise ChipGoneError(f"chip {index} is now board {board:016x}, not {chip.uuid}")
        return telemetry

    def _telemetry(self, index: int) -> Any:
        """Within one sample the telemetry is read once; outside a sample, every time."""
        chip = self._chips[index]
        if chip.telemetry is not _UNREAD and chip.telemetry is not _OUTSIDE_READ:
            return chip.telemetry
        telemetry = self.call(index, "telemetry", self._read, index)
        if chip.telemetry is _UNREAD:
            chip.telemetry = telemetry
        return telemetry

    @contextmanager
    def _one_read(self, index: int) -> Iterator[None]:
        chip = self._chips[index]
        chip.telemetry = _UNREAD
        try:
            yield
        finally:
            chip.telemetry = _OUTSIDE_READ

    def read_device(self, index: int) -> DeviceReading:
        with self._one_read(index):
            return super().read_device(index)

    def read_power(self, index: int) -> tuple[float | None, float | None] | None:
        with self._one_read(index):
            return super().read_power(index)

    def needs_rediscovery(self) -> bool:
        return self._suspect

    def rediscover(self) -> bool:
        """Detect the chips again; stay suspect (retry later) while fewer are found than before."""
        handles = self.guarded("detect", _unpanic, self._luwen.detect_chips)
        if handles is None:
            return False
        before = len(self._chips)
        self._unsupported.clear()
        self._lost_now.clear()
        self._chips = self._identify(handles)
        self._suspect = len(self._chips) < before
        return True

    # -- discovery and identity ---------------------------------------------------------------
    def is_available(self) -> bool:
        return self.get_device_count() > 0

    def get_device_count(self) -> int:
        return len(self._chips)

    def get_driver_version(self) -> str | None:
        """tt-kmd's version, as tt-smi reads it."""
        try:
            return read_text(self.settings.sysfs / "module" / "tenstorrent" / "version") or None
        except OSError:
            return None

    def device_identity(self, index: int) -> str | None:
        return self._chips[index].uuid

    def list_devices(self) -> list[GPUInfo]:
        driver = self.get_driver_version()
        return [
            GPUInfo(
                index=index,
                model=f"Tenstorrent {chip.arch or 'chip'}",
                uuid=chip.uuid,
                pci_bus_id=chip.pci_bus_id,
                driver_version=driver,
                extra_metrics=self._extras(index, chip),
                **GPUInfo.memory_fields(None),  # pyluwen reports no GDDR size or usage
            )
            for index, chip in enumerate(self._chips)
        ]

    def _extras(self, index: int, chip: _Chip) -> dict[str, Any]:
        """Static facts: board, firmware versions, current and clock limits (live current and
        voltage have no series in warptd's metric set and change every sample, so are left out)."""
        extras: dict[str, Any] = {"arch": chip.arch.lower() or None, "remote": chip.remote}
        if chip.board_id is not None:
            extras["board_id"] = f"{chip.board_id:016x}"
        if chip.pci_interface is not None:
            extras["pci_interface_id"] = chip.pci_interface
        telemetry = self._telemetry(index)
        if telemetry is None:
            return extras
        for key, (attr, default) in _FIRMWARE.items():
            layout = _BLACKHOLE_FIRMWARE.get(key, default) if chip.arch == "Blackhole" else default
            if (version := _version(getattr(telemetry, attr), layout)) is not None:
                extras[key] = version
        if (amps := limit(chip.arch, telemetry, "tdc")) is not None:
            extras["tdc_limit_amps"] = amps
        if (mhz := limit(chip.arch, telemetry, "aiclk")) is not None:
            extras["aiclk_max_hz"] = mhz * 1e6
        return extras

    def get_pytorch_device_string(self, device_id: int) -> str:
        """``tt:N``, the design document's example name. No PyTorch build has such a device (torch-ttnn
        is a ``torch.compile`` backend, not a device), so torch rejects it and the built-in matmul and
        memory workloads cannot run on a Tenstorrent chip: that needs a Path-B StressTest over TT-NN."""
        return f"tt:{device_id}"

    # -- telemetry ----------------------------------------------------------------------------
    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        return None

    def get_utilization(self, index: int) -> Utilization | None:
        return None

    def get_temperatures(self, index: int) -> dict[str, float]:
        telemetry = self._telemetry(index)
        arch = self._chips[index].arch
        celsius = asic_celsius(arch, telemetry.asic_temperature) if telemetry is not None else None
        return {"asic": celsius} if celsius is not None else {}

    def get_power_usage(self, index: int) -> float | None:
        telemetry = self._telemetry(index)
        watts = _low(telemetry.tdp) if telemetry is not None else None
        return float(watts) if watts is not None else None

    def get_power_limit(self, index: int) -> float | None:
        telemetry = self._telemetry(index)
        watts = limit(self._chips[index].arch, telemetry, "tdp") if telemetry is not None else None
        return float(watts) if watts is not None else None

    def get_clocks(self, index: int) -> dict[str, float]:
        telemetry = self._telemetry(index)
        mhz = _low(telemetry.aiclk) if telemetry is not None else None
        return {"ai": mhz * 1e6} if mhz is not None else {}

    def shutdown(self) -> None:
        self._chips = []  # dropping the PciChip objects closes /dev/tenstorrent/N
