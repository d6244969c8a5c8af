"""A pyluwen double, at the SDK boundary of the ``tenstorrent`` backend.

pyluwen is a compiled (Rust/PyO3) extension, so the double is built from the real package this way:

- ``pyluwen.detect_chips`` is patched through ``patched_sdk`` (every other module function raises).
  ``create_autospec`` does not check the signature of a builtin function or method descriptor, so
  every answered call is also bound against ``inspect.signature`` of the real one (its
  ``__text_signature__``): a wrong argument is a ``TypeError``, as with the real extension.
- Chips are ``create_autospec(pyluwen.PciChip, instance=True)``: a method the real class lacks
  (``as_gs``, gone in 0.10) is an ``AttributeError``; methods the double does not answer raise.
- ``pyluwen.Telemetry`` cannot be constructed ("No constructor defined"), so :data:`FakeTelemetry`
  is a slots dataclass generated from the real class's attribute names: reading an attribute
  the real class lacks is an ``AttributeError``. Values are raw telemetry words.
- pyluwen exports no exception types; it raises plain ``Exception`` with a message (seen from
  ``PciChip(0)`` on this machine) and panics as ``pyo3_runtime.PanicException``, a BaseException.

The raw word encodings (Wormhole: limit in the high half of ``tdp``/``tdc``/``aiclk``, 1/16 °C in
the low half of ``asic_temperature``; Blackhole: separate ``*_limit_max`` words, signed 16.16 °C)
come from /work/shared/notes/energy-units.md and tt-smi's decoding, not from hardware.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pyluwen

from tests.doubles.sdk import patched_sdk

ALL_ONES = 0xFFFF_FFFF
TELEMETRY_FIELDS = tuple(
    sorted(
        name
        for name, attr in vars(pyluwen.Telemetry).items()
        if isinstance(attr, types.GetSetDescriptorType) and not name.startswith("_")
    )
)
FakeTelemetry = dataclasses.make_dataclass(
    "FakeTelemetry",
    [(name, int | None, field(default=None)) for name in TELEMETRY_FIELDS],
    frozen=True,
    slots=True,
)


class PanicException(BaseException):
    """What a Rust panic inside pyluwen raises (``pyo3_runtime.PanicException``)."""

    __module__ = "pyo3_runtime"


def wormhole_words(power_w: int = 55, celsius_16ths: int = 0x2A8) -> dict[str, int]:
    """Raw telemetry of an idle Wormhole chip: 55 W of 150 W, 42.5 °C, 500 of 1000 MHz."""
    return {
        "tdp": 150 << 16 | power_w,
        "tdc": 170 << 16 | 62,
        "vcore": 850,
        "asic_temperature": 0x0C80 << 16 | celsius_16ths,  # the high half is not the temperature
        "aiclk": 1000 << 16 | 500,
        "fw_bundle_version": 0x50110000,  # 80.17.0.0
        "arc0_fw_version": 0x00021D00,  # 2.29.0
        "eth_fw_version": 0x06E000,  # 6.14.0
        "m3_app_fw_version": 0x05090000,  # 5.9.0.0
        "m3_bl_fw_version": 0x01000000,  # 1.0.0.0
    }


def blackhole_words(power_w: int = 95, celsius: float = 48.25) -> dict[str, int]:
    """Raw telemetry of a Blackhole chip: 95 W of 300 W, a signed 16.16 temperature, 1350 MHz."""
    return {
        "tdp": power_w,
        "tdp_limit_max": 300,
        "tdc": 110,
        "tdc_limit_max": 350,
        "vcore": 780,
        "asic_temperature": round(celsius * 65536) & ALL_ONES,
        "aiclk": 1350,
        "aiclk_limit_max": 1400,
        "fw_bundle_version": 0x12040000,  # 18.4.0.0
        "arc0_fw_version": 0x00460000,  # 0.70.0.0
    }


@dataclass
class FakeChip:
    """One simulated chip: its raw telemetry words and its identity."""

    arch: str = "wormhole"  # "wormhole" or "blackhole"
    board_id: int = 0x0100014111712034
    asic_location: int = 0
    remote: bool = False
    pci_interface: int = 0
    words: dict[str, int] = field(default_factory=wormhole_words)
    #: Telemetry fields the firmware leaves unset (``None``).
    unset: set[str] = field(default_factory=set)
    #: Raised by ``get_telemetry`` (e.g. ``Exception("... (os error 19)")`` or a PanicException).
    raises: BaseException | None = None
    #: Off the bus: PCIe reads of the chip, its telemetry included, return all-ones.
    lost: bool = False
    #: Not found by ``detect_chips`` (unplugged).
    absent: bool = False

    def telemetry(self) -> Any:
        if self.raises is not None:
            raise self.raises
        if self.lost:
            return FakeTelemetry(**dict.fromkeys(TELEMETRY_FIELDS, ALL_ONES))
        words = {
            "board_id_high": self.board_id >> 32,
            "board_id_low": self.board_id & ALL_ONES,
            "asic_location": self.asic_location,
            **self.words,
        }
        return FakeTelemetry(**{k: v for k, v in words.items() if k not in self.unset})


def _checked(
    real: Callable[..., Any], answer: Callable[..., Any], method: bool = False
) -> Callable[..., Any]:
    """``answer``, after binding the call to the real function's signature (``self`` for methods)."""
    signature = inspect.signature(real)

    def call(*args: Any, **kwargs: Any) -> Any:
        signature.bind(*(("self",) if method else ()), *args, **kwargs)
        return answer(*args, **kwargs)

    return call


def _unanswered(name: str) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"warptd called PciChip.{name}, which the double does not implement")

    return fail


class FakeLuwen:
    """The simulated host: chips in detection order (local chips first, then remote ones)."""

    def __init__(self, chips: list[FakeChip] | None = None) -> None:
        self.chips = chips if chips is not None else [FakeChip()]
        self.mocks: dict[str, mock.Mock] = {}
        self.handed: list[tuple[FakeChip, Any]] = []  # every PciChip double handed out, in order

    def handle(self, fake: FakeChip) -> Any:
        """A ``PciChip`` double answering from ``fake``."""
        chip = mock.create_autospec(pyluwen.PciChip, instance=True)
        answers: dict[str, Callable[..., Any]] = {
            "get_telemetry": fake.telemetry,
            "is_remote": lambda: fake.remote,
            "as_wh": lambda: self._as(fake, "wormhole", pyluwen.PciWormhole),
            "as_bh": lambda: self._as(fake, "blackhole", pyluwen.PciBlackhole),
            "get_pci_bdf": lambda: self._bdf(fake),
            "get_pci_interface_id": lambda: fake.pci_interface,
        }
        for name, real in vars(pyluwen.PciChip).items():
            if isinstance(real, types.MethodDescriptorType) and not name.startswith("_"):
                getattr(chip, name).side_effect = _checked(real, answers.get(name, _unanswered(name)), True)
        self.handed.append((fake, chip))
        return chip

    @staticmethod
    def _as(fake: FakeChip, arch: str, cls: type) -> Any:
        """``as_wh()``/``as_bh()``: the chip as its architecture's class, or None."""
        return mock.create_autospec(cls, instance=True) if fake.arch == arch else None

    @staticmethod
    def _bdf(fake: FakeChip) -> str:
        if fake.remote:
            raise Exception("Object is remote")  # pyluwen raises plain Exception
        return f"0000:{0x3B + fake.pci_interface:02x}:00.0"

    def detect_chips(self, *args: Any, **kwargs: Any) -> list[Any]:
        return [self.handle(fake) for fake in self.chips if not fake.absent]

    def calls(self, name: str, chip: int | None = None) -> int:
        """Calls of module function ``name``, or of PciChip method ``name`` on chip ``chip`` (any handle)."""
        if chip is None:
            return self.mocks[name].call_count
        fake = self.chips[chip]
        return sum(getattr(handle, name).call_count for f, handle in self.handed if f is fake)

    @contextlib.contextmanager
    def installed(self) -> Iterator[FakeLuwen]:
        """Patch the real pyluwen module for the duration of the block."""

        def is_api(name: str) -> bool:
            return not name.startswith("_") and inspect.isbuiltin(getattr(pyluwen, name))

        impls = {"detect_chips": self.detect_chips}  # patched_sdk checks the compiled signature
        with patched_sdk(pyluwen, impls, is_api, self.mocks):
            yield self
