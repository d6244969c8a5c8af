"""The comparison of two recordings as one self-contained page: totals and each device's figures in
A and B with B/A, and a panel of bars per figure, each device in its colour (B hatched).

Needs plotly (the ``report`` extra), as the single report does; the daemon never imports it.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from warptd.recording.compare import DEVICE_MEASURES, Comparison, Measure, Pair, compare
from warptd.recording.figures import TEMPLATE, bar_marker, label
from warptd.recording.palette import Style, assign
from warptd.recording.report import ABSENT, figure_html, page, swatch
from warptd.recording.schema import Recording

#: The figures each device is compared by in the table and the plot (peak power stays in each report).
SHOWN = ("energy", "time", "mean power", "throttled")
UNITS = dict(DEVICE_MEASURES)
#: B's bars carry this fill pattern over the device's colour; A's are plain.
B_PATTERN = "/"


def number(value: float | None, unit: str) -> str:
    """A compared figure: four significant digits at least, grouped; absent is a dash, never 0."""
    if value is None:
        return ABSENT
    text = f"{value:,.1f}" if abs(value) >= 1000 else f"{value:.4g}"
    return f"{text} {unit}".strip()


def ratio(pair: Pair) -> str:
    """B/A to two decimals (``0.80``); a dash where either side is absent or A is 0."""
    value = pair.ratio
    return ABSENT if value is None else f"{value:.2f}"


def _cells(pair: Pair, unit: str) -> str:
    return "".join(
        f'<td class="n">{html.escape(text)}</td>'
        for text in (number(pair.a, unit), number(pair.b, unit), ratio(pair))
    )


def totals_table(totals: tuple[Measure, ...]) -> str:
    """Each run's duration, energy, carbon and cost, with B/A; a figure neither run has is left out."""
    rows = "\n".join(
        f"<tr><td>{m.name}</td>{_cells(m.pair, m.unit)}</tr>"
        for m in totals
        if m.pair.a is not None or m.pair.b is not None
    )
    head = "<tr><th></th><th>A</th><th>B</th><th>B/A</th></tr>"
    return f'<table id="compare-totals">\n<thead>{head}</thead>\n<tbody>\n{rows}\n</tbody>\n</table>'


def devices_table(comparison: Comparison, styles: dict[str, Style]) -> str:
    """One row per device or domain matched by id: each shown figure in A, in B, and B/A."""
    top = "".join(f'<th colspan="3">{name}</th>' for name in SHOWN)
    sub = "<th>A</th><th>B</th><th>B/A</th>" * len(SHOWN)
    rows = []
    for device in comparison.devices:
        cells = "".join(_cells(device.measure(name), UNITS[name]) for name in SHOWN)
        rows.append(f"<tr><td>{swatch(styles[device.id])}{html.escape(device.id)}</td>{cells}</tr>")
    body = "\n".join(rows)
    return (
        f'<table id="compare-devices">\n<thead><tr><th rowspan="2">device or domain</th>{top}</tr>'
        f"<tr>{sub}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"
    )


def unmatched(comparison: Comparison) -> str:
    """Which devices only one run has (their other side is a dash), or that every one is in both."""
    parts = [
        f"only in {side}: {', '.join(ids)}"
        for side, ids in (("A", comparison.only_a), ("B", comparison.only_b))
        if ids
    ]
    text = "; ".join(parts) if parts else "every device and domain is in both runs"
    return f'<p id="unmatched">{html.escape(text)}</p>'


def comparison_figure(comparison: Comparison, styles: dict[str, Style]) -> go.Figure:
    """A panel per shown figure; in each, a pair of bars per device (A plain, B hatched) in its colour."""
    titles = [f"{name} ({UNITS[name]}): A plain, B hatched" for name in SHOWN]
    figure = make_subplots(rows=2, cols=2, subplot_titles=titles, vertical_spacing=0.16)
    for index, name in enumerate(SHOWN):
        row, col = divmod(index, 2)
        unit = UNITS[name]
        for device in comparison.devices:
            for side in ("A", "B"):
                value = getattr(device.measure(name), side.lower())
                figure.add_trace(
                    go.Bar(
                        x=[label(device.id)],
                        y=[value],
                        name=side,
                        meta=name,
                        offsetgroup=side,
                        showlegend=False,
                        marker=bar_marker(styles[device.id], B_PATTERN if side == "B" else None),
                        hovertemplate=f"{side} %{{x}}: %{{y:,.4g}} {unit}<extra></extra>",
                    ),
                    row=row + 1,
                    col=col + 1,
                )
        figure.update_yaxes(title_text=unit, rangemode="tozero", row=row + 1, col=col + 1)
    figure.update_layout(
        template=TEMPLATE,
        barmode="group",
        height=620,
        margin={"t": 40, "b": 48},
    )
    return figure


def _side(side: str, recording: Recording) -> str:
    return (
        f"<li><b>{side}</b> {html.escape(recording.name)} ({html.escape(recording.kind)} "
        f"{html.escape(recording.id)})</li>"
    )


def render_comparison_html(a: Recording, b: Recording) -> str:
    """The whole comparison page of A and B."""
    comparison = compare(a, b)
    styles = assign(d.id for d in comparison.devices)
    body = [
        f"<h1>{html.escape(a.name)} vs {html.escape(b.name)}</h1>",
        '<ul id="runs">' + _side("A", a) + _side("B", b) + "</ul>",
        '<p class="muted">B/A below 1: B used less. Devices and domains are matched by id.</p>',
        totals_table(comparison.totals),
        unmatched(comparison),
        devices_table(comparison, styles),
    ]
    if comparison.devices:
        body.append(figure_html(comparison_figure(comparison, styles), "plot-compare"))
    return page(f"{a.name} vs {b.name} - warptd comparison", body)
