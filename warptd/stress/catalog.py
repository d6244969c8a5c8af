"""What this node can stress: its devices, the workloads discovered and which run on each, and the
device and workload a request that names none gets."""

from __future__ import annotations

from collections.abc import Callable

from warptd.stress.base import DeviceRef, StressTest
from warptd.stress.job import StressError, StressParameters
from warptd.stress.registry import discover_tests, resolve_test


class StressCatalog:
    """The devices (re-read before each request where ``refresh`` is given: a backend may have
    re-discovered its devices) and the workloads; ``in_daemon``: its refusals go to API clients (else
    to ``warptd stress``, run here), so they name the request's field rather than the flag."""

    def __init__(
        self, devices: list[DeviceRef], refresh: Callable[[], list[DeviceRef]] | None, in_daemon: bool
    ) -> None:
        self.devices = {d.key: d for d in devices}
        self._refresh = refresh
        self.in_daemon = in_daemon
        self.tests = discover_tests()
        self._classes: dict[str, type[StressTest]] = {}  # target -> class

    def refresh(self) -> None:
        """Re-read the devices, where this catalog can."""
        if self._refresh is not None:
            self.devices = {d.key: d for d in self._refresh()}

    def default_test(self, device: str) -> str:
        """``matmul`` where it runs, else the first workload that runs on the device (Path B)."""
        ref = self.devices.get(device)
        suitable = self.tests_for(ref) if ref is not None else []
        return "matmul" if "matmul" in suitable or not suitable else suitable[0]

    def test_class(self, name: str) -> type[StressTest]:
        """The class of a discovered test, imported once per target."""
        target = self.tests[name]
        if target not in self._classes:
            self._classes[target] = resolve_test(target)
        return self._classes[target]

    def tests_for(self, device: DeviceRef) -> list[str]:
        """The workloads that run on this device, sorted."""
        return [name for name in sorted(self.tests) if self.test_class(name).runs_on(device)]

    def usable_tests(self) -> list[str]:
        """The workloads some device of this node runs: the only ones series and messages name."""
        devices = list(self.devices.values())
        return [name for name in sorted(self.tests) if any(self.test_class(name).runs_on(d) for d in devices)]

    def default_device(self) -> str:
        """The first accelerator. A node without one has no default: a stress of its CPU is asked for
        by name, so that a request meant for a GPU (whose driver failed to load, say) never loads the
        CPU instead."""
        accelerators = [key for key, ref in self.devices.items() if ref.is_accelerator]
        if accelerators:
            return accelerators[0]
        named = ""
        for key, ref in self.devices.items():  # the CPU's device, named as the request names it
            if not ref.is_accelerator:
                asked = f'"device": "{key}"' if self.in_daemon else f"--device {key}"
                named = f"; to stress the CPU, name it: {asked}"
                break
        raise StressError(
            422,
            f"no accelerator on this node (warptd list --verbose says why each backend did not load){named}",
        )

    def resolve(
        self, params: StressParameters, max_duration_s: float
    ) -> tuple[str, DeviceRef, type[StressTest], StressParameters]:
        """The workload's target, the device and the test's class of a request, with its dtype and size
        resolved for that device; 422 for a test, device, duration or parameters that cannot be."""
        target = self.tests.get(params.test)
        if target is None:
            available = ", ".join(self.usable_tests()) or "none"
            raise StressError(422, f"unknown test {params.test!r}; available: {available}")
        device = self.devices.get(params.device)
        if device is None:
            raise StressError(422, f"unknown device {params.device!r}; available: {', '.join(self.devices)}")
        if not 1 <= params.duration_s <= max_duration_s:
            raise StressError(422, f"duration_s must be between 1 and {max_duration_s:g}")
        test_cls = self.test_class(params.test)
        try:
            dtype, size = test_cls.resolve_parameters(device, params.dtype, params.size)
        except ValueError as exc:
            raise StressError(422, str(exc)) from None
        return target, device, test_cls, params.model_copy(update={"dtype": dtype, "size": size})
