"""Wires backends, sampler, exposition and HTTP server together, and runs until signalled."""

from __future__ import annotations

import gc
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Protocol

import structlog
from prometheus_client import CollectorRegistry

from warptd import __version__
from warptd.config import RELOADABLE, Settings, SettingsError
from warptd.events.collector import XidCollector
from warptd.exporter.exposition import Exposition
from warptd.http.app import Router
from warptd.http.limits import (
    HttpLimits,
    favour_the_event_loop,
    raise_nofile_limit,
    return_large_buffers,
    share_heap_arenas,
)
from warptd.http.routes import add_core_routes, add_openapi_route
from warptd.http.server import WarptdHTTPServer
from warptd.http.stress_routes import add_stress_routes
from warptd.http.webconfig import BasicAuth, load_web_config, ssl_context
from warptd.http.window_routes import add_window_routes
from warptd.http.workload_routes import add_workload_routes
from warptd.k8s.attribution import PodAttribution, from_settings
from warptd.logs import configure_logging
from warptd.metrics import catalog as m
from warptd.recording.recorder import with_carbon_and_cost
from warptd.recording.windows import WindowLimits, WindowManager
from warptd.registry import Loaded, load_backends
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot
from warptd.stress.setup import make_job_manager
from warptd.systemd import Notifier

if TYPE_CHECKING:  # the opt-in features' modules load when they are on (--processes, --workloads, pods)
    from warptd.events.xid import XidMonitor
    from warptd.k8s.energy import SmUse
    from warptd.processes.device_files import DeviceFiles
    from warptd.processes.source import ListsProcesses, ProcessPoller
    from warptd.workloads.energy import WorkloadEnergy
    from warptd.workloads.history import WorkloadHistory

log = structlog.get_logger("warptd")
#: What pod energy (a split of each allocated device's energy every sample) is for.
POD_ENERGY_FAMILIES = (m.POD_ENERGY, m.POD_ENERGY_SPLIT, m.POD_ENERGY_UNATTRIBUTED)


class Monitor(Protocol):
    """A thread beside the sampler that feeds the exposition (pods, XIDs, processes, workloads)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Daemon:
    """The running service. ``start()`` returns once the HTTP server listens; ``stop()`` is idempotent."""

    def __init__(
        self, settings: Settings, loaded: Loaded | None = None, reload: Callable[[], Settings] | None = None
    ) -> None:
        self.settings = settings
        self._reload = reload
        self.loaded = loaded if loaded is not None else load_backends(settings)
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
        self.router = Router()
        add_core_routes(self.router, self.snapshot, self.exposition, self.loaded.unavailable)
        self._token = settings.stress_token_value()
        add_stress_routes(self.router, self.stress, lambda: self._token)
        add_window_routes(self.router, self.windows, lambda: self._token)
        add_workload_routes(self.router, self.workloads, lambda: self._token, self.workload_history)
        add_openapi_route(self.router)
        host, port = settings.listen_address
        web = load_web_config(settings.web_config_file) if settings.web_config_file else None
        self._scheme = "https" if web and web.tls_server_config else "http"
        raise_nofile_limit()  # thousands of connections need thousands of descriptors
        return_large_buffers()  # report bodies are megabytes: give their memory back once sent
        share_heap_arenas()  # fewer glibc heaps, fewer freed pages kept between live ones
        favour_the_event_loop()  # a scrape waits a shorter turn for the GIL behind busy handlers
        self.server = WarptdHTTPServer(
            host,
            port,
            self.router,
            limits=http_limits(settings),
            tls=ssl_context(web.tls_server_config) if web and web.tls_server_config else None,
            basic_auth=BasicAuth(web.basic_auth_users) if web and web.basic_auth_users else None,
        )
        self.notifier = Notifier()
        self._http_thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

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
        from warptd.processes.source import ListsProcesses

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

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        self.sampler.start()
        for monitor in self._monitors():
            monitor.start()
        self._http_thread = self.server.start()
        # What start-up built lives as long as the process: out of the cyclic GC's full passes, which
        # otherwise walk it all (~20 ms at 70k objects) while a scrape waits.
        gc.freeze()
        threading.Thread(target=self._announce_ready, name="warptd-ready", daemon=True).start()
        self.notifier.start_watchdog(self.healthy)
        log.info(
            "warptd_started",
            url=self.url,
            version=__version__,
            listen=f"{self.settings.listen_address[0] or '*'}:{self.port}",
            backends=sorted(self.sampler.backends),
            interval_s=self.settings.interval,
        )

    @property
    def url(self) -> str:
        """Where the metrics are served, as a URL to paste (``localhost`` when every address listens)."""
        host = self.settings.listen_address[0] or "localhost"
        host = f"[{host}]" if ":" in host else host
        return f"{self._scheme}://{host}:{self.port}/metrics"

    def healthy(self) -> bool:
        """Alive for the watchdog: the HTTP thread serves and the scheduler runs."""
        http_alive = self._http_thread is not None and self._http_thread.is_alive()
        return http_alive and self.sampler.scheduler.running and not self._stopped.is_set()

    def _announce_ready(self) -> None:
        """READY=1 once every backend finished its first sample (bounded by one timeout); at once
        when none loaded (the process is up; /readyz says 503 and why)."""
        deadline = time.monotonic() + self.settings.interval + self.settings.sample_timeout + 5
        while self.snapshot.pending() and time.monotonic() < deadline and not self._stopped.is_set():
            time.sleep(0.05)
        if not self._stopped.is_set():
            self.notifier.ready(f"serving {len(self.sampler.backends)} backends on port {self.port}")

    def stop(self) -> None:
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self.notifier.stopping()
            self.server.shutdown()  # first: no request can start a job from here on
            self.server.server_close()
            if self.stress is not None:
                self.stress.shutdown()
            if self.windows is not None:
                self.windows.shutdown()
            self.sampler.stop()
            for monitor in self._monitors():
                monitor.stop()
            self._stopped.set()
        log.info("warptd_stopped")

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT."""

        def on_signal(signum: int, _: FrameType | None) -> None:
            log.info("signal_received", signal=signal.Signals(signum).name)
            threading.Thread(target=self.stop, name="warptd-stop").start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(
            signal.SIGHUP, lambda *_: threading.Thread(target=self.reload, name="warptd-reload").start()
        )
        self.start()
        while not self._stopped.wait(timeout=1.0):
            pass
        return 0

    def reload(self) -> None:
        """SIGHUP: re-read flags, environment and the config file; apply what can change live.

        A bad file changes nothing. Settings that shape the process (listen, backends, sysfs,
        stress on/off) are reported as needing a restart.
        """
        if self._reload is None:
            return
        try:
            new = self._reload()
            token = new.stress_token_value()
        except SettingsError as exc:
            log.error("config_reload_failed", error=str(exc))
            return
        old = self.settings
        changed = sorted(k for k in type(old).model_fields if getattr(old, k) != getattr(new, k))
        restart = [k for k in changed if k not in RELOADABLE]
        configure_logging(new.log_level, new.log_format)
        self.sampler.reconfigure(new)
        for source in self.process_sources:
            source.reconfigure(new)
        self.snapshot.stale_after = new.stale_after
        if self.stress is not None:
            self.stress.max_duration_s = new.stress_max_duration
            self.stress.history = new.stress_history
        self._token = token
        if self.windows is not None:
            self.windows.limits = window_limits(new)
        self.settings = new
        log.info("config_reloaded", changed=changed, needs_restart=restart, interval_s=new.interval)


def http_limits(settings: Settings) -> HttpLimits:
    """The HTTP server's limits from the ``http_*`` settings."""
    return HttpLimits(
        header_timeout=settings.http_header_timeout,
        body_timeout=settings.http_body_timeout,
        idle_timeout=settings.http_idle_timeout,
        max_connections=settings.http_max_connections,
        max_client_connections=settings.http_max_client_connections,
        max_requests=settings.http_max_requests,
        backlog=settings.http_backlog,
        max_header_bytes=settings.http_max_header_bytes,
        max_response_bytes=settings.http_max_response_bytes,
    )


def window_limits(settings: Settings) -> WindowLimits:
    """Energy windows' bounds (open, duration, history, lease, memory) from the ``window_*`` settings."""
    return WindowLimits(
        max_open=settings.window_max_open,
        max_duration_s=settings.window_max_duration,
        history=settings.window_history,
        lease_min_s=settings.window_lease_min,
        lease_max_s=settings.window_lease_max,
        memory_bytes=settings.window_memory,
    )


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
        window_limits(settings),
        carbon=lambda r: with_carbon_and_cost(
            r, sampler.settings.carbon_intensity, sampler.settings.energy_price
        ),
        interval=lambda: sampler.settings.window_interval,
        on_end=energy.on_end,
        on_change=snapshot.touch,
    )
    registry.register(WindowCollector(manager, energy))
    return manager
