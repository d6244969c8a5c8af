"""One look per device, the same in every plot of a report: assigned once by the devices' order.

Ten qualitative colours (Tableau 10); past ten, the colours repeat with another dash (lines) and
another fill pattern (bars), so any two devices still look different. Plain strings, no plotly:
the page's own HTML (the summary's swatches) uses them too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: Tableau 10: distinct hues of similar weight, readable on white.
COLORS = (
    "#4C78A8",
    "#F58518",
    "#E45756",
    "#72B7B2",
    "#54A24B",
    "#EECA3B",
    "#B279A2",
    "#FF9DA6",
    "#9D755D",
    "#BAB0AC",
)
#: plotly's line dashes, one per round of the colours.
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
#: plotly's bar fill patterns, one per round of the colours ("" is a plain fill).
PATTERNS = ("", "/", "x", "\\", "-", "|")


@dataclass(frozen=True, slots=True)
class Style:
    """How one device is drawn: its colour, its line dash, its bar pattern."""

    color: str
    dash: str
    pattern: str


def style(index: int) -> Style:
    """The ``index``-th device's style: distinct for the first len(COLORS) * len(DASHES) devices."""
    round_, hue = divmod(index, len(COLORS))
    return Style(COLORS[hue], DASHES[round_ % len(DASHES)], PATTERNS[round_ % len(PATTERNS)])


def assign(ids: Iterable[str]) -> dict[str, Style]:
    """A style per id, in the order given (the recording's order of targets); repeats keep the first."""
    styles: dict[str, Style] = {}
    for target_id in ids:
        if target_id not in styles:
            styles[target_id] = style(len(styles))
    return styles
