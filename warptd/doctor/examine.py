"""``warptd doctor``'s checks: is warptd right on this node, and what does it cost here?

For each backend loaded (as ``warptd list`` and ``warptd sample`` load them): the SDK and driver
versions; each read's CPU, how often the read plan makes it and how often its values change; pairs of
paths to one value that must agree; the series warptd will export per device (one sample rendered
through its own exporter, with the settings' metric selection) and those it leaves absent, and why;
and the CPU its reads will take at ``--interval 1`` and ``0.1``. Exits 1 where two paths disagree.

It samples with its own sampler, as ``warptd sample`` does: no daemon, no HTTP server. The NVIDIA
backend checks itself (:mod:`warptd.backends.nvidia.checkup`); any other backend is priced from the
CPU its reads charge over a few samples (:func:`warptd.backends.checkup.sampled_prices`).
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from warptd.backends.base import AcceleratorBackend
from warptd.backends.checkup import (
    INTERVALS,
    Absent,
    BackendCheckup,
    ChecksItself,
    CheckupPlan,
    DeviceCheckup,
    interval_key,
    sampled_prices,
    sdk_versions,
)
from warptd.doctor.report import DoctorReport, Excluded
from warptd.doctor.text import render, text_width
from warptd.events.collector import XidCollector
from warptd.exporter.exposition import Exposition
from warptd.logs import get_logger
from warptd.metrics import catalog
from warptd.metrics.selection import DEFAULT_EXCLUDE, MetricSelection
from warptd.models import device_kind
from warptd.power.base import PowerBackend
from warptd.sampling.reads import read_devices, read_domains
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot

if TYPE_CHECKING:
    from warptd.config import Settings
    from warptd.registry import Loaded

log = get_logger("warptd.doctor")

#: The second sample comes this long after the first: rates need a baseline, and GPM two samples a
#: second apart (it samples at most once a second outside windows).
SECOND_SAMPLE_AFTER_S = 1.0
#: The doctor samples at most this far apart, whatever ``--interval`` says (a fleet's 15 s would
#: keep GPM from its second sample).
LONGEST_INTERVAL_S = 1.0


_UNPRICED = "its reads charge no CPU to read_costs (warptd_backend_read_cpu_seconds_total): not priced"


def run_doctor(settings: Settings, loaded: Loaded, as_json: bool, quick: bool) -> int:
    """Examine the node, print the report (a table, or JSON); 1 where two paths disagree."""
    report = examine(settings, loaded, quick)
    sys.stdout.write(report.model_dump_json(indent=2) + "\n" if as_json else render(report, text_width()))
    return 1 if report.disagreements else 0


def examine(settings: Settings, loaded: Loaded, quick: bool = False) -> DoctorReport:
    """Check every loaded backend, then shut them down."""
    started = time.monotonic()
    intervals = tuple(dict.fromkeys((*INTERVALS, settings.interval)))
    plan = CheckupPlan.quick(intervals) if quick else CheckupPlan(intervals=intervals)
    # Sampled at most a second apart, and never saving energy totals (a daemon's state file is its own).
    sampling = settings.model_copy(
        update={"interval": min(settings.interval, LONGEST_INTERVAL_S), "state_dir": None}
    )
    backends: list[AcceleratorBackend | PowerBackend] = [*loaded.accelerators, *loaded.power]
    for backend in backends:
        backend.reconfigure(sampling)
    snapshot = Snapshot(stale_after=math.inf)
    sampler = Sampler(sampling, snapshot, loaded.accelerators, loaded.power)
    try:
        scheduled = set(sampler.scheduled())
        # Priced from their own samples first: their first one reads the slow values too.
        sampled = {
            b.name: _checked(b, lambda b=b: _sampled(b, snapshot, plan, settings))
            for b in backends
            if b.name in scheduled and not isinstance(b, ChecksItself)
        }
        first = time.monotonic()
        sampler.sample_all()  # the first full read: the plan built, the field numbering answered
        checkups = []
        for b in backends:
            if isinstance(b, ChecksItself):
                checkups.append(_checked(b, lambda b=b: b.checkup(plan)))
            else:  # priced above, or published from its companion's reads
                checkups.append(sampled.get(b.name) or _companion(b))
        time.sleep(max(0.0, first + SECOND_SAMPLE_AFTER_S - time.monotonic()))
        sampler.sample_all()
        selection = settings.metric_selection
        body = _rendered(settings, loaded, snapshot)
    finally:
        sampler.stop()
    series, other = _series(body)
    checkups = [_with_series(checkup, series, selection) for checkup in checkups]
    return DoctorReport(
        node=settings.node,
        seconds=time.monotonic() - started,
        quick=quick,
        intervals=tuple(map(interval_key, intervals)),
        health_interval=settings.health_interval,
        energy_interval=settings.energy_interval,
        backends=tuple(checkups),
        unavailable=dict(loaded.unavailable),
        excluded=_excluded(selection),
        other_series=other,
        cpu_per_second={interval_key(i): sum(c.cpu_per_second(i) for c in checkups) for i in intervals},
        disagreements=sum(a.status == "disagree" for c in checkups for a in c.agreements),
    )


def _rendered(settings: Settings, loaded: Loaded, snapshot: Snapshot) -> str:
    """The body the daemon's /metrics would have with these settings: the samples, and the collectors
    whose series belong to a device (XID counts, dcgm-exporter's series); features that need the
    daemon running (windows, stress jobs, pods, processes, workloads) aside."""
    exposition = Exposition(snapshot, node=settings.node, selection=settings.metric_selection)
    # the events the vendors declare: registered, never started, so their counts stand at 0
    events = [m for backend, open_events in loaded.wired("events") if (m := open_events(settings, backend))]
    try:
        for monitor in events:
            exposition.registry.register(XidCollector(monitor))
        if settings.compat == "dcgm-exporter":
            from warptd.exporter.dcgm import DcgmCompatCollector

            xid, release = next(iter(events), None), settings.dcgm_exporter_release
            exposition.registry.register(DcgmCompatCollector(snapshot, settings.node, None, xid, release))
        return exposition.render(None, None)[0].decode()
    finally:
        for monitor in events:
            monitor.stop()


def _checked(
    backend: AcceleratorBackend | PowerBackend, check: Callable[[], BackendCheckup]
) -> BackendCheckup:
    """``check()`` of one backend; where it fails, a note saying so (the others are still checked)."""
    try:
        return check()
    except Exception as exc:  # a bug in one backend's checkup
        log.error("checkup_failed", backend=backend.name, error=repr(exc))
        return BackendCheckup(
            backend=backend.name,
            source=str(backend.source),
            kind="accelerator" if isinstance(backend, AcceleratorBackend) else "power",
            notes=(f"its checkup failed: {exc!r}",),
        )


def _sampled(
    backend: AcceleratorBackend | PowerBackend, snapshot: Snapshot, plan: CheckupPlan, settings: Settings
) -> BackendCheckup:
    """A backend without a checkup of its own: its kinds of read priced over a few samples of it."""
    source = str(backend.source)
    power = isinstance(backend, PowerBackend)
    indices = [] if power else list(range(backend.get_device_count()))
    prices = sampled_prices(
        backend.read_costs,
        (lambda: read_domains(backend)) if power else (lambda: read_devices(backend, indices, {})),
        samples=plan.calls,
        settings=settings,
        intervals=plan.intervals,
        max_interval=backend.max_interval,
    )
    notes = () if prices else (_UNPRICED,)
    sdk = sdk_versions(backend.sdk)
    if power:
        return BackendCheckup(
            backend=backend.name, source=source, kind="power", sdk=sdk, prices=prices, notes=notes
        )
    state = snapshot.get(backend.name)
    infos = state.devices_info if state is not None else []
    return BackendCheckup(
        backend=backend.name,
        source=source,
        kind=device_kind(backend.is_accelerator),
        driver=backend.get_driver_version(),
        sdk=sdk,
        prices=prices,
        devices=tuple(DeviceCheckup(index=i.index, model=i.model, uuid=i.uuid) for i in infos),
        notes=notes,
    )


def _companion(backend: AcceleratorBackend | PowerBackend) -> BackendCheckup:
    """A power backend published from its companion's reads: no reads of its own."""
    companion = getattr(backend, "companion", None)
    return BackendCheckup(
        backend=backend.name,
        source=str(backend.source),
        kind="power",
        notes=(f"no reads of its own: its domains come from {companion}'s reads",),
    )


def _series(body: str) -> tuple[dict[tuple[str, str], Counter[str]], int]:
    """Series by (backend, device) and family in an exposition; and how many belong to no device.
    dcgm-exporter's series (``--compat``) name a whole GPU by its index, ``gpu``; a MIG instance's
    (``GPU_I_ID``) count as of no device."""
    devices: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    other = 0
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = sample.labels
            if "backend" in labels and "device" in labels:
                devices[labels["backend"], labels["device"]][sample.name] += 1
            elif sample.name.startswith("DCGM_") and "gpu" in labels and not labels.get("GPU_I_ID"):
                devices["nvidia", labels["gpu"]][sample.name.removesuffix("_total")] += 1
            else:
                other += 1
    return devices, other


def _with_series(
    checkup: BackendCheckup, series: dict[tuple[str, str], Counter[str]], selection: MetricSelection
) -> BackendCheckup:
    """Each device's series by family, and of what it lacks only the families exported without a
    series."""
    devices = []
    for device in checkup.devices:
        counted = series.get((checkup.backend, str(device.index)), Counter())
        absent = []
        for entry in device.absent:
            families = tuple(f for f in entry.families if selection.wants(f) and not counted.get(f))
            if families:
                absent.append(Absent(families=families, reason=entry.reason))
        devices.append(
            device.model_copy(update={"series": dict(sorted(counted.items())), "absent": tuple(absent)})
        )
    return checkup.model_copy(update={"devices": tuple(devices)})


def _excluded(selection: MetricSelection) -> tuple[Excluded, ...]:
    """The catalog's families the selection does not export, with the default's reason."""
    names = sorted({spec.name for spec in catalog.EVERY} - selection.exported)
    return tuple(
        Excluded(
            family=name,
            reason=f"left out by default: {DEFAULT_EXCLUDE[name]}"
            if name in DEFAULT_EXCLUDE
            else "left out by --metrics-exclude (WARPTD_METRICS_EXCLUDE, the config file)",
        )
        for name in names
    )
