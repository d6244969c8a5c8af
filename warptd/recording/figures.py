"""The report's plotly figures, built from a :class:`Recording`: one job, no HTML around them.

Each device keeps one colour (and dash) in every figure (:mod:`warptd.recording.palette`), and a
family of readings with many lines (clocks, utilization and activity) is drawn as small multiples:
one panel per reading, one line per device in each. Only ``warptd.recording.report`` and
``warptd.recording.compare`` import this module (in ``warptd report`` or in the short-lived child the
daemon spawns), so the daemon itself never loads plotly. Absent readings (``None``) are left out of
a trace, never drawn as 0; a figure with nothing to draw is not built at all.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from warptd.recording.glance import energy_label, glance, sample_tail, throttle_intervals
from warptd.recording.palette import Style, assign
from warptd.recording.schema import Point, Recording, TargetRecording

#: Seconds-since-start axis shared by every time series.
TIME_AXIS = "seconds since the recording started"
TEMPLATE = "plotly_white"


@dataclass(frozen=True)
class Section:
    """One section of the report: an anchor, a heading, and its figure or why there is none."""

    anchor: str
    title: str
    figure: go.Figure | None
    empty: str


def label(text: str) -> str:
    """Plotly reads ``<b>``/``<a>`` in names as markup: escape so a device's model stays text."""
    return html.escape(text, quote=False)


Styles = dict[str, Style]
Reading = Callable[[Point], float | None]


def _series(target: TargetRecording, value: Reading) -> tuple[list[float], list[float]]:
    """The (t, value) pairs of one reading, absent readings left out."""
    pairs = [(p.t, v) for p in target.points if (v := value(p)) is not None]
    return [t for t, _ in pairs], [v for _, v in pairs]


#: Up to this many samples a line also marks each sample; beyond, the marks would hide the line.
MARKED_SAMPLES = 300
#: A panel whose values spread over less than this share of their level is drawn over this share,
#: so its ticks differ (a steady 2.6 GHz clock would otherwise get five ``2.60G`` ticks).
STEADY_SPREAD = 0.1
PANEL_HEIGHT = 190


def _line(
    target_id: str, style: Style, xs: list[float], ys: list[float], reading: str | None = None
) -> go.Scatter:
    """A device's line in its own colour and dash; ``reading`` (in ``meta``) names the panel's reading."""
    mode = "lines+markers" if len(xs) <= MARKED_SAMPLES else "lines"
    return go.Scatter(
        x=xs,
        y=ys,
        name=label(target_id),
        legendgroup=label(target_id),
        meta=reading,
        mode=mode,
        line={"color": style.color, "dash": style.dash},
        marker={"size": 4, "color": style.color},
    )


def steady_range(values: list[float], spread: float = STEADY_SPREAD) -> list[float] | None:
    """An explicit y range for values that barely move, centred on them; None to let plotly choose."""
    if not values:
        return None
    low, high = min(values), max(values)
    middle = (low + high) / 2
    needed = max(spread * abs(middle), 1.0)
    if high - low >= needed:
        return None
    return [middle - needed / 2, middle + needed / 2]


def _styled(figure: go.Figure, **layout: object) -> go.Figure:
    """The look every figure shares; the section's heading above it is its title."""
    figure.update_layout(template=TEMPLATE, margin={"t": 24, "b": 48}, **layout)
    return figure


def _time_figure(figure: go.Figure, unit: str, rows: int = 1, **yaxis: object) -> go.Figure:
    """Seconds across (titled under the bottom panel of ``rows``), ``unit`` up, one legend of devices."""
    figure = _styled(figure, hovermode="x unified", legend_title_text="device or domain")
    if rows > 1:
        figure.update_xaxes(title_text=TIME_AXIS, row=rows, col=1)
    else:
        figure.update_xaxes(title_text=TIME_AXIS)
    figure.update_yaxes(title_text=unit, **yaxis)
    return figure


def _reading_figure(
    recording: Recording, styles: Styles, value: Reading, unit: str, **yaxis: object
) -> go.Figure | None:
    """One chart, one line per target that has the reading at all."""
    traces = []
    for target in recording.targets:
        xs, ys = _series(target, value)
        if xs:
            traces.append(_line(target.id, styles[target.id], xs, ys))
    return _time_figure(go.Figure(traces), unit, **yaxis) if traces else None


def _keyed(keys: Callable[[Point], dict[str, float]], name: str) -> Reading:
    return lambda p: keys(p).get(name)


def _panels_figure(
    recording: Recording, styles: Styles, readings: list[tuple[str, Reading]], unit: str, **yaxis: object
) -> go.Figure | None:
    """Small multiples: a panel per reading (stacked, one time axis), a line per device in each; a
    device's legend entry toggles it in every panel. Steady panels get a range their ticks can tell apart."""
    panels = []
    for name, value in readings:
        lines = [(t, *_series(t, value)) for t in recording.targets]
        lines = [(t, xs, ys) for t, xs, ys in lines if xs]
        if lines:
            panels.append((name, lines))
    if not panels:
        return None
    figure = make_subplots(
        rows=len(panels),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=min(0.08, 0.5 / len(panels)),
        subplot_titles=[label(name) for name, _ in panels],
    )
    shown: set[str] = set()
    for row, (name, lines) in enumerate(panels, start=1):
        for target, xs, ys in lines:
            trace = _line(target.id, styles[target.id], xs, ys, name)
            trace.showlegend = target.id not in shown
            shown.add(target.id)
            figure.add_trace(trace, row=row, col=1)
        if "range" not in yaxis and (steady := steady_range([y for _, _, ys in lines for y in ys])):
            figure.update_yaxes(range=steady, row=row, col=1)
    figure.update_layout(height=80 + PANEL_HEIGHT * len(panels))
    return _time_figure(figure, unit, len(panels), **yaxis)


def _keys(recording: Recording, keys: Callable[[Point], dict[str, float]]) -> list[str]:
    return sorted({name for t in recording.targets for p in t.points for name in keys(p)})


def _clocks(point: Point) -> dict[str, float]:
    return point.clocks_hertz


def _activity(point: Point) -> dict[str, float]:
    return point.activity


def power_figure(recording: Recording, styles: Styles) -> go.Figure | None:
    return _reading_figure(recording, styles, lambda p: p.power_watts, "W", rangemode="tozero")


def temperature_figure(recording: Recording, styles: Styles) -> go.Figure | None:
    return _reading_figure(recording, styles, lambda p: p.temperature_celsius, "°C")


def clocks_figure(recording: Recording, styles: Styles) -> go.Figure | None:
    """A panel per clock domain (sm, memory, …), a line per device."""
    readings = [(name, _keyed(_clocks, name)) for name in _keys(recording, _clocks)]
    return _panels_figure(recording, styles, readings, "Hz", tickformat="~s", hoverformat=".4s")


def utilization_figure(recording: Recording, styles: Styles) -> go.Figure | None:
    """A panel for utilization and one per activity ratio (NVIDIA GPM), each 0..100 %, a line per device."""
    readings: list[tuple[str, Reading]] = [("utilization", lambda p: p.utilization_ratio)]
    readings += [(name, _keyed(_activity, name)) for name in _keys(recording, _activity)]
    return _panels_figure(recording, styles, readings, "ratio", range=[0, 1.05], tickformat=".0%")


def throttle_figure(recording: Recording, styles: Styles) -> go.Figure | None:
    """A Gantt-like bar per device and throttle reason, over the spans it was active."""
    bars = []
    for target in recording.targets:
        points = sorted(target.points, key=lambda p: p.t)
        tail = sample_tail(recording, target, points)
        style = styles[target.id]
        for reason in sorted({r for p in points for r in p.throttle_active}):
            spans = throttle_intervals(points, reason, tail)
            row = label(f"{target.id} {reason}")
            bars.append(
                go.Bar(
                    base=[start for start, _ in spans],
                    x=[end - start for start, end in spans],
                    y=[row] * len(spans),
                    orientation="h",
                    name=row,
                    marker=bar_marker(style),
                    hovertemplate="%{y}: from %{base:.1f} s for %{x:.1f} s<extra></extra>",
                )
            )
    if not bars:
        return None
    figure = _styled(
        go.Figure(bars),
        xaxis_title=TIME_AXIS,
        showlegend=False,
        barmode="overlay",
        height=max(260, 120 + 32 * len(bars)),
    )
    figure.update_xaxes(range=[0, max(recording.duration_seconds, 0.0) or None])
    return figure


def bar_marker(style: Style, pattern: str | None = None) -> dict[str, object]:
    """A bar in its device's colour, with a fill pattern only where one is needed (``pattern``, else
    the device's own past the palette's first round). One colour per trace: plotly draws a pattern
    over an array of colours black and warns in the console."""
    shape = style.pattern if pattern is None else pattern
    marker: dict[str, object] = {"color": style.color}
    if shape:
        marker["pattern"] = {"shape": shape, "fgcolor": "#1f2933"}
    return marker


def energy_figure(recording: Recording, styles: Styles) -> go.Figure | None:
    """Energy per device and domain (a bar each, in its colour), labelled with its joules, their
    source, and CO2e and cost where the recording gives them."""
    measured = [d for d in glance(recording) if d.energy_joules is not None]
    if not measured:
        return None
    bars = [
        go.Bar(
            x=[label(d.id)],
            y=[d.energy_joules],
            text=["<br>".join(label(line) for line in energy_label(d))],
            textposition="outside",
            cliponaxis=False,
            marker=bar_marker(styles[d.id]),
            hovertemplate="%{x}<br>%{text}<extra></extra>",
            name=label(d.id),
        )
        for d in measured
    ]
    top = max(d.energy_joules or 0.0 for d in measured)
    return _styled(
        go.Figure(bars),
        yaxis_title="J",
        yaxis_range=[0, top * 1.3 or 1.0],
        showlegend=False,
        barmode="relative",
    )


def attributed_figure(recording: Recording, styles: Styles) -> go.Figure | None:
    """A workload's share of each device's and CPU package's energy, cumulative over its run."""
    return _reading_figure(recording, styles, lambda p: p.attributed_energy_joules, "J", rangemode="tozero")


Builder = Callable[[Recording, Styles], go.Figure | None]
#: Every section in the order the report shows them: anchor, heading, builder, text when empty.
SECTIONS: tuple[tuple[str, str, Builder, str], ...] = (
    ("power", "Power per device and domain", power_figure, "No power readings in this recording."),
    (
        "temperature",
        "Temperature (hottest sensor)",
        temperature_figure,
        "No temperature readings in this recording.",
    ),
    ("clocks", "Clocks, one panel per clock domain", clocks_figure, "No clock readings in this recording."),
    (
        "utilization",
        "Utilization and activity, one panel each",
        utilization_figure,
        "No utilization readings.",
    ),
    ("throttle", "Throttle reasons, when each was active", throttle_figure, "No throttle reason was active."),
    ("energy", "Energy per device and domain", energy_figure, "No energy figure for any device or domain."),
)


#: The sections a workload's recording has first: its share of the energy, beside the readings.
WORKLOAD_SECTIONS: tuple[tuple[str, str, Builder, str], ...] = (
    (
        "attributed-energy",
        "Energy attributed to the workload, per device and CPU package (cumulative)",
        attributed_figure,
        "No sample with the workload's share of a device's energy.",
    ),
)


def build_sections(recording: Recording) -> list[Section]:
    """Each section with its figure, or None where the recording has nothing to draw; every figure
    draws a device in the colour its order in the recording gives it."""
    styles = assign(t.id for t in recording.targets)
    sections = (*WORKLOAD_SECTIONS, *SECTIONS) if recording.attribution is not None else SECTIONS
    return [
        Section(anchor, title, build(recording, styles), empty) for anchor, title, build, empty in sections
    ]
