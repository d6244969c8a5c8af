"""A target's compact series: an ended recording's rows copied into arrays of their exact size, and
its points built with one set of given fields a segment (issue 39, finding 11: the windows' memory)."""

from __future__ import annotations

import sys

from tests.samples import GPUS, feed
from warptd.recording.recorder import Recorder
from warptd.recording.series import ARRAY_HEADER_BYTES, SeriesStore, layout_of

LAYOUT = layout_of(("sm", "memory"), ("sm_active", "pipe_active_tensor"))


def grown(rows: int) -> SeriesStore:
    store = SeriesStore()
    for n in range(rows):
        throttle = ("sw_power_cap",) if n % 3 == 0 else ()
        store.append(
            (n / 10, 100.0 + n, float(n), 50.0, 0.5), 4096, LAYOUT, (1.4e9, 2.6e9, 0.25, 0.125), throttle
        )
    return store


def test_compact_copies_the_rows_into_arrays_of_their_exact_size():
    """Grown by ``extend``, each array kept room to grow in (and lay among what else was allocated
    meanwhile); an ended recording's never grows again."""
    store = grown(150)
    points, nbytes = store.points(), store.nbytes
    arrays = [*(c for s in store._segments for c in s.chunks), store._throttle]
    assert any(sys.getsizeof(a) > ARRAY_HEADER_BYTES + a.itemsize * len(a) for a in arrays)  # room to grow
    store.compact()
    arrays = [*(c for s in store._segments for c in s.chunks), store._throttle]
    assert all(sys.getsizeof(a) == ARRAY_HEADER_BYTES + a.itemsize * len(a) for a in arrays)
    assert store.points() == points and store.nbytes == nbytes
    store.append((99.0, 1.0, 1.0, 1.0, 1.0), 4096, LAYOUT, (1.0, 1.0, 1.0, 1.0))  # it can still grow
    assert len(store) == 151 and store.points()[-1].t == 99.0


def test_a_segments_points_share_one_set_of_given_fields():
    """pydantic's model_construct made a set of the given fields for each point (700 bytes): an end
    of 64 windows on 8 GPUs made tens of thousands at once, and the allocator kept their memory."""
    points = grown(40).points()
    assert len({id(p.__pydantic_fields_set__) for p in points}) == 1
    assert set(points[0].model_dump(exclude_unset=True)) == {
        "t",
        "power_watts",
        "energy_joules",
        "temperature_celsius",
        "utilization_ratio",
        "clocks_hertz",
        "activity",
        "throttle_active",
    }
    assert points[3].throttle_active == ["sw_power_cap"] and points[4].throttle_active == []


def test_a_point_costs_8_bytes_a_value_not_an_object():
    """17 values a GPM sample (5 fixed, 4 clocks, 8 ratios): 136 bytes and the throttle index,
    where a pydantic Point with its dicts took over a kilobyte."""
    recorder = Recorder(GPUS[:1], kind="window", name="w", edges=True)
    recorder.start()
    feed(recorder, 1000)
    rows = len(recorder.recording_now().targets[0].points)
    assert rows >= 1000  # one GPU keeps up to 2048
    per_point = recorder.series_bytes / rows
    assert 17 * 8 + 4 <= per_point <= 17 * 8 + 4 + 8
    store: SeriesStore = next(iter(recorder._states.values())).series
    arrays = [c for s in store._segments for c in s.chunks] + [store._throttle]
    allocated = sum(sys.getsizeof(a) for a in arrays)
    assert store.nbytes <= allocated <= 1.15 * store.nbytes  # accounted: what the arrays take
