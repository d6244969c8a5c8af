"""Dense GEMM: C = A @ B on nxn matrices, FLOP counted exactly as n^2·(2n-1) per product."""

from __future__ import annotations

from typing import Any, ClassVar

from warptd.stress import torch_device
from warptd.stress.base import DeviceRef, StressTest, TestCategory, WorkloadResult


class MatmulTest(StressTest):
    name: ClassVar[str] = "matmul"
    description: ClassVar[str] = "Dense matrix multiply (GEMM) of random nxn matrices; reports FLOP/s"
    category: ClassVar[TestCategory] = TestCategory.COMPUTE
    dtypes: ClassVar[tuple[str, ...]] = torch_device.DTYPES
    size_range: ClassVar[tuple[int, int]] = (16, 32768)
    size_help: ClassVar[str] = "matrix side n"

    @classmethod
    def default_dtype(cls, device: DeviceRef) -> str | None:
        return torch_device.fastest_dtype(device.kind, device.compute_capability)

    @classmethod
    def default_size(cls, device: DeviceRef) -> int | None:
        return 2048 if device.kind == "cpu" else 8192

    @classmethod
    def check_parameters(cls, device: DeviceRef, dtype: str | None, size: int | None) -> None:
        super().check_parameters(device, dtype, size)
        if dtype == "tf32" and device.kind != "cuda":
            raise ValueError("dtype 'tf32' needs an NVIDIA/AMD GPU (cuda device)")

    @classmethod
    def estimate_bytes(cls, dtype: str | None, size: int | None) -> int | None:
        if size is None:
            return None
        element = 2 if dtype in ("bfloat16", "float16") else 4
        return 3 * size * size * element  # A, B and C

    @staticmethod
    def flop_per_product(n: int) -> int:
        """n^2 outputs, each n multiplications and n-1 additions."""
        return n * n * (2 * n - 1)

    def is_available(self) -> bool:
        return torch_device.available(self.backend.torch_device)

    def setup(self) -> None:
        torch = torch_device.torch()
        device, n, dtype = self.backend.torch_device, self.size, torch_device.torch_dtype(self.dtype or "")
        self._tf32_before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.dtype == "tf32"
        generator = torch.Generator(device=device).manual_seed(0)
        self._a = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
        self._b = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
        self._c = torch.empty(n, n, device=device, dtype=dtype)
        self._sync = torch_device.synchronizer(device)

    def _step(self) -> None:
        torch_device.torch().matmul(self._a, self._b, out=self._c)

    def warmup(self) -> None:
        for _ in range(3):
            self._step()
        self._sync()

    def execute_test(self, duration: float, iterations: int) -> WorkloadResult:
        flop = self.flop_per_product(self.size or 0)
        return self.measure(self._step, self._sync, duration=duration, iterations=iterations, work=flop)

    def teardown(self) -> None:
        torch: Any = torch_device.torch()
        self._a = self._b = self._c = None
        torch.backends.cuda.matmul.allow_tf32 = getattr(self, "_tf32_before", False)
        if self.backend.torch_device.startswith("cuda"):
            torch.cuda.empty_cache()
