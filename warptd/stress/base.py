"""The StressTest ABC: the lifecycle of one workload on one device, and what it returns."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class DeviceKind:
    """How a person names one kind of device (the ``cuda`` of ``cuda:0``): ``a CPU``, ``CPUs``."""

    one: str
    many: str


#: Every device kind a workload can name, with its name in words.
DEVICE_KINDS: dict[str, DeviceKind] = {
    "cpu": DeviceKind("a CPU", "CPUs"),
    "cuda": DeviceKind("a CUDA or ROCm GPU", "CUDA and ROCm GPUs"),
    "xpu": DeviceKind("an Intel GPU", "Intel GPUs"),
    "hpu": DeviceKind("a Gaudi accelerator", "Gaudi accelerators"),
    "xla": DeviceKind("a TPU", "TPUs"),
    "mps": DeviceKind("an Apple GPU", "Apple GPUs"),
    "tt": DeviceKind("a Tenstorrent chip", "Tenstorrent chips"),  # no torch device: Path B only
}
#: Device kinds that torch itself (or its vendor plugin: Habana, torch_xla) provides.
TORCH_DEVICE_TYPES = ("cpu", "cuda", "xpu", "hpu", "xla", "mps")


def kind_words(kind: str, *, many: bool = False) -> str:
    """A device kind in words; an undeclared kind (a plugin's) as itself."""
    known = DEVICE_KINDS.get(kind)
    if known is None:
        return f"{kind} devices" if many else f"a {kind} device"
    return known.many if many else known.one


class TestCategory(StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory"
    CUSTOM = "custom"


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """The backend as a stress test sees it across the process boundary: picklable, no SDK handles.

    ``backend_target`` (``module:Class``) lets a Path-B test open the vendor SDK in the worker.
    """

    backend: str
    index: int
    torch_device: str
    is_accelerator: bool
    backend_target: str = ""
    #: The vendor's compute capability (NVIDIA ``8.0``, AMD ``gfx90a``); picks the default dtype.
    compute_capability: str | None = None
    #: Set in the worker before torch loads, e.g. ``CUDA_VISIBLE_DEVICES=<uuid>`` so that the
    #: GPU that runs is the one the samplers measure whatever CUDA's own device order is.
    environment: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def key(self) -> str:
        return f"{self.backend}:{self.index}"

    @property
    def kind(self) -> str:
        """The device kind: ``cuda`` of ``cuda:0``."""
        return self.torch_device.partition(":")[0]

    def get_pytorch_device_string(self, device_id: int | None = None) -> str:
        return self.torch_device


@dataclass(slots=True)
class WorkloadResult:
    """Throughput of a finished workload; ``work`` is the exact FLOP or byte count done."""

    throughput: float
    unit: str
    work: float
    work_unit: str
    iterations: int
    elapsed_s: float
    dtype: str | None = None
    size: int | None = None


@dataclass(slots=True)
class Progress:
    iterations: int
    elapsed_s: float
    throughput: float


ProgressCallback = Callable[[Progress], None]


class StressTest(ABC):
    """One workload. Subclasses in ``warptd/stress/*.py`` (or the ``warptd.stress_tests`` entry
    points) are discovered automatically; the backend comes in through the constructor."""

    name: ClassVar[str]
    description: ClassVar[str]
    category: ClassVar[TestCategory]
    #: What the throughput counts: ``FLOP/s`` (compute) or ``B/s`` (memory).
    unit: ClassVar[str] = "FLOP/s"
    #: Accepted dtype names; empty when the workload has no dtype.
    dtypes: ClassVar[tuple[str, ...]] = ()
    size_range: ClassVar[tuple[int, int]] = (1, 2**31)
    size_help: ClassVar[str] = "workload size"
    #: The kinds of device string (``cuda`` of ``cuda:0``) the workload runs on.
    device_types: ClassVar[tuple[str, ...]] = TORCH_DEVICE_TYPES

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        backend: DeviceRef,
        dtype: str | None = None,
        size: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.backend = backend
        self.dtype = dtype
        self.size = size
        self.progress = progress
        #: Called once when the timed part begins; the telemetry window of the run starts there.
        self.on_start: Callable[[], None] | None = None

    # -- identity (the design document's accessors) ------------------------------------------
    def get_pretty_name(self) -> str:
        return self.name

    def get_description(self) -> str:
        return self.description

    def get_category(self) -> TestCategory:
        return self.category

    @classmethod
    def estimate_bytes(cls, dtype: str | None, size: int | None) -> int | None:
        """Device memory the workload allocates with these parameters; None when unknown."""
        return None

    @classmethod
    def runs_on(cls, device: DeviceRef) -> bool:
        return device.kind in cls.device_types

    @classmethod
    def default_dtype(cls, device: DeviceRef) -> str | None:
        """The dtype a run uses when the request names none; pure Python, runs in the daemon."""
        return cls.dtypes[0] if cls.dtypes else None

    @classmethod
    def default_size(cls, device: DeviceRef) -> int | None:
        """The size a run uses when the request names none; pure Python, runs in the daemon."""
        return None

    @classmethod
    def resolve_parameters(
        cls, device: DeviceRef, dtype: str | None, size: int | None
    ) -> tuple[str | None, int | None]:
        """The dtype and size this run uses (the request's, else the defaults), checked; the only
        place defaults are chosen, before the job exists, so its first view shows them."""
        cls.check_device(device)
        dtype = dtype or cls.default_dtype(device)
        size = size or cls.default_size(device)
        cls.check_parameters(device, dtype, size)
        return dtype, size

    @classmethod
    def check_device(cls, device: DeviceRef) -> None:
        """Refuse a device of a kind this workload does not run on, naming both kinds in words."""
        if not cls.runs_on(device):
            kinds = [kind_words(k, many=True) for k in cls.device_types]
            listed = ", ".join(kinds[:-1]) + f" and {kinds[-1]}" if len(kinds) > 1 else kinds[0]
            raise ValueError(f"{cls.name} runs on {listed}; {device.key} is {kind_words(device.kind)}")

    @classmethod
    def check_parameters(cls, device: DeviceRef, dtype: str | None, size: int | None) -> None:
        """Reject impossible parameters before anything starts; pure Python, runs in the daemon."""
        cls.check_device(device)
        if dtype is not None and dtype not in cls.dtypes:
            allowed = ", ".join(cls.dtypes) or "none"
            raise ValueError(f"dtype {dtype!r} is not valid for {cls.name} (allowed: {allowed})")
        low, high = cls.size_range
        if size is not None and not low <= size <= high:
            raise ValueError(f"size {size} is out of range for {cls.name}: {low}..{high} ({cls.size_help})")

    # -- lifecycle -----------------------------------------------------------------------------
    @abstractmethod
    def is_available(self) -> bool:
        """True when the device can run this workload (checked in the worker)."""

    def validate_configuration(self) -> None:
        """Raise ``ValueError`` on a configuration the device cannot run (defaults filled in if the
        daemon did not: a test built directly)."""
        self.dtype, self.size = self.resolve_parameters(self.backend, self.dtype, self.size)

    @abstractmethod
    def setup(self) -> None:
        """Allocate buffers (random data, not zeros)."""

    def warmup(self) -> None:  # noqa: B027 - optional hook
        """Run untimed iterations so clocks, caches and kernels settle."""

    @abstractmethod
    def execute_test(self, duration: float, iterations: int) -> WorkloadResult:
        """Run for ``duration`` seconds (at least ``iterations`` iterations) and measure."""

    @abstractmethod
    def teardown(self) -> None:
        """Free what setup allocated."""

    def measure(
        self,
        step: Callable[[], None],
        synchronize: Callable[[], None],
        *,
        duration: float,
        iterations: int,
        work: float,
    ) -> WorkloadResult:
        """Time ``step`` (``work`` FLOP or bytes each, in the test's ``unit``) for ``duration`` s."""
        done, elapsed = timed_loop(
            step,
            synchronize,
            duration=duration,
            min_iterations=iterations,
            work_per_iteration=work,
            progress=self.progress,
            on_start=self.on_start,
        )
        return WorkloadResult(
            throughput=done * work / elapsed,
            unit=self.unit,
            work=float(done * work),
            work_unit=self.unit.removesuffix("/s"),
            iterations=done,
            elapsed_s=elapsed,
            dtype=self.dtype,
            size=self.size,
        )

    def run(self, duration: float, iterations: int = 1) -> WorkloadResult:
        if not self.is_available():
            raise RuntimeError(f"{self.name} cannot run on {self.backend.torch_device}")
        self.validate_configuration()
        self.setup()
        try:
            self.warmup()
            return self.execute_test(duration, iterations)
        finally:
            self.teardown()


def timed_loop(
    step: Callable[[], None],
    synchronize: Callable[[], None],
    *,
    duration: float,
    min_iterations: int,
    work_per_iteration: float,
    progress: ProgressCallback | None,
    on_start: Callable[[], None] | None = None,
) -> tuple[int, float]:
    """Run ``step`` in batches until ``duration`` passes; return (iterations, seconds).

    Each batch is synchronised with the device before the clock is read, so the time covers
    finished work only. Batches grow to about 0.2 s, keeping clock reads off the hot path.
    """
    if on_start is not None:
        on_start()
    synchronize()
    started = time.perf_counter()
    iterations, batch = 0, 1
    while True:
        batch_start = time.perf_counter()
        for _ in range(batch):
            step()
        synchronize()
        now = time.perf_counter()
        iterations += batch
        elapsed = now - started
        if progress is not None:
            progress(Progress(iterations, elapsed, iterations * work_per_iteration / elapsed))
        if elapsed >= duration and iterations >= min_iterations:
            return iterations, elapsed
        per_step = (now - batch_start) / batch
        remaining = max(duration - elapsed, per_step)
        batch = max(1, min(int(0.2 / per_step) if per_step > 0 else batch * 2, int(remaining / per_step) + 1))
