"""NVIDIA XID errors from NVML events, counted per GPU and XID code on a thread of their own.

The thread blocks in ``nvmlEventSetWait_v2`` with a short timeout (so ``stop()`` returns within about
a second); a scrape only reads the counters kept here, never NVML. GPUs that cannot deliver XID events
(vGPU, some consumer boards, no permission) are skipped with one log line each.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from warptd.backends.nvidia import session as nvml_session
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.metrics import catalog as m

if TYPE_CHECKING:
    from warptd.backends.base import AcceleratorBackend
    from warptd.config import Settings

log = structlog.get_logger("warptd.xid")

#: XIDs the shipped alert rules watch: exported as 0 from the start on every monitored GPU, so
#: ``increase()`` sees their first occurrence (a counter series born at 1 shows no increase).
ALERTED_XIDS = (48, 63, 64, 74, 79, 94, 95, 119, 120)
#: Distinct XID codes counted per GPU (the driver defines fewer than 200); more are logged, not counted.
MAX_CODES = 256
#: One log line per (GPU, XID) in this many seconds, however many events arrive.
LOG_EVERY_S = 60.0
#: After a registration that failed for a reason other than "not supported", try again this often.
RETRY_REGISTER_S = 30.0


@dataclass
class XidDevice:
    """The XID counters of one GPU, keyed by its UUID (its index may change across a reopen)."""

    index: int
    uuid: str
    counts: dict[int, int] = field(default_factory=dict)
    last_event: float | None = None  # Unix time of the last XID event
    last_code: int | None = None  # the code of the last XID event (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS)


class XidMonitor:
    """Counts XID critical-error events of every GPU on the shared NVML session."""

    def __init__(
        self,
        backend: str = "nvidia",
        timeout_ms: int = 1000,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        """Acquire the NVML session; raises BackendUnavailableError where NVML is absent."""
        self.backend = backend
        self.timeout_ms = timeout_ms
        self._on_change = on_change
        self._lease = nvml_session.lease()
        self._session = self._lease.session
        self._nvml = nvml = self._session.nvml
        self._xid = nvml.nvmlEventTypeXidCriticalError
        # Double-bit ECC events are only logged: the driver reports them as XID 48 too.
        self._wanted = self._xid | nvml.nvmlEventTypeDoubleBitEccError
        self._set: Any = None
        self._set_initialisation = 0  # the NVML initialisation the set belongs to
        self._targets: dict[int | None, XidDevice] = {}  # handle address -> device
        self._devices: dict[str, XidDevice] = {}
        self._generation = self._session.generation
        self._lock = threading.Lock()
        self._logged: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._released = False
        self._retry_at: float | None = None  # when to register again after a transient failure

    # -- registration -------------------------------------------------------------------------
    def register(self) -> int:
        """(Re)create the event set over the session's current handles; returns the GPUs registered."""
        nvml = self._nvml
        with self._session.lock:
            self._free_set()
            self._generation = self._session.generation
            self._retry_at = None
            try:
                event_set = nvml.nvmlEventSetCreate()
            except nvml.NVMLError as exc:
                log.info("xid_events_unavailable", backend=self.backend, reason=str(exc))
                self._retry_later(exc)
                return 0
            targets: dict[int | None, XidDevice] = {}
            for index, handle in enumerate(self._session.handles):
                if handle is None:  # lost at the last reopen
                    continue
                try:
                    uuid = nvml_session.text(nvml.nvmlDeviceGetUUID(handle))
                    mask = nvml.nvmlDeviceGetSupportedEventTypes(handle) & self._wanted
                    if not mask & self._xid:
                        raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
                    nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
                except nvml.NVMLError as exc:
                    log.info("xid_events_unavailable", backend=self.backend, device=index, reason=str(exc))
                    self._retry_later(exc)
                    continue
                targets[_address(handle)] = self._device(index, uuid)
            if targets:
                self._set, self._set_initialisation = event_set, self._session.initialisation
            else:
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlEventSetFree(event_set)
            self._targets = targets
        return len(targets)

    def _retry_later(self, exc: BaseException) -> None:
        """A GPU that cannot deliver events is not asked again; one that failed otherwise is."""
        if self._session.classify(exc) is not ErrorKind.NOT_SUPPORTED:
            self._retry_at = time.monotonic() + RETRY_REGISTER_S

    def _device(self, index: int, uuid: str) -> XidDevice:
        with self._lock:
            device = self._devices.get(uuid)
            if device is None:
                device = self._devices[uuid] = XidDevice(index, uuid, dict.fromkeys(ALERTED_XIDS, 0))
            device.index = index
            return device

    def _free_set(self) -> None:
        """Free the set; one from before a reopen was freed with that NVML already and is dropped."""
        if self._set is not None and self._set_initialisation == self._session.initialisation:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlEventSetFree(self._set)
        self._set = None

    # -- the event thread ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="warptd-xid", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        nvml, failing = self._nvml, None
        while not self._stop.is_set():
            retry = self._retry_at is not None and time.monotonic() >= self._retry_at
            if retry or self._session.generation != self._generation:  # e.g. NVML was reopened
                self.register()
            if self._set is None:
                self._stop.wait(self.timeout_ms / 1000)
                continue
            try:
                # A reopen frees every event set: it waits for this wait, and none starts meanwhile.
                with self._session.event_wait(self._generation) as allowed:
                    data = nvml.nvmlEventSetWait_v2(self._set, self.timeout_ms) if allowed else None
                if data is None:  # a reopen is under way: re-register once it is done
                    self._stop.wait(0.01)
                    continue
            except nvml.NVMLError as exc:
                if exc.value != nvml.NVML_ERROR_TIMEOUT:
                    if failing != exc.value:  # e.g. GPU_IS_LOST until the GPU is gone from the set
                        log.warning("xid_wait_failed", backend=self.backend, error=str(exc))
                        failing = exc.value
                    self._stop.wait(self.timeout_ms / 1000)
                continue
            except Exception:  # keep listening: the thread is the only one that would
                log.exception("xid_wait_failed", backend=self.backend)
                self._stop.wait(self.timeout_ms / 1000)
                continue
            failing = None
            self._record(data)

    def _record(self, data: Any) -> None:
        device = self._targets.get(_address(data.device))
        if device is None:
            log.warning("nvml_event_unknown_device", event_type=data.eventType, data=data.eventData)
            return
        if data.eventType != self._xid:
            self._log(device, f"type_{data.eventType:#x}", "nvml_event", event_type=f"{data.eventType:#x}")
            return
        xid, now = int(data.eventData), time.time()
        with self._lock:
            if xid in device.counts or len(device.counts) < MAX_CODES:
                device.counts[xid] = device.counts.get(xid, 0) + 1
            device.last_event, device.last_code = now, xid
            count = device.counts.get(xid)
        self._log(device, str(xid), "xid_error", xid=xid, count=count, gpu_instance=data.gpuInstanceId)
        if self._on_change is not None:
            self._on_change()

    def _log(self, device: XidDevice, what: str, event: str, **fields: Any) -> None:
        """A warning per (GPU, event kind), at most once a minute, so an XID storm cannot flood the log."""
        key, now = (device.uuid, what), time.monotonic()
        if now - self._logged.get(key, -LOG_EVERY_S) >= LOG_EVERY_S:
            if len(self._logged) >= 4 * MAX_CODES:  # bounded, whatever codes the driver invents
                self._logged.clear()
            self._logged[key] = now
            log.warning(event, backend=self.backend, device=device.index, uuid=device.uuid, **fields)

    # -- what the collector reads -------------------------------------------------------------
    def devices(self) -> list[XidDevice]:
        """A copy of every monitored GPU's counters (never calls NVML)."""
        with self._lock:
            return [
                XidDevice(d.index, d.uuid, dict(d.counts), d.last_event, d.last_code)
                for d in sorted(self._devices.values(), key=lambda d: (d.index, d.uuid))
            ]

    def stop(self) -> None:
        """Stop the thread (within about one wait timeout), free the event set, release NVML."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_ms / 1000 + 2)
            if self._thread.is_alive():  # a wait stuck in the driver: leave its set alone
                log.warning("xid_thread_did_not_stop", backend=self.backend)
                return
        if not self._released:
            self._released = True
            with self._session.lock:
                self._free_set()
            self._lease.release()


def xid_events_wanted(settings: Settings) -> bool:
    """XID events are counted (the daemon's, and so what ``warptd doctor`` counts): on, and a family
    of theirs exported."""
    return settings.xid_events and settings.metric_selection.reads(m.XID_ERRORS.name, m.LAST_XID.name)


def open_events(
    settings: Settings, backend: AcceleratorBackend, on_change: Callable[[], None] | None = None
) -> XidMonitor | None:
    """The ``nvidia`` vendor's events: ``backend``'s XIDs, where ``--xid-events`` and the metric selection
    want them (registered: ``start()`` it); None otherwise or where no GPU delivers them."""
    return open_xid_monitor(backend.name, on_change) if xid_events_wanted(settings) else None


def open_xid_monitor(
    backend: str = "nvidia", on_change: Callable[[], None] | None = None, timeout_ms: int = 1000
) -> XidMonitor | None:
    """A registered monitor (``start()`` it), or None where NVML is absent or no GPU delivers XIDs."""
    try:
        monitor = XidMonitor(backend, timeout_ms, on_change)
    except BackendUnavailableError as exc:
        log.debug("xid_events_unavailable", backend=backend, reason=str(exc))
        return None
    if not monitor.register():
        log.info("xid_events_off", backend=backend, reason="no GPU delivers XID events")
        monitor.stop()
        return None
    return monitor


def _address(handle: Any) -> int | None:
    """A handle's address: an event names its GPU by the same pointer the session's handle holds."""
    return ctypes.cast(handle, ctypes.c_void_p).value
