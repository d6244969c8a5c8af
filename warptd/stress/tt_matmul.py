"""Path B for Tenstorrent chips: GEMM through TT-NN, since no torch device exists for them.

TT-NN (the ``ttnn`` package of tt-metal) opens the chip, tiles random bfloat16 matrices into its
DRAM and multiplies them on the Tensix cores; FLOP are counted as for ``matmul``: n²(2n-1).
"""

from __future__ import annotations

import importlib.util
from typing import Any, ClassVar

from warptd.stress import torch_device
from warptd.stress.base import DeviceRef, StressTest, TestCategory, WorkloadResult
from warptd.stress.matmul import MatmulTest

TILE = 32  # TT-NN's tile side: matrix sides are multiples of it


class TtnnMatmulTest(StressTest):
    name: ClassVar[str] = "tt_matmul"
    description: ClassVar[str] = (
        "Dense matrix multiply on a Tenstorrent chip through TT-NN (Path B); reports FLOP/s"
    )
    category: ClassVar[TestCategory] = TestCategory.COMPUTE
    dtypes: ClassVar[tuple[str, ...]] = ("bfloat16",)
    device_types: ClassVar[tuple[str, ...]] = ("tt",)  # warptd's name for a Tenstorrent chip
    size_range: ClassVar[tuple[int, int]] = (TILE, 16384)
    size_help: ClassVar[str] = f"matrix side n, a multiple of {TILE}"

    @classmethod
    def default_size(cls, device: DeviceRef) -> int | None:
        return 4096

    @classmethod
    def check_parameters(cls, device: DeviceRef, dtype: str | None, size: int | None) -> None:
        super().check_parameters(device, dtype, size)
        if size is not None and size % TILE:
            raise ValueError(f"size {size} is not a multiple of {TILE}, TT-NN's tile side")

    @classmethod
    def estimate_bytes(cls, dtype: str | None, size: int | None) -> int | None:
        return 3 * size * size * 2 if size is not None else None  # A, B and C in bfloat16

    def _device_id(self) -> int:
        """The chip's TT-NN device id: warptd's index, in pyluwen's detection order."""
        return int(self.backend.torch_device.partition(":")[2] or 0)

    def is_available(self) -> bool:
        return self.backend.torch_device.startswith("tt:") and importlib.util.find_spec("ttnn") is not None

    def setup(self) -> None:
        import ttnn

        torch = torch_device.torch()
        self._ttnn: Any = ttnn
        self._device = ttnn.open_device(device_id=self._device_id())
        generator = torch.Generator().manual_seed(0)
        n = self.size or TILE
        self._a, self._b = (
            ttnn.from_torch(
                torch.randn(n, n, dtype=torch.bfloat16, generator=generator),
                dtype=ttnn.bfloat16,
                layout=ttnn.TILE_LAYOUT,
                device=self._device,
            )
            for _ in range(2)
        )
        self._c: Any = None

    def _step(self) -> None:
        previous, self._c = self._c, self._ttnn.matmul(self._a, self._b)
        if previous is not None:
            self._ttnn.deallocate(previous)  # one output in device DRAM at a time

    def _sync(self) -> None:
        self._ttnn.synchronize_device(self._device)

    def warmup(self) -> None:
        for _ in range(3):  # the first call compiles the kernels
            self._step()
        self._sync()

    def execute_test(self, duration: float, iterations: int) -> WorkloadResult:
        flop = MatmulTest.flop_per_product(self.size or 0)
        return self.measure(self._step, self._sync, duration=duration, iterations=iterations, work=flop)

    def teardown(self) -> None:
        ttnn = getattr(self, "_ttnn", None)
        if ttnn is None:
            return
        for tensor in (getattr(self, name, None) for name in ("_a", "_b", "_c")):
            if tensor is not None:
                ttnn.deallocate(tensor)
        self._a = self._b = self._c = None
        if getattr(self, "_device", None) is not None:
            ttnn.close_device(self._device)
            self._device = None
