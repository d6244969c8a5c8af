"""What a vendor package has, declared in one place: the ``VENDOR`` of its ``__init__`` (a built-in
package under ``warptd/backends/``, found there by the registry) or of a plugin's module (an entry
point of the ``warptd.vendors`` group).

The declaration names its backends and what the daemon wires beside them as ``module:attribute``
targets, imported only when they are wanted: a vendor's ``__init__`` imports no SDK, so that a
missing one is a log line, never an ImportError. What lives above the backends' floor (a process
source polling beside the sampler, an event monitor, a power backend) is named here, so no daemon
code names a vendor.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NodeRule:
    """How one backend's devices map to the device nodes a process opens to use them (processes found
    from ``/proc``'s open files: :mod:`warptd.processes.device_nodes`)."""

    #: sysfs classes (``<sysfs>/class/<class>``) whose devices are the nodes.
    classes: tuple[str, ...]
    #: The ``DEVNAME`` values (regular expression, whole name) that open the device for work.
    names: str
    #: Also ``/dev/vfio/<iommu group>`` of each function (a device passed to userspace through VFIO).
    vfio_group: bool = False
    #: Every PCI function of the device's slot, not only the one the backend names (a TPU chip: one
    #: function per core).
    whole_slot: bool = False
    #: A device without a PCI address of its own (reached through another) takes the nodes of the
    #: devices whose ``extra_metrics`` hold the same value under this key.
    board_key: str = ""
    #: The node's open files carry DRM client usage stats in ``/proc/PID/fdinfo``.
    fdinfo: bool = False


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator backend: its name (``--backend``, the ``backend`` label), its
    :class:`~warptd.backends.base.AcceleratorBackend` class, and what is wired beside it."""

    name: str
    target: str
    #: Its devices' process lists: ``function(settings, backend, on_change)`` giving a process source
    #: (:class:`~warptd.processes.source.ProcessPoller`) or None where the settings want none of it.
    processes: str | None = None
    #: Its events: ``function(settings, backend, on_change)`` giving an event monitor with XID counts
    #: (:class:`~warptd.events.xid.XidMonitor`) or None.
    events: str | None = None
    #: The device nodes its devices are used through, for the processes of ``--workloads``.
    device_nodes: NodeRule | None = None


@dataclass(frozen=True, slots=True)
class Power:
    """A power backend measuring ``companion``'s devices (``--backend <companion>`` loads it too): a
    :class:`~warptd.power.base.PowerBackend` class, or without one a domain per device from the
    companion's power-only reads (:class:`~warptd.power.devices.DevicePowerBackend`), its ``source``
    label this name."""

    name: str
    companion: str
    target: str | None = None


@dataclass(frozen=True, slots=True)
class Vendor:
    """A vendor package's backends: accelerators first, and the power backends over them. ``rank``: where
    a built-in vendor's backends come in lists (``warptd list``, the sampler's jobs), lower first."""

    accelerators: tuple[Accelerator, ...] = ()
    power: tuple[Power, ...] = ()
    rank: int = 50
