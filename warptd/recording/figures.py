"""The report's plotly figures, built from a :class:`Recording`: one job, no HTML around them.

Only ``warptd.recording.report`` imports this module (in ``warptd report`` or in the short-lived
child the daemon spawns), so the daemon itself never loads plotly. Absent readings (``None``) are
left out of a trace, never drawn as 0; a figure with nothing to draw is not built at all.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import plotly.graph_objects as go

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


def _series(
    target: TargetRecording, value: Callable[[Point], float | None]
) -> tuple[list[float], list[float]]:
    """The (t, value) pairs of one reading, absent readings left out."""
    pairs = [(p.t, v) for p in target.points if (v := value(p)) is not None]
    return [t for t, _ in pairs], [v for _, v in pairs]


#: Up to this many samples a line also marks each sample; beyond, the marks would hide the line.
MARKED_SAMPLES = 300


def _line(name: str, xs: list[float], ys: list[float]) -> go.Scatter:
    mode = "lines+markers" if len(xs) <= MARKED_SAMPLES else "lines"
    return go.Scatter(x=xs, y=ys, name=label(name), mode=mode, marker={"size": 4})


def _styled(figure: go.Figure, **layout: object) -> go.Figure:
    """The look every figure shares; the section's heading above it is its title."""
    figure.update_layout(template=TEMPLATE, margin={"t": 24, "b": 48}, **layout)
    return figure


def _time_figure(unit: str, traces: list[go.Scatter], **yaxis: object) -> go.Figure | None:
    if not traces:
        return None
    figure = _styled(
        go.Figure(traces),
        xaxis_title=TIME_AXIS,
        yaxis_title=unit,
        hovermode="x unified",
        legend_title_text="device or domain",
    )
    figure.update_yaxes(**yaxis)
    return figure


def _reading_traces(
    recording: Recording, value: Callable[[Point], float | None], suffix: str = ""
) -> list[go.Scatter]:
    """One trace per target that has the reading at all, named by its id (and ``suffix``)."""
    traces = []
    for target in recording.targets:
        xs, ys = _series(target, value)
        if xs:
            traces.append(_line(target.id + suffix, xs, ys))
    return traces


def _keyed_traces(recording: Recording, keys: Callable[[Point], dict[str, float]]) -> Iterator[go.Scatter]:
    """One trace per target and key of a per-point mapping (clock domains, activity ratios)."""
    for target in recording.targets:
        names = sorted({name for p in target.points for name in keys(p)})
        for name in names:
            xs, ys = _series(target, lambda p, name=name: keys(p).get(name))
            if xs:
                yield _line(f"{target.id} {name}", xs, ys)


def power_figure(recording: Recording) -> go.Figure | None:
    traces = _reading_traces(recording, lambda p: p.power_watts)
    return _time_figure("W", traces, rangemode="tozero")


def temperature_figure(recording: Recording) -> go.Figure | None:
    traces = _reading_traces(recording, lambda p: p.temperature_celsius)
    return _time_figure("°C", traces)


def clocks_figure(recording: Recording) -> go.Figure | None:
    traces = list(_keyed_traces(recording, lambda p: p.clocks_hertz))
    return _time_figure("Hz", traces, tickformat=".3s")


def utilization_figure(recording: Recording) -> go.Figure | None:
    """Utilization and the activity ratios (NVIDIA GPM) on one 0..1 axis."""
    traces = [
        *_reading_traces(recording, lambda p: p.utilization_ratio, " utilization"),
        *_keyed_traces(recording, lambda p: p.activity),
    ]
    return _time_figure("ratio", traces, range=[0, 1.05], tickformat=".0%")


def throttle_intervals(points: list[Point], reason: str, tail: float) -> list[tuple[float, float]]:
    """The (start, end) spans in which ``reason`` was active: a sample's state holds until the
    next sample, and the last one for ``tail`` seconds; touching spans merge."""
    spans: list[tuple[float, float]] = []
    for i, point in enumerate(points):
        if reason not in point.throttle_active:
            continue
        end = points[i + 1].t if i + 1 < len(points) else point.t + tail
        if spans and spans[-1][1] >= point.t:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((point.t, end))
    return spans


def _tail(recording: Recording, points: list[Point]) -> float:
    """How long the last sample's state is drawn: the interval, else the median spacing."""
    if recording.interval_seconds:
        return recording.interval_seconds
    gaps = sorted(b.t - a.t for a, b in itertools.pairwise(points))
    return gaps[len(gaps) // 2] if gaps else 0.0


def throttle_figure(recording: Recording) -> go.Figure | None:
    """A Gantt-like bar per device and throttle reason, over the spans it was active."""
    bars = []
    for target in recording.targets:
        points = sorted(target.points, key=lambda p: p.t)
        tail = _tail(recording, points)
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


def energy_figure(recording: Recording) -> go.Figure | None:
    """Energy per device and domain; where it came from (counter or integrated power) on hover."""
    measured = [t for t in recording.targets if t.energy_joules is not None]
    if not measured:
        return None
    figure = go.Figure(
        go.Bar(
            x=[label(t.id) for t in measured],
            y=[t.energy_joules for t in measured],
            text=[t.energy_source or "" for t in measured],
            hovertemplate="%{x}: %{y:,.1f} J (%{text})<extra></extra>",
            name="energy",
        )
    )
    return _styled(figure, yaxis_title="J")


#: Every section in the order the report shows them: anchor, heading, builder, text when empty.
SECTIONS: tuple[tuple[str, str, Callable[[Recording], go.Figure | None], str], ...] = (
    ("power", "Power per device and domain", power_figure, "No power readings in this recording."),
    (
        "temperature",
        "Temperature (hottest sensor)",
        temperature_figure,
        "No temperature readings in this recording.",
    ),
    ("clocks", "Clocks", clocks_figure, "No clock readings in this recording."),
    ("utilization", "Utilization and activity", utilization_figure, "No utilization readings."),
    ("throttle", "Throttle reasons, when each was active", throttle_figure, "No throttle reason was active."),
    ("energy", "Energy per device and domain", energy_figure, "No energy figure for any device or domain."),
)


def build_sections(recording: Recording) -> list[Section]:
    """Each section with its figure, or None where the recording has nothing to draw."""
    return [Section(anchor, title, build(recording), empty) for anchor, title, build, empty in SECTIONS]
