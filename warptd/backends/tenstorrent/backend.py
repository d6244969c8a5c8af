"""The ``tenstorrent`` backend: every chip ``pyluwen.detect_chips()`` finds, local (PCIe) and remote
(Ethernet) alike, one :class:`~warptd.backends.tenstorrent.chip.TtChip` each. It has no PyTorch device."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from warptd.backends.base import AcceleratorBackend
from warptd.backends.tenstorrent.chip import (
    ARCHES,
    ChipGoneError,
    Identity,
    TtChip,
    board_id,
    limit,
    reads_all_ones,
    unpanic,
    versions,
    word,
)
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import install_command
from warptd.models import GPUInfo, pci_address
from warptd.sysfs import read_text

if TYPE_CHECKING:
    from warptd.config import Settings

T = TypeVar("T")
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


class TenstorrentBackend(AcceleratorBackend):
    """Every chip ``pyluwen.detect_chips()`` finds, local (PCIe) and remote (Ethernet) alike."""

    name: ClassVar[str] = "tenstorrent"
    source: ClassVar[str] = "pyluwen"
    sdk: ClassVar[str | None] = "pyluwen"

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
        self.devices: list[TtChip] = self._identify(unpanic(pyluwen.detect_chips))
        if not self.devices:
            raise BackendUnavailableError("no Tenstorrent chip found")

    def _identify(self, handles: list[Any]) -> list[TtChip]:
        """Architecture, board, position and PCI address of each chip, read once."""
        chips, taken = [], set()
        for index, handle in enumerate(handles):
            remote = bool(self._ask(index, "remote", handle.is_remote))
            identity = Identity(self._arch(index, handle), remote)
            chips.append(TtChip(index, handle, identity, self.call))
            if not identity.remote:
                identity.pci_bus_id = pci_address(self._ask(index, "pci_bdf", handle.get_pci_bdf))
                identity.pci_interface = self._ask(index, "pci_interface", handle.get_pci_interface_id)
            telemetry = self._ask(index, "telemetry", handle.get_telemetry)
            if telemetry is None or reads_all_ones(telemetry):
                continue
            identity.board_id = board_id(telemetry)
            if identity.board_id is not None:  # uuid: the board's serial number and the chip's place on it
                position = word(getattr(telemetry, "asic_location", None)) or 0  # pyluwen 0.8+
                while (identity.board_id, position) in taken:  # both chips of an n300 may say 0
                    position += 1
                taken.add((identity.board_id, position))
                identity.uuid = f"{identity.board_id:016x}-{position}"
        return chips

    def _ask(self, index: int, what: str, method: Callable[[], T]) -> T | None:
        """One guarded pyluwen call for chip ``index``."""
        return self.call(index, what, unpanic, method)

    def _arch(self, index: int, handle: Any) -> str:
        for short, arch in ARCHES.items():
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

    def needs_rediscovery(self) -> bool:
        return self._suspect

    def rediscover(self) -> bool:
        """Detect the chips again; stay suspect (retry later) while fewer are found than before."""
        handles = self.guarded("detect", unpanic, self._luwen.detect_chips)
        if handles is None:
            return False
        before = len(self.devices)
        self._unsupported.clear()
        self._lost_now.clear()
        self.devices = self._identify(handles)
        self._suspect = len(self.devices) < before
        return True

    # -- discovery and identity ---------------------------------------------------------------
    def get_driver_version(self) -> str | None:
        """tt-kmd's version, as tt-smi reads it."""
        try:
            return read_text(self.settings.sysfs / "module" / "tenstorrent" / "version") or None
        except OSError:
            return None

    def device_identity(self, index: int) -> str | None:
        return self.devices[index].identity.uuid

    def list_devices(self) -> list[GPUInfo]:
        driver = self.get_driver_version()
        return [
            GPUInfo(
                index=chip.index,
                model=f"Tenstorrent {chip.identity.arch or 'chip'}",
                uuid=chip.identity.uuid,
                pci_bus_id=chip.identity.pci_bus_id,
                driver_version=driver,
                extra_metrics=_extras(chip),
                **GPUInfo.memory_fields(None),  # pyluwen reports no GDDR size or usage
            )
            for chip in self.devices
        ]

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """``tt:N``, the design document's example name. No PyTorch build has such a device (torch-ttnn
        is a ``torch.compile`` backend, not a device), so torch rejects it and the built-in matmul and
        memory workloads cannot run on a Tenstorrent chip: that needs a Path-B StressTest over TT-NN."""
        return f"tt:{info.index}", {}

    def shutdown(self) -> None:
        self.devices = []  # dropping the PciChip objects closes /dev/tenstorrent/N


def _extras(chip: TtChip) -> dict[str, Any]:
    """Static facts: board, firmware versions, current and clock limits (live current and voltage have
    no series in warptd's metric set and change every sample, so are left out)."""
    identity = chip.identity
    extras: dict[str, Any] = {"arch": identity.arch.lower() or None, "remote": identity.remote}
    if identity.board_id is not None:
        extras["board_id"] = f"{identity.board_id:016x}"
    if identity.pci_interface is not None:
        extras["pci_interface_id"] = identity.pci_interface
    telemetry = chip.telemetry()
    if telemetry is None:
        return extras
    extras.update(versions(identity.arch, telemetry))
    if (amps := limit(identity.arch, telemetry, "tdc")) is not None:
        extras["tdc_limit_amps"] = amps
    if (mhz := limit(identity.arch, telemetry, "aiclk")) is not None:
        extras["aiclk_max_hz"] = mhz * 1e6
    return extras
