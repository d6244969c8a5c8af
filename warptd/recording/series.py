"""A target's kept samples, stored compactly: rows of floats in ``array('d')``, NaN where absent.

A recording's points used to be one pydantic ``Point`` (with its own dicts) per sample, 1-3 KB each;
here a sample costs 8 bytes per value it has (about 250 bytes with NVIDIA GPM activity), appended
with one ``extend``, and the schema's points are only built when a recording is asked for. Values
are stored as they came (float64), so the points on the wire are the same as before.
"""

from __future__ import annotations

import math
import sys
from array import array
from dataclasses import dataclass
from math import isnan

from warptd.recording.schema import Point

NAN = math.nan
#: What an empty ``array`` object costs (its header), counted once per array.
ARRAY_HEADER_BYTES = sys.getsizeof(array("d"))
#: Values every row starts with: time, power, energy, temperature, utilization (NaN where absent).
FIXED_SERIES = ("t", "power_watts", "energy_joules", "temperature_celsius", "utilization_ratio")


@dataclass(frozen=True, slots=True)
class Layout:
    """The keyed values that follow the fixed ones in a row: clock domains, activity ratios, then
    ``extras``: optional float fields of a point that only some recordings keep (a workload's
    ``attributed_energy_joules``), so the others' rows stay as narrow as before."""

    clocks: tuple[str, ...] = ()
    activity: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()

    @property
    def width(self) -> int:
        return len(FIXED_SERIES) + len(self.clocks) + len(self.activity) + len(self.extras)


NO_KEYS = Layout()
_layouts: dict[Layout, Layout] = {NO_KEYS: NO_KEYS}


def layout_of(clocks: tuple[str, ...], activity: tuple[str, ...], extras: tuple[str, ...] = ()) -> Layout:
    """One shared ``Layout`` object per set of keys (a device's keys rarely change)."""
    made = Layout(clocks, activity, extras)
    if len(_layouts) > 4096:  # keys are the backend's, not the clients': this only guards against drift
        _layouts.clear()
    return _layouts.setdefault(made, made)


#: Values a device row is reckoned at before its keys are known: the fixed five, 4 clocks and about
#: 16 activity ratios (NVIDIA GPM's sm/dram/pipe ratios, engines, encoder and decoder).
DEVICE_ROW_VALUES = len(FIXED_SERIES) + 4 + 16


def row_bytes(width: int) -> int:
    """Bytes a row of ``width`` values takes in a store: 8 a value and 4 for its throttle reasons."""
    return 8 * width + 4


#: Bytes a row is reckoned at when a recording opens: a device's (204) and a power domain's (44:
#: the fixed values only, as ``Recorder.add_domain`` appends them).
DEVICE_ROW_BYTES = row_bytes(DEVICE_ROW_VALUES)
DOMAIN_ROW_BYTES = row_bytes(len(FIXED_SERIES))


#: Values per chunk (4 KiB): rows live in chunks of about one size, which the allocator reuses as
#: series grow and thin, rather than in arrays of every size that fragment the heap.
CHUNK_VALUES = 512


class _Segment:
    """Rows of one layout, row-major in chunks of whole rows: a row is appended with one ``extend``."""

    __slots__ = ("chunk_rows", "chunks", "layout", "width")

    def __init__(self, layout: Layout) -> None:
        self.layout, self.width = layout, layout.width
        self.chunk_rows = max(1, CHUNK_VALUES // self.width)
        self.chunks: list[array[float]] = []

    def __len__(self) -> int:
        return sum(len(chunk) for chunk in self.chunks) // self.width

    @property
    def values(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)

    def extend(self, fixed: tuple[float, ...], keyed: tuple[float, ...]) -> None:
        if not self.chunks or len(self.chunks[-1]) >= self.chunk_rows * self.width:
            self.chunks.append(array("d"))
        chunk = self.chunks[-1]
        chunk.extend(fixed)
        chunk.extend(keyed)

    def rows(self) -> list[array[float]]:
        width = self.width
        return [chunk[i : i + width] for chunk in self.chunks for i in range(0, len(chunk), width)]

    def keep_every_other(self, first: int) -> None:
        """Keep rows ``first``, ``first + 2``, … (the rows at even positions in the whole series)."""
        kept = self.rows()[first::2]
        self.chunks = []
        for row in kept:
            self.extend((), tuple(row))


#: The fields every point built from a row is given (``extras`` add theirs).
_POINT_FIELDS = (*FIXED_SERIES, "clocks_hertz", "activity", "throttle_active")


def _value(number: float) -> float | None:
    return None if isnan(number) else number  # NaN (absent) is None on the wire


class SeriesStore:
    """The bounded series of one target: every ``stride``-th sample is kept; past ``max_points``
    every other kept row goes and the stride doubles, so the series stays evenly spaced."""

    __slots__ = ("_length", "_segments", "_throttle", "_throttle_index", "_throttle_sets", "seen", "stride")

    def __init__(self) -> None:
        self._segments: list[_Segment] = []
        self._throttle: array[int] = array("I")  # index into _throttle_sets: the reasons active at a row
        self._throttle_sets: list[tuple[str, ...]] = [()]
        self._throttle_index: dict[tuple[str, ...], int] = {(): 0}
        self._length = 0
        self.seen = 0  # samples offered, kept or not
        self.stride = 1

    def __len__(self) -> int:
        return self._length

    @property
    def nbytes(self) -> int:
        """Bytes the kept rows take: 8 per value and 4 per row for the throttle reasons, plus each
        array's header (what ``sys.getsizeof`` says of the arrays, less their over-allocation)."""
        values = sum(segment.values for segment in self._segments)
        arrays = sum(len(segment.chunks) for segment in self._segments) + 1
        return 8 * values + 4 * self._length + ARRAY_HEADER_BYTES * arrays

    def append(
        self,
        fixed: tuple[float, float, float, float, float],
        max_points: int,
        layout: Layout = NO_KEYS,
        keyed: tuple[float, ...] = (),
        throttle: tuple[str, ...] = (),
    ) -> None:
        """Offer one sample: ``fixed`` in :data:`FIXED_SERIES` order and ``keyed`` in ``layout``'s,
        NaN where absent. Kept if it falls on the stride."""
        self.seen += 1
        if (self.seen - 1) % self.stride:
            return
        segment = self._segments[-1] if self._segments else None
        if segment is None or segment.layout is not layout:
            segment = _Segment(layout)
            self._segments.append(segment)
        segment.extend(fixed, keyed)
        index = self._throttle_index.get(throttle)
        if index is None:
            index = self._throttle_index[throttle] = len(self._throttle_sets)
            self._throttle_sets.append(throttle)
        self._throttle.append(index)
        self._length += 1
        if self._length > max_points:
            self.halve()

    def halve(self) -> None:
        """Drop every other kept row (the first stays) and double the stride."""
        position = 0
        for segment in self._segments:
            rows = len(segment)
            segment.keep_every_other(position % 2)
            position += rows
        self._segments = [segment for segment in self._segments if segment.chunks]
        del self._throttle[1::2]
        self._length = len(self._throttle)
        self.stride *= 2

    def compact(self) -> None:
        """Copy the kept rows into arrays allocated now, each of its exact size. Rows appended a chunk
        at a time over a recording's life lie among everything allocated meanwhile: once the
        recordings beside them are freed, each chunk of a kept one holds pages around it that cannot
        go back to the system (64 windows ended, 10 kept: about 0.5 MiB more RSS left so)."""
        for segment in self._segments:
            segment.chunks = [array("d", chunk) for chunk in segment.chunks]
        self._throttle = array("I", self._throttle)

    def clear(self) -> None:
        """Drop every row (the summaries live elsewhere)."""
        self._segments = []
        self._throttle = array("I")
        self._length = 0

    def points(self) -> list[Point]:
        """The kept rows as the schema's points (built unvalidated: the values were checked on the way in)."""
        points: list[Point] = []
        sets, throttle = self._throttle_sets, self._throttle
        for segment in self._segments:
            clocks, activity, extras = segment.layout.clocks, segment.layout.activity, segment.layout.extras
            split = len(FIXED_SERIES) + len(clocks)
            fixed, keyed_end = len(FIXED_SERIES), split + len(activity)
            # One set of the fields given for the segment's points, not one each (700 bytes a point:
            # ending 64 windows made tens of thousands, whose memory the allocator then kept).
            given = {*_POINT_FIELDS, *extras}
            for row in segment.rows():
                points.append(
                    Point.model_construct(
                        given,
                        **{name: _value(v) for name, v in zip(extras, row[keyed_end:], strict=True)},
                        t=row[0],
                        power_watts=_value(row[1]),
                        energy_joules=_value(row[2]),
                        temperature_celsius=_value(row[3]),
                        utilization_ratio=_value(row[4]),
                        clocks_hertz=_present(clocks, row[fixed:split]),
                        activity=_present(activity, row[split:keyed_end]),
                        throttle_active=list(sets[throttle[len(points)]]),
                    )
                )
        return points


def _present(keys: tuple[str, ...], values: array[float]) -> dict[str, float]:
    return {key: value for key, value in zip(keys, values, strict=True) if not isnan(value)}
