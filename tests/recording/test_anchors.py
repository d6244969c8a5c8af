"""The shared Recorder on hand-made samples: exact summaries, bounded series, both energies, carbon, cost."""

from __future__ import annotations

import pytest

from warptd.recording.anchors import CounterAnchors


def test_counter_anchors_are_bounded_and_stay_monotonic():
    anchors = CounterAnchors()
    for read in range(3 * CounterAnchors.LIMIT):
        anchors.add(read * 10.0 + (read % 3), read * 10.0)  # ahead by 0, 1 or 2 J at each read
    assert len(anchors._handed) <= CounterAnchors.LIMIT
    mapped = [anchors.counted(h / 4) for h in range(0, 4 * 30 * CounterAnchors.LIMIT, 97)]
    assert mapped == sorted(mapped) and mapped[0] == 0.0
    assert anchors.counted(10.0 * (3 * CounterAnchors.LIMIT - 1) + 5) == pytest.approx(
        10.0 * (3 * CounterAnchors.LIMIT - 1) + 5 - ((3 * CounterAnchors.LIMIT - 1) % 3)
    )


def test_counter_anchors_on_one_line_keep_two():
    anchors = CounterAnchors()
    for read in range(1000):
        anchors.add(read * 5.0, 100.0 + read * 5.0)  # the handed-out total never ran ahead
    assert len(anchors._handed) == 2 and anchors.counted(1234.5) == 1234.5
