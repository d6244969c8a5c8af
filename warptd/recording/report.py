"""A recording as one self-contained HTML page: summary table and interactive plotly figures.

plotly.js is inlined once, so the page opens with no network; nothing else is loaded (no CDN,
fonts or MathJax). Every text from the recording is escaped. ``python -m warptd.recording.report``
reads a recording's JSON on stdin and writes the page on stdout: the daemon renders in that
short-lived child so plotly never enters the daemon's memory.
"""

from __future__ import annotations

import html
import os
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

from pydantic import ValidationError

from warptd.recording.glance import DeviceGlance, energy_source, energy_text, glance, status_text
from warptd.recording.palette import Style, assign
from warptd.recording.schema import Recording, TargetRecording

#: How the table shows an absent figure: never as 0.
ABSENT = "\N{EN DASH}"
#: Exit status of the child when the ``report`` extra (plotly) is not installed.
EXIT_NO_PLOTLY = 3
#: Exit status of the child when stdin is not a recording.
EXIT_BAD_RECORDING = 2

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 78rem; color: #1f2933; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; font-size: .9rem; margin: .5rem 0; }
th, td { border-bottom: 1px solid #d9e2ec; padding: .25rem .6rem; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.muted { color: #627d98; } nav a { margin-right: .8rem; }
.totals span { display: inline-block; margin-right: 1.6rem; font-size: 1.05rem; }
.totals b { font-weight: 600; margin-right: .3rem; color: #486581; }
.swatch { display: inline-block; width: .9rem; height: .9rem; border-radius: 2px; margin-right: .4rem;
  vertical-align: -1px; }
.swatch.rest { outline: 2px dashed #1f2933; outline-offset: -2px; }
"""


def _number(value: float | None, unit: str = "", digits: int = 1) -> str:
    """A figure for the table; an absent one is shown as a dash (it is not 0)."""
    if value is None:
        return ABSENT
    return f"{value:,.{digits}f}{' ' + unit if unit else ''}"


def _percent(value: float | None) -> str:
    return ABSENT if value is None else f"{value:.0%}"


def _value(value: float | str | None) -> str:
    """A workload figure: numbers to six significant digits (4.1e+14 FLOP/s), text as it is."""
    if value is None:
        return ABSENT
    return f"{value:.6g}" if isinstance(value, float) else value


def _when(unix: float | None) -> str:
    if unix is None:
        return ABSENT
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _rows(cells: Iterable[Iterable[tuple[str, bool]]]) -> str:
    """``<tr>`` rows; each cell is (text, numeric) and its text is escaped here, once."""
    return "\n".join(
        "<tr>"
        + "".join(f"<td{' class=n' if numeric else ''}>{html.escape(text)}</td>" for text, numeric in row)
        + "</tr>"
        for row in cells
    )


def _overview(recording: Recording) -> str:
    """The recording as a two-column table: what, when, how long, how much energy, and the workload."""
    items: list[tuple[str, str]] = [
        ("kind", recording.kind),
        ("id", recording.id),
        ("status", status_text(recording)),
        *([("error", recording.error)] if recording.error else []),
        ("started", _when(recording.started_at)),
        ("ended", _when(recording.ended_at)),
        ("duration", _number(recording.duration_seconds, "s")),
        ("sampling interval", _number(recording.interval_seconds, "s", 2)),
        ("energy", _number(recording.energy_joules, "J")),
        ("carbon", _number(recording.carbon_grams, "g CO2e", 2)),
        ("cost", _number(recording.cost, "", 4)),
    ]
    if (workload := recording.attribution) is not None:
        items += [
            ("workload", f"{workload.kind} {workload.id}"),
            ("user", workload.user or ABSENT),
            ("steps", ", ".join(workload.steps) or ABSENT),
        ]
    items += [(f"label {key}", value) for key, value in sorted(recording.labels.items())]
    items += [(f"workload {key}", _value(v)) for key, v in sorted(recording.workload.items())]
    return '<table id="overview">\n' + _rows([(k, False), (v, False)] for k, v in items) + "\n</table>"


def _target_cells(target: TargetRecording) -> list[tuple[str, bool]]:
    throttled = ", ".join(
        f"{reason} {seconds:.1f} s" for reason, seconds in sorted(target.throttle_seconds.items())
    )
    return [
        (target.id, False),
        (target.model or ABSENT, False),
        ("up" if target.up else "lost", False),
        (str(target.samples), True),
        (_number(target.energy_joules, "J"), True),
        (energy_source(target) or ABSENT, False),
        (_number(target.power_mean_watts, "W"), True),
        (_number(target.power_peak_watts, "W"), True),
        (_number(target.temperature_peak_celsius, "°C"), True),
        (_percent(target.utilization_mean_ratio), True),
        (throttled or ABSENT, False),
    ]


_TARGET_HEADINGS = (
    "device or domain",
    "model",
    "state",
    "samples",
    "energy",
    "energy from",
    "mean power",
    "peak power",
    "peak temperature (hottest sensor)",
    "mean utilization",
    "throttled",
)


def summary_table(recording: Recording) -> str:
    """One row per device and domain: energy, power, temperature, utilization, throttling."""
    head = "".join(f"<th>{heading}</th>" for heading in _TARGET_HEADINGS)
    body = _rows(_target_cells(t) for t in recording.targets)
    return f'<table id="summary">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>'


def attribution_table(recording: Recording) -> str:
    """The workload's share of each device's and of the CPU packages' energy (the figures
    ``GET /workloads/KIND/ID`` gives), beside what the device or the packages used meanwhile; empty
    for a recording of no workload."""
    workload = recording.attribution
    if workload is None:
        return ""
    own = {t.id: _own(t.energy_joules) for t in recording.targets}
    packages = [t.energy_joules for t in recording.targets if t.kind == "domain"]  # a workload's: packages
    rows = [
        _attributed_row(d.device, d.uuid or ABSENT, d.joules, own.get(d.device, ABSENT))
        for d in workload.devices
    ]
    if workload.cpu_joules is not None:
        measured = [j for j in packages if j is not None]
        rows.append(
            _attributed_row("cpu", ABSENT, workload.cpu_joules, _own(sum(measured) if measured else None))
        )
    rows.append([("total", False), ("", False), (energy_text(workload.total_joules), True), ("", False)])
    head = "".join(
        f"<th>{h}</th>"
        for h in ("device or CPU", "uuid", "attributed to the workload", "the device's own, while recorded")
    )
    title = html.escape(f"Energy of {workload.kind} {workload.id}")
    return (
        f'<h2 id="attributed">{title}</h2>\n<table id="attribution">\n<thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{_rows(rows)}\n</tbody>\n</table>"
    )


def _attributed_row(source: str, uuid: str, joules: float, own: str) -> list[tuple[str, bool]]:
    return [(source, False), (uuid, False), (energy_text(joules), True), (own, True)]


def _own(joules: float | None) -> str:
    return ABSENT if joules is None else energy_text(joules)


def swatch(style: Style) -> str:
    """A small square in a device's plot colour (dashed outline past the palette's first round)."""
    rest = "" if style.dash == "solid" else " rest"
    return f'<span class="swatch{rest}" style="background:{style.color}" title="{style.dash}"></span>'


def _glance_row(device: DeviceGlance, style: Style) -> str:
    energy = ABSENT if device.energy_joules is None else energy_text(device.energy_joules)
    source = f" ({device.energy_source})" if device.energy_joules is not None and device.energy_source else ""
    cells = [
        (energy + source, False),
        (_number(device.power_mean_watts, "W"), True),
        (_number(device.power_peak_watts, "W"), True),
        (_number(device.throttled_seconds, "s"), True),
    ]
    head = f"<td>{swatch(style)}{html.escape(device.id)}</td>"
    return _rows([cells]).replace("<tr>", "<tr>" + head, 1)


def header_summary(recording: Recording) -> str:
    """What to read first: duration, energy (carbon, cost), and per device its energy, mean and peak
    power and time throttled, each beside the colour it has in every plot."""
    totals = [("duration", _number(recording.duration_seconds, "s"))]
    if recording.attribution is not None:
        totals.append(("attributed", energy_text(recording.attribution.total_joules)))
    if recording.energy_joules is not None:
        totals.append(("energy", energy_text(recording.energy_joules)))
    if recording.carbon_grams is not None:
        totals.append(("carbon", f"{recording.carbon_grams:,.3g} g CO2e"))
    if recording.cost is not None:
        totals.append(("cost", f"{recording.cost:,.4g}"))
    totals.append(("status", status_text(recording)))
    if recording.error:
        totals.append(("error", recording.error))
    line = "".join(f"<span><b>{k}</b>{html.escape(v)}</span>" for k, v in totals)
    styles = assign(t.id for t in recording.targets)
    rows = "\n".join(_glance_row(d, styles[d.id]) for d in glance(recording))
    head = "".join(
        f"<th>{h}</th>" for h in ("device or domain", "energy", "mean power", "peak power", "throttled")
    )
    return (
        f'<div id="glance">\n<p class="totals">{line}</p>\n'
        f'<table id="glance-devices">\n<thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{rows}\n</tbody>\n</table>\n</div>"
    )


def figure_html(figure: object, div_id: str) -> str:
    """One plotly figure as a ``<div>`` and the script that draws it (plotly.js is in the page's head)."""
    import plotly.io

    return plotly.io.to_html(
        figure,
        include_plotlyjs=False,
        include_mathjax=False,
        full_html=False,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )


def page(title: str, body: list[str]) -> str:
    """A whole self-contained page: ``title`` (escaped here), plotly.js inlined once, ``body`` as HTML."""
    import plotly.offline

    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{_STYLE}</style>",
            f"<script>{plotly.offline.get_plotlyjs()}</script>",
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
        ]
    )


def render_html(recording: Recording) -> str:
    """The whole page. Needs plotly (the ``report`` extra); raises ImportError without it."""
    from warptd.recording.figures import build_sections

    sections, links = [], []
    for section in build_sections(recording):
        if section.figure is not None:
            body = figure_html(section.figure, f"plot-{section.anchor}")
        else:
            body = f'<p class="muted">{section.empty}</p>'
        links.append(f'<a href="#{section.anchor}">{section.title}</a>')
        sections.append(f'<section id="{section.anchor}">\n<h2>{section.title}</h2>\n{body}\n</section>')
    name = html.escape(recording.name)
    return page(
        f"{recording.name} - warptd {recording.kind} report",
        [
            f"<h1>{name}</h1>",
            f'<p class="muted">warptd {html.escape(recording.kind)} recording, '
            f"{_when(recording.started_at)}, {_number(recording.duration_seconds, 's')}</p>",
            header_summary(recording),
            attribution_table(recording),
            "<nav>" + "".join(links) + "</nav>",
            _overview(recording),
            "<h2>Devices and domains</h2>",
            summary_table(recording),
            *sections,
        ],
    )


def parse_recording(raw: bytes) -> Recording:
    """A recording's JSON as a :class:`Recording`; ValueError with one line naming the first problem."""
    try:
        return Recording.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        raise ValueError(f"not a recording: {where}: {first['msg']}") from None


def missing_plotly(exc: ModuleNotFoundError) -> str:
    """What to install when ``exc`` is plotly missing; re-raises any other missing module."""
    if exc.name is None or not exc.name.startswith("plotly"):
        raise exc
    from warptd.install import install_command

    return f"plotly is not installed; install the report extra: {install_command('report')}"


#: How much lower the renderer's CPU priority is than its parent's (nice(1)'s default).
NICENESS = 10


def main() -> int:
    """Recording JSON on stdin, HTML on stdout; exit 2 for a bad recording, 3 without plotly."""
    os.nice(NICENESS)  # the daemon's child: its scrapes must not wait for a core behind a report
    try:
        page = render_html(parse_recording(sys.stdin.buffer.read()))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_RECORDING
    except ModuleNotFoundError as exc:
        print(missing_plotly(exc), file=sys.stderr)
        return EXIT_NO_PLOTLY
    sys.stdout.buffer.write(page.encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
