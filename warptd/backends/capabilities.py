"""What a backend may do beyond identifying and reading its devices, each a protocol of its own that
the daemon finds with ``isinstance``, never by a vendor's name. A backend checking itself for
``warptd doctor`` is :class:`~warptd.backends.checkup.ChecksItself`; what lives above the backends'
floor (process lists, events, device nodes, power backends) a vendor package declares
(:mod:`warptd.backends.vendor`)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from warptd.models import GPUInfo


@runtime_checkable
class StressTarget(Protocol):
    """A backend whose devices run stress workloads (``POST /stress``, ``warptd stress``)."""

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """The torch device a stress worker uses for this device (``cuda:0``, ``hpu:0``, ``xla:1`` …),
        and the environment to set first (e.g. ``CUDA_VISIBLE_DEVICES=<uuid>``)."""
        ...


@runtime_checkable
class ReleasesDevices(Protocol):
    """A fallback backend that may see devices an SDK backend also serves (sysfs GPUs): at start it
    releases those, so one physical device has one exporter (the SDK's)."""

    def release_devices(self, pci_bus_ids: set[str]) -> set[str]:
        """Stop serving the devices at these :func:`~warptd.models.pci_address` es and return the
        addresses released."""
        ...
