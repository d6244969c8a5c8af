"""What ``warptd doctor`` prints for a person: the two answers first (is warptd right here? what does it
cost here?) in plain words, then each backend in detail, every line within the width it is given (a
terminal's, 80 columns at most; 80 on a pipe). ``--json`` prints the report itself instead.
"""

from __future__ import annotations

import os
import statistics
import sys
import textwrap
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import TextIO

from warptd.backends.checkup import EACH_SAMPLE, Agreement, BackendCheckup, DeviceCheckup, ReadPrice
from warptd.doctor.report import DoctorReport

#: The widest the text gets, and the narrowest a terminal makes it.
WIDTH = 80
NARROWEST = 40
#: Where each part of the report is explained, and where the families left out are.
GUIDE = "docs/hardware.md#warptd-doctor"
SELECTION_GUIDE = "docs/metrics.md#families-you-choose"
_PREFIX = "warptd_device_"


def text_width(stream: TextIO | None = None) -> int:
    """The width of the terminal ``stream`` (stdout) is, or ``$COLUMNS``, at most :data:`WIDTH`;
    :data:`WIDTH` where it is no terminal (a pipe, a file)."""
    stream = stream or sys.stdout
    if not stream.isatty():
        return WIDTH
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        columns = WIDTH
    given = os.environ.get("COLUMNS", "")
    columns = int(given) if given.isdigit() else columns
    return max(NARROWEST, min(WIDTH, columns or WIDTH))


def render(report: DoctorReport, width: int = WIDTH) -> str:
    """The answers, then each backend, then the node, within ``width`` columns."""
    text = _Text(width)
    quick = ", quick" if report.quick else ""
    text.para(f"warptd doctor, node {report.node or '(unnamed)'} (checked in {report.seconds:.1f} s{quick})")
    text.blank()
    text.para(f"Is warptd right here? {_right(report)}", hang=2)
    text.blank()
    text.para(f"What does it cost here? {_cost(report)}", hang=2)
    text.blank()
    text.para(f"Each backend in detail follows; {GUIDE} says how to read it.")
    for checkup in report.backends:
        text.blank()
        _backend(text, checkup, report)
    text.blank()
    _node(text, report)
    return text.done()


# -- the two answers ---------------------------------------------------------------------------------
def _right(report: DoctorReport) -> str:
    """Whether every value read two ways agreed, in sentences."""
    agreements = [a for checkup in report.backends for a in checkup.agreements]
    failed = [
        f"{checkup.backend} ({note.removeprefix('its checkup failed: ')})"
        for checkup in report.backends
        for note in checkup.notes
        if note.startswith("its checkup failed")
    ]
    disagree = [a for a in agreements if a.status == "disagree"]
    if disagree:
        which = _listed([f"{_value(a)} on device {a.device}" for a in disagree])
        answer = (
            f"No. What it reads two ways disagrees: {which}. Its numbers for them cannot be trusted "
            "here until that is found out (below, under 'values read two ways')."
        )
    elif any(a.status == "agree" for a in agreements):
        answer = f"Yes, as far as it can tell. {_compared(agreements)}"
    else:
        answer = "Nothing here is read two ways, so nothing could be compared (NVIDIA GPUs are)."
    if failed:
        answer += f" It could not check {_listed(failed)}."
    return answer


def _compared(agreements: Sequence[Agreement]) -> str:
    """What agreed on how many devices; what could not be compared, and why."""
    agreed, skipped = [], []
    for found in _by_pair(agreements).values():
        statuses = Counter(a.status for a in found)
        if statuses["agree"]:
            agreed.append(f"{_value(found[0])} on {statuses['agree']} of {len(found)} devices")
        if statuses["skipped"]:
            why = Counter(a.detail for a in found if a.status == "skipped").most_common(1)[0][0]
            skipped.append(f"{_capital(_value(found[0]))} was not compared: {why}.")
    return " ".join([f"What it reads two ways agreed: {_listed(agreed)}.", *skipped])


def _cost(report: DoctorReport) -> str:
    """The CPU of the reads at each interval, and the series Prometheus gets."""
    shares = [
        f"{report.cpu_per_second[key]:.1%} at --interval {key}" + (" (the default)" if key == "1" else "")
        for key in report.intervals
        if key in report.cpu_per_second
    ]
    if shares:
        shares[0] = shares[0].replace(" at ", " of one CPU core at ", 1)
    series = [f"{count} for each {model}" for model, count in _series_by_model(report)]
    series.append(f"{report.other_series} of no device (warptd's own, this process's)")
    series[0] = series[0].replace(" for ", " series for ", 1)
    return (
        f"Its reads take {_listed(shares or ['nothing measured'])}. Prometheus gets {_listed(series)}; "
        "the daemon adds those of windows, stress jobs, pods, --processes and --workloads where they "
        "are on."
    )


def _series_by_model(report: DoctorReport) -> list[tuple[str, str]]:
    """(model, its series per device: ``58``, or a range where its devices differ)."""
    by_model: dict[str, list[int]] = defaultdict(list)
    for checkup in report.backends:
        for device in checkup.devices:
            model = "host CPU" if checkup.kind == "cpu" else device.model
            by_model[model].append(sum(device.series.values()))
    found = []
    for model, counts in by_model.items():
        low, high = min(counts), max(counts)
        found.append((model, str(low) if low == high else f"{low}-{high}"))
    return found


# -- one backend ---------------------------------------------------------------------------------------
def _backend(text: _Text, checkup: BackendCheckup, report: DoctorReport) -> None:
    devices = checkup.devices
    models = Counter(device.model for device in devices)
    what = ", ".join(f"{count} x {model}" for model, count in models.items()) or checkup.kind
    text.para(f"{checkup.backend} ({checkup.source}): {what}", hang=2)
    versions = [f"driver {checkup.driver}"] if checkup.driver else []
    versions += [f"{name} {version}" for name, version in checkup.sdk.items()]
    if versions:
        text.para(", ".join(versions), indent=2, hang=4)
    if checkup.numbering is not None:
        text.para(f"Field ids: {checkup.numbering.why}.", indent=2, hang=4)
        for durations, count in Counter(tuple(d.durations.items()) for d in devices).items():
            ids = ", ".join(str(field_id) for _, field_id in durations) or "none"
            text.para(
                f"Clock-event times answered by fields {ids} on {count} of {len(devices)} devices.",
                indent=2,
                hang=4,
            )
    for note in checkup.notes:
        text.para(f"Note: {note}", indent=2, hang=4)
    _prices(text, checkup, report)
    _refresh(text, checkup)
    _agreements(text, checkup.agreements)
    _series(text, devices)
    _absent(text, devices)


def _prices(text: _Text, checkup: BackendCheckup, report: DoctorReport) -> None:
    """What each read costs, how often it is made, and its share of a core at each interval."""
    prices = _prices_across(checkup)
    if not prices:
        return
    per_device = not checkup.prices and bool(checkup.devices)
    cadences = {price.cadence for _, _, price in prices}
    flags = [
        f"every {seconds:g} s: {flag}"
        for seconds, flag in (
            (report.energy_interval, "--energy-interval"),
            (report.health_interval, "--health-interval"),
        )
        if f"every {seconds:g} s" in cadences
    ]
    text.blank()
    text.para(
        f"What {'one device' if per_device else 'it'} reads, the CPU of each read, how often it is made"
        f"{f' ({_listed(flags)})' if flags else ''}, and its share of one CPU core at each --interval:",
        indent=2,
    )
    header = ("READ", "CPU EACH", "HOW OFTEN", *(f"AT {key} S" for key in report.intervals))
    rows = [header]
    for what, spent, price in prices:
        shares = (
            f"{statistics.median(spent) * price.per_second.get(key, 0.0):.2%}" for key in report.intervals
        )
        rows.append((what, _cpu_text(spent), price.cadence, *shares))
    text.table(rows, indent=2, wrap=(2, 0), right=(1, *range(3, len(header))))
    totals = []
    for key in report.intervals:
        total = checkup.cpu_per_second(float(key))
        each = (
            f" ({total / len(checkup.devices):.2%} a device)"
            if per_device and len(checkup.devices) > 1
            else ""
        )
        totals.append(f"{total:.2%}{each} at --interval {key}")
    text.para(f"In all: {_listed(totals)}.", indent=2, hang=4)


def _prices_across(checkup: BackendCheckup) -> list[tuple[str, list[float], ReadPrice]]:
    """Each read once, with every device's CPU for it: the backend's own, else each device's by what it
    reads; the calls every sample makes besides the field batch as one row (their CPU summed)."""
    if checkup.prices:
        return [(price.what or price.read, [price.cpu_seconds], price) for price in checkup.prices]
    by_read: dict[str, tuple[ReadPrice, list[float]]] = {}
    calls: dict[int, float] = defaultdict(float)
    names: dict[str, None] = {}
    for device in checkup.devices:
        for price in device.prices:
            if price.per_sample_call:
                calls[device.index] += price.cpu_seconds
                names[price.what or price.read] = None
            else:
                by_read.setdefault(price.what or price.read, (price, []))[1].append(price.cpu_seconds)
    rows = [(what, spent, price) for what, (price, spent) in by_read.items()]
    if calls:
        sample = next(p for d in checkup.devices for p in d.prices if p.per_sample_call)
        first = ", ".join(list(names)[:2]) + (" …" if len(names) > 2 else "")
        row = (f"{len(names)} calls ({first})", list(calls.values()), sample)
        rows.insert(0, (row[0], row[1], sample.model_copy(update={"cadence": EACH_SAMPLE})))
    return rows


def _cpu_text(spent: list[float]) -> str:
    """The median CPU of a read, with the range over devices where they differ by more than a fifth
    (``117 µs (33-202)``, in the median's unit)."""
    median = statistics.median(spent)
    low, high = min(spent), max(spent)
    if len(spent) > 1 and low > 0 and high / low > 1.2:
        scale = {"s": 1.0, "ms": 1e3, "µs": 1e6}[_duration(median).split()[1]]
        return f"{_duration(median)} ({low * scale:.0f}-{high * scale:.0f})"
    return _duration(median)


def _refresh(text: _Text, checkup: BackendCheckup) -> None:
    if not checkup.refresh:
        return
    first = checkup.refresh[0]
    text.blank()
    text.para(
        f"How often the driver changes what warptd reads (read every {_duration(first.poll_seconds)} for "
        f"{first.polled_seconds:.1f} s on the first device of each model):",
        indent=2,
    )
    rows = [("VALUE", "CHANGES EVERY", "DEVICE")]
    for refresh in checkup.refresh:
        gap = (
            _duration(refresh.median_seconds) if refresh.median_seconds is not None else "not seen to change"
        )
        rows.append((refresh.value, gap, str(refresh.device)))
    text.table(rows, indent=2, wrap=(0, 1), right=())


def _agreements(text: _Text, agreements: Sequence[Agreement]) -> None:
    if not agreements:
        return
    text.blank()
    text.para("Values read two ways, which must agree:", indent=2)
    for pair, found in _by_pair(agreements).items():
        statuses = Counter(a.status for a in found)
        counts = ", ".join(f"{'not compared' if s == 'skipped' else s} on {n}" for s, n in statuses.items())
        text.para(f"{_capital(_value(found[0]))} ({pair}): {counts}.", indent=4, hang=6)
        for agreement in found:
            if agreement.status == "disagree":
                text.para(f"DISAGREE, device {agreement.device}: {agreement.detail}", indent=6, hang=8)
        for detail, count in Counter(a.detail for a in found if a.status == "skipped").items():
            text.para(f"Not compared on {count}: {detail}", indent=6, hang=8)
        agreeing = next((a for a in found if a.status == "agree"), None)
        if agreeing is not None:
            text.para(f"As on device {agreeing.device}: {agreeing.detail}", indent=6, hang=8)


def _series(text: _Text, devices: Sequence[DeviceCheckup]) -> None:
    if not devices:
        return
    text.blank()
    text.para(f"The series of each device, by family ({_PREFIX}…):", indent=2)
    kinds: dict[tuple[tuple[str, int], ...], list[DeviceCheckup]] = defaultdict(list)
    for device in devices:
        kinds[tuple(device.series.items())].append(device)
    for series, alike in kinds.items():
        total = sum(n for _, n in series)
        text.para(f"{total} on {_devices([d.index for d in alike])} ({alike[0].model}):", indent=4, hang=6)
        ordered = sorted(series, key=lambda item: (-item[1], item[0]))
        text.para(", ".join(f"{name.removeprefix(_PREFIX)}={n}" for name, n in ordered), indent=6)


def _absent(text: _Text, devices: Sequence[DeviceCheckup]) -> None:
    absent = Counter(entry for device in devices for entry in device.absent)
    if not absent:
        return
    text.blank()
    text.para("Not exported here, and why:", indent=2)
    for entry, count in absent.items():
        families = ", ".join(family.removeprefix(_PREFIX) for family in entry.families)
        text.para(f"{families} ({count} of {len(devices)} devices): {entry.reason}", indent=4, hang=6)


# -- the node --------------------------------------------------------------------------------------------
def _node(text: _Text, report: DoctorReport) -> None:
    cpu = [f"{value:.2%} at --interval {key}" for key, value in report.cpu_per_second.items()]
    if cpu:
        cpu[0] = cpu[0].replace(" at ", " of one CPU core at ", 1)
    text.para(
        f"The whole node: its reads take {_listed(cpu or ['nothing measured'])} (the SDKs' and drivers' "
        f"part; warptd's own Python per sample is not in it); {report.other_series} series of no device.",
        hang=2,
    )
    if report.excluded:
        families = ", ".join(entry.family.removeprefix(_PREFIX) for entry in report.excluded)
        text.para(
            f"Left out by the metric selection ({SELECTION_GUIDE} says why; --metrics-include brings one "
            f"back): {families}.",
            hang=2,
        )
    if report.unavailable:
        names = ", ".join(sorted(report.unavailable))
        text.para(f"Not loaded: {names} (warptd list --verbose says why).", hang=2)


# -- helpers ----------------------------------------------------------------------------------------------
def _by_pair(agreements: Iterable[Agreement]) -> dict[str, list[Agreement]]:
    by_pair: dict[str, list[Agreement]] = defaultdict(list)
    for agreement in agreements:
        by_pair[agreement.pair].append(agreement)
    return by_pair


def _value(agreement: Agreement) -> str:
    return agreement.value or agreement.pair


def _capital(words: str) -> str:
    return words[:1].upper() + words[1:]


def _devices(indices: Sequence[int]) -> str:
    """``device 3``, ``devices 0-7``, ``devices 0, 2, 5``."""
    if len(indices) == 1:
        return f"device {indices[0]}"
    if list(indices) == list(range(indices[0], indices[0] + len(indices))):
        return f"devices {indices[0]}-{indices[-1]}"
    return f"devices {', '.join(map(str, indices))}"


def _listed(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds * 1e6:.0f} µs"


class _Text:
    """Lines within a width: paragraphs wrapped (never a flag broken at its hyphens), tables whose
    wordy columns wrap."""

    def __init__(self, width: int) -> None:
        self.width, self.lines = width, []

    def blank(self) -> None:
        if self.lines and self.lines[-1]:
            self.lines.append("")

    def para(self, words: str, indent: int = 0, hang: int | None = None) -> None:
        """``words`` wrapped to the width, the first line at ``indent``, the others at ``hang``."""
        self.lines += textwrap.wrap(
            words,
            self.width,
            initial_indent=" " * indent,
            subsequent_indent=" " * (indent if hang is None else hang),
            break_on_hyphens=False,
        ) or [""]

    def table(
        self, rows: Sequence[Sequence[str]], indent: int, wrap: Sequence[int], right: Iterable[int]
    ) -> None:
        """Columns two spaces apart; the ``wrap`` columns share what the others leave of the width
        (the first named gets what the others leave of an even share), each wrapped within its share;
        the ``right`` ones aligned right."""
        right, count = set(right), len(rows[0])
        widest = [max(len(row[i]) for row in rows) for i in range(count)]
        room = self.width - indent - 2 * (count - 1) - sum(widest[i] for i in range(count) if i not in wrap)
        if room < 10 * len(wrap):  # too narrow for columns: each row a paragraph of its own
            header, *body = rows
            for row in body:
                cells = (f"{name.lower()} {cell}" for name, cell in zip(header[1:], row[1:], strict=True))
                self.para(f"{row[0]}: {', '.join(cells)}", indent=indent, hang=indent + 2)
            return
        widths = list(widest)
        if sum(widest[i] for i in wrap) > room:
            even = room // len(wrap)
            for i in wrap[1:]:
                widths[i] = max(10, min(widest[i], even))
            widths[wrap[0]] = max(10, min(widest[wrap[0]], room - sum(widths[i] for i in wrap[1:])))
        for row in rows:
            cells = [
                textwrap.wrap(cell, widths[i], break_on_hyphens=False) or [""] for i, cell in enumerate(row)
            ]
            for depth in range(max(len(cell) for cell in cells)):
                parts = [
                    (cell[depth] if depth < len(cell) else "").rjust(widths[i])
                    if i in right
                    else (cell[depth] if depth < len(cell) else "").ljust(widths[i])
                    for i, cell in enumerate(cells)
                ]
                self.lines.append((" " * indent + "  ".join(parts)).rstrip())

    def done(self) -> str:
        while self.lines and not self.lines[-1]:
            self.lines.pop()
        return "\n".join(self.lines) + "\n"
