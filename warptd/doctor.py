"""``warptd doctor``: is warptd right on this node, and what does it cost here?

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
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from warptd.backends.base import AcceleratorBackend
from warptd.backends.checkup import (
    INTERVALS,
    Absent,
    Agreement,
    BackendCheckup,
    ChecksItself,
    CheckupPlan,
    DeviceCheckup,
    Frozen,
    ReadPrice,
    interval_key,
    sampled_prices,
    sdk_versions,
)
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


class Excluded(Frozen):
    """A metric family the selection leaves out, and why."""

    family: str
    reason: str


class DoctorReport(Frozen):
    """What ``warptd doctor --json`` prints."""

    node: str
    seconds: float  # how long the doctor took
    quick: bool
    intervals: tuple[str, ...]  # the --interval values expected CPU is given at
    backends: tuple[BackendCheckup, ...]
    unavailable: dict[str, str]  # the backends that did not load, and why
    excluded: tuple[Excluded, ...]
    other_series: int  # series of no device: the backends' own, process_*
    cpu_per_second: dict[str, float]  # the node's reads, CPU seconds a second, by --interval
    disagreements: int


def run_doctor(settings: Settings, loaded: Loaded, as_json: bool, quick: bool) -> int:
    """Examine the node, print the report (a table, or JSON); 1 where two paths disagree."""
    report = examine(settings, loaded, quick)
    sys.stdout.write(report.model_dump_json(indent=2) + "\n" if as_json else render(report))
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
        body = Exposition(snapshot, node=settings.node, selection=selection).render(None, None)[0]
    finally:
        sampler.stop()
    series, other = _series(body.decode())
    checkups = [_with_series(checkup, series, selection) for checkup in checkups]
    return DoctorReport(
        node=settings.node,
        seconds=time.monotonic() - started,
        quick=quick,
        intervals=tuple(map(interval_key, intervals)),
        backends=tuple(checkups),
        unavailable=dict(loaded.unavailable),
        excluded=_excluded(selection),
        other_series=other,
        cpu_per_second={interval_key(i): sum(c.cpu_per_second(i) for c in checkups) for i in intervals},
        disagreements=sum(a.status == "disagree" for c in checkups for a in c.agreements),
    )


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
    if isinstance(backend, PowerBackend):
        prices = sampled_prices(
            backend.read_costs,
            lambda: read_domains(backend),
            samples=plan.calls,
            settings=settings,
            intervals=plan.intervals,
            max_interval=backend.max_interval,
        )
        return BackendCheckup(
            backend=backend.name,
            source=source,
            kind="power",
            sdk=sdk_versions(source),
            prices=prices,
            notes=() if prices else (_UNPRICED,),
        )
    indices = list(range(backend.get_device_count()))
    prices = sampled_prices(
        backend.read_costs,
        lambda: read_devices(backend, indices, {}),
        samples=plan.calls,
        settings=settings,
        intervals=plan.intervals,
        max_interval=backend.max_interval,
    )
    state = snapshot.get(backend.name)
    infos = state.devices_info if state is not None else []
    return BackendCheckup(
        backend=backend.name,
        source=source,
        kind=device_kind(backend.is_accelerator),
        driver=backend.get_driver_version(),
        sdk=sdk_versions(source),
        prices=prices,
        devices=tuple(DeviceCheckup(index=i.index, model=i.model, uuid=i.uuid) for i in infos),
        notes=() if prices else (_UNPRICED,),
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
    """Series by (backend, device) and family in an exposition; and how many belong to no device."""
    devices: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    other = 0
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = sample.labels
            if "backend" in labels and "device" in labels:
                devices[labels["backend"], labels["device"]][sample.name] += 1
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


# -- the table -----------------------------------------------------------------------------------------
def render(report: DoctorReport) -> str:
    """The report for a person: one section per backend, then the node."""
    lines = []
    for checkup in report.backends:
        lines += _backend(checkup, report.intervals)
        lines.append("")
    lines += _node(report)
    return "\n".join(lines) + "\n"


def _backend(checkup: BackendCheckup, intervals: Sequence[str]) -> list[str]:
    devices = checkup.devices
    models = Counter(device.model for device in devices)
    what = ", ".join(f"{count} x {model}" for model, count in models.items()) or checkup.kind
    lines = [f"{checkup.backend} ({checkup.source}): {what}"]
    versions = [f"driver {checkup.driver}"] if checkup.driver else []
    versions += [f"{name} {version}" for name, version in checkup.sdk.items()]
    if versions:
        lines.append("  " + "; ".join(versions))
    if checkup.numbering is not None:
        lines.append(f"  field numbering: {checkup.numbering.why}")
        lines += _durations(checkup)
    lines += [f"  note: {note}" for note in checkup.notes]
    prices = _prices_across(checkup)
    if prices:
        lines += ["", *_table(_price_rows(prices, intervals), indent=2)]
        if devices and any(device.prices for device in devices):
            lines.append(
                "  (CPU per read: each device's median; the median over devices, their range in brackets)"
            )
    if checkup.refresh:
        rows = [("VALUE", "CHANGES EVERY", "POLLED")]
        for refresh in checkup.refresh:
            gap = (
                _duration(refresh.median_seconds) if refresh.median_seconds is not None else "no change seen"
            )
            every = _duration(refresh.poll_seconds)
            polled = f"device {refresh.device}, {refresh.polled_seconds:.1f} s, every {every}"
            rows.append((refresh.value, gap, polled))
        lines += ["", *_table(rows, indent=2)]
    if checkup.agreements:
        lines += ["", "  PATHS THAT MUST AGREE", *_agreements(checkup.agreements)]
    lines += _series_lines(devices)
    lines += _absent_lines(devices)
    if checkup.prices or any(device.prices for device in devices):
        lines.append("")
        lines.append("  expected CPU of its reads: " + _cpu_text(checkup, intervals))
    return lines


def _durations(checkup: BackendCheckup) -> list[str]:
    answered = Counter(tuple(device.durations.items()) for device in checkup.devices)
    lines = []
    for durations, count in answered.items():
        ids = ", ".join(f"{reason} {field_id}" for reason, field_id in durations) or "none"
        lines.append(f"  clock-event durations answered: {ids} ({count} of {len(checkup.devices)} devices)")
    return lines


def _prices_across(checkup: BackendCheckup) -> list[tuple[ReadPrice, list[float]]]:
    """Each read once: the backend's own, then each device read's with every device's CPU."""
    if checkup.prices:
        return [(price, [price.cpu_seconds]) for price in checkup.prices]
    by_read: dict[str, tuple[ReadPrice, list[float]]] = {}
    for device in checkup.devices:
        for price in device.prices:
            by_read.setdefault(price.read, (price, []))[1].append(price.cpu_seconds)
    return list(by_read.values())


def _price_rows(
    prices: Iterable[tuple[ReadPrice, list[float]]], intervals: Sequence[str]
) -> list[tuple[str, ...]]:
    rows = [("READ", "CHARGED", "CPU/READ", "CADENCE", *(f"/s @{i} s" for i in intervals))]
    for price, spent in prices:
        cpu = _duration(statistics.median(spent))
        if len(spent) > 1 and min(spent) > 0 and max(spent) / min(spent) > 1.2:
            cpu += f" ({_duration(min(spent))}-{_duration(max(spent))})".replace(" µs-", "-").replace(
                " ms-", "-"
            )
        rates = (f"{price.per_second.get(i, 0.0):.2f}" for i in intervals)
        rows.append((price.read, price.charged_as or "-", cpu, price.cadence, *rates))
    return rows


def _agreements(agreements: Iterable[Agreement]) -> list[str]:
    by_pair: dict[str, list[Agreement]] = defaultdict(list)
    for agreement in agreements:
        by_pair[agreement.pair].append(agreement)
    lines = []
    for pair, found in by_pair.items():
        statuses = Counter(a.status for a in found)
        lines.append(f"  {pair}: " + ", ".join(f"{status} {count}" for status, count in statuses.items()))
        for agreement in found:
            if agreement.status == "disagree":
                lines.append(f"    DISAGREE, device {agreement.device}: {agreement.detail}")
        for detail, count in Counter(a.detail for a in found if a.status == "skipped").items():
            lines.append(f"    skipped on {count}: {detail}")
        agreeing = next((a for a in found if a.status == "agree"), None)
        if agreeing is not None:
            lines.append(f"    e.g. device {agreeing.device}: {agreeing.detail}")
    return lines


def _series_lines(devices: Sequence[DeviceCheckup]) -> list[str]:
    if not devices:
        return []
    kinds = Counter(tuple(device.series.items()) for device in devices)
    lines = [""]
    for series, count in kinds.items():
        total = sum(n for _, n in series)
        lines.append(f"  SERIES: {total} per device on {count} of {len(devices)} devices")
        lines += _wrapped((f"{name} {n}" for name, n in series), indent=4)
    return lines


def _absent_lines(devices: Sequence[DeviceCheckup]) -> list[str]:
    absent = Counter(entry for device in devices for entry in device.absent)
    if not absent:
        return []
    lines = ["", "  ABSENT"]
    for entry, count in absent.items():
        lines.append(f"  {', '.join(entry.families)} ({count} of {len(devices)} devices):")
        lines.append(f"    {entry.reason}")
    return lines


def _cpu_text(checkup: BackendCheckup, intervals: Sequence[str]) -> str:
    parts = []
    for key in intervals:
        total = checkup.cpu_per_second(float(key))
        text = f"--interval {key}: {total:.2%} of a core"
        if len(checkup.devices) > 1 and not checkup.prices:
            text += f" ({total / len(checkup.devices):.2%} per device)"
        parts.append(text)
    return "; ".join(parts)


def _node(report: DoctorReport) -> list[str]:
    cpu = "; ".join(
        f"--interval {key}: {value:.2%} of a core" for key, value in report.cpu_per_second.items()
    )
    lines = [f"node {report.node or '(unnamed)'}: expected CPU of the reads, every backend: {cpu}"]
    lines.append(
        f"  series of no device (the backends' own, process_*): {report.other_series}; the daemon adds its "
        "features' (XID, windows, stress, pods, workloads)"
    )
    if report.excluded:
        lines.append("  left out by the metric selection (docs/configuration.md says why):")
        lines += _wrapped((entry.family for entry in report.excluded), indent=4, separator=", ")
    if report.unavailable:
        names = ", ".join(sorted(report.unavailable))
        lines.append(f"  not loaded: {names} (warptd list --verbose says why)")
    compared = any(a.status != "skipped" for backend in report.backends for a in backend.agreements)
    verdict = "no pair of paths to compare here"
    if report.disagreements:
        verdict = f"{report.disagreements} pair(s) of paths DISAGREE"
    elif compared:
        verdict = "every pair of paths agrees"
    lines.append(f"checked in {report.seconds:.1f} s{' (quick)' if report.quick else ''}: {verdict}")
    return lines


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds * 1e6:.0f} µs"


def _table(rows: Sequence[Sequence[str]], indent: int) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        " " * indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _wrapped(items: Iterable[str], indent: int, separator: str = "; ", width: int = 110) -> list[str]:
    lines, line = [], ""
    for item in items:
        candidate = f"{line}{separator}{item}" if line else item
        if line and indent + len(candidate) > width:
            lines.append(" " * indent + line + separator.rstrip())
            candidate = item
        line = candidate
    return [*lines, " " * indent + line] if line else lines
