"""The daemon's samplers and everything fed by their samples: the snapshot scrapes read, the exposition,
and the features (stress, windows, XID events, processes, pods, workloads), wired from the settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import structlog
from prometheus_client import CollectorRegistry

from warptd.config import Settings
from warptd.events.collector import XidCollector
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
    from warptd.events.xid import XidMonitor
    from warptd.k8s.energy import SmUse
    from warptd.processes.collector import ListsProcesses
    from warptd.processes.device_files import DeviceFiles
    from warptd.processes.source import ProcessPoller
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
        self.event_monitors: list[XidMonitor] = []
        self.process_sources: list[ProcessPoller] = []
        self.device_files: DeviceFiles | None = None
        self._add_vendor_extras(settings)
        if settings.compat == "dcgm-exporter":
            from warptd.exporter.dcgm import DcgmCompatCollector

            xid, release = next(iter(self.event_monitors), None), settings.dcgm_exporter_release
            self.exposition.registry.register(
                DcgmCompatCollector(self.snapshot, settings.node, self.pods, xid, release)
            )
        if self.pods is not None:
            self._add_pod_energy(self.pods, settings)
        self.workload_history: WorkloadHistory | None = None
        self.workloads = self._workload_energy(settings)

    def _add_vendor_extras(self, settings: Settings) -> None:
        """What the loaded backends' vendors declare beside them, each on its own thread where the
        settings want it: events (XIDs, on by default) and process lists (--processes, --workloads)."""
        for backend, open_events in self.loaded.wired("events"):
            monitor = open_events(settings, backend, self.snapshot.touch)
            if monitor is not None:
                self.event_monitors.append(monitor)
                self.exposition.registry.register(XidCollector(monitor))
        if not (settings.processes or settings.workloads):
            return  # nothing reads process lists: their modules are not even imported
        for backend, open_processes in self.loaded.wired("processes"):
            source = open_processes(settings, backend, self.snapshot.touch)
            if source is not None:
                self.process_sources.append(source)
        if settings.processes:
            from warptd.processes.collector import ProcessesCollector

            for lists in self._process_lists():
                self.exposition.registry.register(ProcessesCollector(lists))

    def _process_lists(self) -> list[ListsProcesses]:
        """The process sources that list each process with its memory and engine use."""
        if not self.process_sources:
            return []
        from warptd.processes.collector import ListsProcesses

        return [source for source in self.process_sources if isinstance(source, ListsProcesses)]

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
        """SM use per container for splitting shared GPUs' energy, where a process source polls it."""
        lists = self._process_lists()
        if not lists:
            return None
        from warptd.k8s.containers import ContainerOwners
        from warptd.k8s.shares import SmShares

        roots = (Path("/"), settings.procfs / "1" / "root")  # the runtime's bundles, as mounted or the host's
        return SmShares(lists[0], ContainerOwners(roots)).by_owner

    def _workload_energy(self, settings: Settings) -> WorkloadEnergy | None:
        """Energy per Slurm job, unit, container and user (--workloads), from the process lists."""
        if not settings.workloads:
            return None
        from warptd.recording.selection import available_targets
        from warptd.workloads.collector import WorkloadCollector
        from warptd.workloads.energy import ProcessSource, WorkloadEnergy
        from warptd.workloads.history import WorkloadHistory

        if self.loaded.node_rules():
            from warptd.processes.device_files import open_device_files

            self.device_files = open_device_files(
                settings, self.loaded, self.snapshot, lambda: self.settings.interval
            )
        sources: list[ProcessSource] = list(self.process_sources)
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
        monitors = (self.pods, *self.event_monitors, *self.process_sources, self.device_files, self.workloads)
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
        for source in self.process_sources:
            source.reconfigure(new)
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
