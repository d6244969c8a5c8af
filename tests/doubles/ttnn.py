"""A TT-NN double for the ``tt_matmul`` Path-B workload, written from TT-NN's documented API.

The real ``ttnn`` package cannot be installed here: tt-metal publishes wheels for CPython 3.10
and 3.12 only (this project tests on 3.11), and it needs a Tenstorrent chip or its simulator to
run. So this module follows the signatures of docs.tenstorrent.com's API reference
(``open_device(device_id, ...)``, ``close_device(device)``, ``synchronize_device(device, cq_id=None,
sub_device_ids=...)``, ``from_torch(tensor, dtype=None, *, layout=..., device=...)``,
``matmul(input_tensor_a, input_tensor_b, *, ...)``, ``deallocate(tensor, force=True)``) and does the
arithmetic with torch on the CPU, so a result is a real product. It tracks what is open and
allocated, so a leak fails the test.
"""

from __future__ import annotations

import importlib.machinery
import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DataType:
    name: str


@dataclass(frozen=True)
class Layout:
    name: str


@dataclass(eq=False)
class Device:
    device_id: int
    open: bool = True


@dataclass(eq=False)
class Tensor:
    value: Any  # a torch tensor
    dtype: DataType
    layout: Layout
    device: Device | None


@dataclass
class FakeTtnn:
    """The module's state: chips that exist, open devices, live device tensors, call counts."""

    chips: int = 2
    devices: list[Device] = field(default_factory=list)
    live: list[Tensor] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)

    def module(self) -> types.ModuleType:
        ttnn = types.ModuleType("ttnn")
        ttnn.__spec__ = importlib.machinery.ModuleSpec("ttnn", loader=None)
        ttnn.bfloat16, ttnn.bfloat8_b, ttnn.float32 = (
            DataType(n) for n in ("bfloat16", "bfloat8_b", "float32")
        )
        ttnn.TILE_LAYOUT, ttnn.ROW_MAJOR_LAYOUT = Layout("TILE"), Layout("ROW_MAJOR")

        def open_device(device_id: int, l1_small_size: int = 0, trace_region_size: int = 0) -> Device:
            self.calls["open_device"] += 1
            if not 0 <= device_id < self.chips:
                raise RuntimeError(f"Device {device_id} is not available")  # tt-metal's TT_THROW
            self.devices.append(Device(device_id))
            return self.devices[-1]

        def close_device(device: Device) -> None:
            self.calls["close_device"] += 1
            device.open = False

        def synchronize_device(device: Device, cq_id: int | None = None, sub_device_ids: Any = ()) -> None:
            assert device.open, "synchronize on a closed device"
            self.calls["synchronize_device"] += 1

        def from_torch(tensor: Any, dtype: DataType | None = None, *, layout: Layout = ttnn.ROW_MAJOR_LAYOUT,
                       device: Device | None = None, memory_config: Any = None) -> Tensor:  # fmt: skip
            rows, cols = tensor.shape[-2:]
            if layout == ttnn.TILE_LAYOUT and (rows % 32 or cols % 32):
                raise RuntimeError("TILE_LAYOUT needs dimensions that are multiples of 32")
            return _allocate(Tensor(tensor, dtype or ttnn.float32, layout, device))

        def matmul(input_tensor_a: Tensor, input_tensor_b: Tensor, *, memory_config: Any = None,
                   dtype: DataType | None = None) -> Tensor:  # fmt: skip
            self.calls["matmul"] += 1
            for tensor in (input_tensor_a, input_tensor_b):
                assert tensor in self.live and tensor.device is not None and tensor.device.open
                assert tensor.layout == ttnn.TILE_LAYOUT, "matmul needs TILE_LAYOUT inputs"
            product = input_tensor_a.value @ input_tensor_b.value
            return _allocate(
                Tensor(product, dtype or input_tensor_a.dtype, ttnn.TILE_LAYOUT, input_tensor_a.device)
            )

        def deallocate(tensor: Tensor, force: bool = True) -> None:
            self.live.remove(tensor)

        def _allocate(tensor: Tensor) -> Tensor:
            if tensor.device is not None:
                self.live.append(tensor)
            return tensor

        for fn in (open_device, close_device, synchronize_device, from_torch, matmul, deallocate):
            setattr(ttnn, fn.__name__, fn)
        return ttnn
