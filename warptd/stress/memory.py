"""Device memory bandwidth: copies between two large random buffers; bytes read plus written."""

from __future__ import annotations

from typing import ClassVar

from warptd.stress import torch_device
from warptd.stress.base import DeviceRef, StressTest, TestCategory, WorkloadResult

MIB = 2**20


class MemoryBandwidthTest(StressTest):
    name: ClassVar[str] = "memory"
    description: ClassVar[str] = (
        "Device memory bandwidth with large buffer copies; reports bytes/s (read + write)"
    )
    category: ClassVar[TestCategory] = TestCategory.MEMORY
    unit: ClassVar[str] = "B/s"
    dtypes: ClassVar[tuple[str, ...]] = ("float32",)  # the buffers; bandwidth does not depend on it
    size_range: ClassVar[tuple[int, int]] = (1, 65536)
    size_help: ClassVar[str] = "MiB per buffer"

    @classmethod
    def default_size(cls, device: DeviceRef) -> int | None:
        return 256 if device.kind == "cpu" else 2048

    @classmethod
    def estimate_bytes(cls, dtype: str | None, size: int | None) -> int | None:
        return 2 * size * MIB if size is not None else None  # source and destination

    def is_available(self) -> bool:
        return torch_device.available(self.backend.torch_device)

    def setup(self) -> None:
        torch = torch_device.torch()
        device = self.backend.torch_device
        elements = (self.size or 0) * MIB // 4
        generator = torch.Generator(device=device).manual_seed(0)
        self._src = torch.randn(elements, device=device, dtype=torch.float32, generator=generator)
        self._dst = torch.empty_like(self._src)
        self._sync = torch_device.synchronizer(device)

    def _step(self) -> None:
        self._dst.copy_(self._src)

    def warmup(self) -> None:
        for _ in range(2):
            self._step()
        self._sync()

    def execute_test(self, duration: float, iterations: int) -> WorkloadResult:
        moved = 2 * self._src.numel() * self._src.element_size()  # each copy reads and writes the buffer
        return self.measure(self._step, self._sync, duration=duration, iterations=iterations, work=moved)

    def teardown(self) -> None:
        self._src = self._dst = None
        if self.backend.torch_device.startswith("cuda"):
            torch_device.torch().cuda.empty_cache()
