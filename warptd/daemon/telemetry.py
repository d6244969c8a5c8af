"""The daemon's samplers and everything fed by their samples: the snapshot scrapes read, the exposition,
and the features (stress, windows, XID events, processes, pods, workloads), wired from the settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import structlog
from prometheus_client import CollectorRegistry

from warptd.config import Settings
from warptd.events.collector import XidCollector
from warptd.events.xid import XidMonitor, open_xid_monitor, xid_events_wanted
from warptd.exporter.exposition import Exposition
from warptd.k8s.attribution import PodAttribution, from_settings
from warptd.metrics import catalog as m
from warptd.recording.recorder import with_carbon_and_cost
from warptd.recording.windows import WindowLimits, WindowManager
from warptd.registry import Loaded
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot
from warptd.stress.setup import make_job_manager

if TYPE_CHECKING:  # the opt-in features' modules load when they are on (--processes, --workloads, pods)
    from warptd.k8s.energy import SmUse
    from warptd.processes.amd import AmdProcessMonitor
    from warptd.processes.device_files import DeviceFiles
    from warptd.processes.nvml import ProcessMonitor
    from warptd.workloads.energy import WorkloadEnergy
    from warptd.workloads.history import WorkloadHistory

log = structlog.get_logger("warptd")
#: What pod energy (a split of each allocated device's energy every sample) is for.
POD_ENERGY_FAMILIES = (m.POD_ENERGY, m.POD_ENERGY_SPLIT, m.POD_ENERGY_UNATTRIBUTED)


class Monitor(Protocol):
    """A thread beside the sampler that feeds the exposition (pods, XIDs, processes, workloads)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Telemetry:
    """The backends' samples and what they feed, built from the settings; ``start()`` and ``stop()`` run
    the sampler and the threads beside it. ``apply()`` takes what a reload changes."""

    def __init__(self, settings: Settings, loaded: Loaded) -> None:
        self.settings = settings
        self.loaded = loaded
        self.snapshot = Snapshot(stale_after=settings.stale_after)
        self.sampler = Sampler(settings, self.snapshot, self.loaded.accelerators, self.loaded.power)
        self.pods = from_settings(settings)
        pod_labels = self.pods.pod_labels if self.pods is not None and settings.pod_labels else None
        self.exposition = Exposition(
            self.snapshot, node=settings.node, pod_labels=pod_labels, selection=settings.metric_selection
        )
        self.stress = (
            make_job_manager(settings, self.loaded, self.snapshot, self.sampler) if settings.stress else None
        )
        if self.stress is not None:
            from warptd.stress.collector import StressCollector

            self.exposition.registry.register(StressCollector(self.stress))
            self.sampler.listeners.append(self.stress.on_sample)
        self.windows = make_window_manager(
            settings, self.loaded, self.snapshot, self.sampler, self.exposition.registry
        )
        if self.windows is not None:
            self.sampler.listeners.append(self.windows.on_sample)
        self.xid_monitor: XidMonitor | None = None
        self.process_monitor: ProcessMonitor | None = None
        self.amd_processes: AmdProcessMonitor | None = None
        self.device_files: DeviceFiles | None = None
        if any(backend.name == "nvidia" for backend in self.loaded.accelerators):
            self._add_nvidia_extras(settings)
        if settings.compat == "dcgm-exporter":
            from warptd.exporter.dcgm import DcgmCompatCollector

            self.exposition.registry.register(
                DcgmCompatCollector(
                    self.snapshot, settings.node, self.pods, self.xid_monitor, settings.dcgm_exporter_release
                )
            )
        if self.pods is not None:
            self._add_pod_energy(self.pods, settings)
        self.workload_history: WorkloadHistory | None = None
        self.workloads = self._workload_energy(settings)

    def _add_nvidia_extras(self, settings: Settings) -> None:
        """XID events (on by default) and per-process memory (--processes), each on its own thread."""
        if xid_events_wanted(settings):
            self.xid_monitor = open_xid_monitor("nvidia", on_change=self.snapshot.touch)
            if self.xid_monitor is not None:
                self.exposition.registry.register(XidCollector(self.xid_monitor))
        if settings.processes or settings.workloads:  # workloads read the monitor's process lists
            from warptd.processes.collector import ProcessesCollector
            from warptd.processes.nvml import open_process_monitor

            self.process_monitor = open_process_monitor(
                settings.procfs,
                "nvidia",
                settings.interval,
                on_change=self.snapshot.touch,
                utilization_interval=settings.process_utilization_interval,
            )
            if self.process_monitor is not None and settings.processes:
                self.exposition.registry.register(ProcessesCollector(self.process_monitor))

    def _add_pod_energy(self, pods: PodAttribution, settings: Settings) -> None:
        """Each pod's share of its devices' energy, and the pods' series (a kubelet was found)."""
        from warptd.k8s.collector import KubernetesCollector
        from warptd.k8s.energy import PodEnergy

        pods.on_change = self.snapshot.touch
        pod_energy = None
        if settings.metric_selection.reads(*(s.name for s in POD_ENERGY_FAMILIES)):
            pod_energy = PodEnergy(pods, self.snapshot, sm_use=self._sm_use(settings))
            self.sampler.listeners.append(pod_energy.on_sample)
        self.exposition.registry.register(KubernetesCollector(pods, pod_energy, self.snapshot))

    def _sm_use(self, settings: Settings) -> SmUse | None:
        """SM use per container for splitting shared GPUs' energy, where --processes polls it."""
        if self.process_monitor is None:
            return None
        from warptd.k8s.containers import ContainerOwners
        from warptd.k8s.shares import SmShares

        roots = (Path("/"), settings.procfs / "1" / "root")  # the runtime's bundles, as mounted or the host's
        return SmShares(self.process_monitor, ContainerOwners(roots)).by_owner

    def _workload_energy(self, settings: Settings) -> WorkloadEnergy | None:
        """Energy per Slurm job, unit, container and user (--workloads), from the process lists."""
        if not settings.workloads:
            return None
        from warptd.processes.device_nodes import RULES
        from warptd.recording.selection import available_targets
        from warptd.workloads.collector import WorkloadCollector
        from warptd.workloads.energy import ProcessSource, WorkloadEnergy
        from warptd.workloads.history import WorkloadHistory

        amd = next((backend for backend in self.loaded.accelerators if backend.name == "amd"), None)
        if amd is not None:  # its processes filed under the identities the backend's samples carry
            from warptd.processes.amd import open_amd_process_monitor

            self.amd_processes = open_amd_process_monitor(
                settings.procfs, settings.interval, amd.device_identity
            )
        if any(backend.name in RULES for backend in self.loaded.accelerators):
            from warptd.processes.device_files import open_device_files

            self.device_files = open_device_files(
                settings, self.loaded, self.snapshot, lambda: self.settings.interval
            )
        sources: list[ProcessSource] = [
            s for s in (self.process_monitor, self.amd_processes) if s is not None
        ]
        if self.device_files is not None:
            sources += self.device_files.sources()
            from warptd.processes.collector import DeviceFilesCollector

            self.exposition.registry.register(DeviceFilesCollector(self.device_files))
        if not sources:
            log.warning(
                "workloads_without_process_lists",
                reason="workloads are found from NVML's and amdsmi's process lists or the device files "
                "of the TPU, Tenstorrent, Gaudi and DRM (sysfs) backends, and none of them is loaded",
            )
        if settings.workload_recording_memory > 0:
            self.workload_history = WorkloadHistory(
                known_targets=lambda: available_targets(self.snapshot),
                interval=lambda: self.settings.interval,
                memory_bytes=settings.workload_recording_memory,
            )
        energy = WorkloadEnergy(
            sources,
            settings.procfs,
            settings.cgroupfs,
            kinds=settings.workload_kinds,
            retention=settings.workload_retention,
            max_workloads=settings.workload_max,
            interval=lambda: self.settings.interval,
            listeners=[self.workload_history] if self.workload_history is not None else [],
            edge=self._read_edges,
            slurm=settings.workload_slurm_roots,
        )
        self.sampler.listeners.append(energy.on_sample)
        self.exposition.registry.register(WorkloadCollector(energy))
        return energy

    def _read_edges(self, devices: set[tuple[str, str]]) -> None:
        """Read these devices ((backend, uuid)) now, every counter exact: a workload began or ended."""
        indices = []
        for backend, uuid in devices:
            state = self.snapshot.get(backend)
            samples = state.devices if state is not None else []
            indices += [(backend, s.reading.index) for s in samples if s.reading.uuid == uuid]
        self.sampler.read_edges(indices)

    def _monitors(self) -> list[Monitor]:
        """The threads beside the sampler that feed the exposition."""
        monitors = (
            self.pods,
            self.xid_monitor,
            self.process_monitor,
            self.amd_processes,
            self.device_files,
            self.workloads,
        )
        return [m for m in monitors if m is not None]

    def start(self) -> None:
        """Sample, and run the threads beside the sampler."""
        self.sampler.start()
        for monitor in self._monitors():
            monitor.start()

    def stop(self) -> None:
        """End running stress jobs and open windows, then stop sampling and the threads beside it."""
        if self.stress is not None:
            self.stress.shutdown()
        if self.windows is not None:
            self.windows.shutdown()
        self.sampler.stop()
        for monitor in self._monitors():
            monitor.stop()

    def apply(self, new: Settings) -> None:
        """What a reload changes live: intervals, timeouts, the stress and window limits."""
        self.sampler.reconfigure(new)
        if self.process_monitor is not None:
            self.process_monitor.interval = new.interval
            self.process_monitor.utilization_interval = new.process_utilization_interval
        if self.amd_processes is not None:
            self.amd_processes.interval = new.interval
        self.snapshot.stale_after = new.stale_after
        if self.stress is not None:
            self.stress.max_duration_s = new.stress_max_duration
            self.stress.history = new.stress_history
        if self.windows is not None:
            self.windows.limits = WindowLimits.of(new)
        self.settings = new


def make_window_manager(
    settings: Settings, loaded: Loaded, snapshot: Snapshot, sampler: Sampler, registry: CollectorRegistry
) -> WindowManager | None:
    """The energy windows of ``/windows``, their metrics registered in ``registry``, unless
    ``--no-windows``."""
    if not settings.windows:
        return None
    from warptd.recording.collector import WindowCollector, WindowEnergy

    energy = WindowEnergy(settings.window_energy_names)
    manager = WindowManager(
        snapshot,
        sampler,
        {b.name for b in loaded.accelerators if b.is_accelerator},
        WindowLimits.of(settings),
        carbon=lambda r: with_carbon_and_cost(
            r, sampler.settings.carbon_intensity, sampler.settings.energy_price
        ),
        interval=lambda: sampler.settings.window_interval,
        on_end=energy.on_end,
        on_change=snapshot.touch,
    )
    registry.register(WindowCollector(manager, energy))
    return manager
