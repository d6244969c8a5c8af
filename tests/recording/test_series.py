"""A target's compact series: an ended recording's rows copied into arrays of their exact size, and
its points built with one set of given fields a segment (issue 39, finding 11: the windows' memory)."""

from __future__ import annotations

import sys

from warptd.models import DeviceReading, Utilization
from warptd.recording.recorder import Recorder, Target
from warptd.recording.series import ARRAY_HEADER_BYTES, SeriesStore, layout_of
from warptd.sampling.snapshot import DeviceSample

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


GPUS = [Target("device", "nvidia", str(i)) for i in range(8)]


PIPES = ("tensor", "fp64", "fp32", "fp16", "int")


CLOCKS = {"graphics": 1.41e9, "sm": 1.41e9, "memory": 2.6e9, "video": 1.2e9}


def gpm_sample(index: int, n: int) -> DeviceSample:
    """A sample with what NVIDIA GPM gives: 4 clocks, 8 activity ratios, throttle reasons."""
    gauges = {f"warptd_device_{k}_ratio": {(): 0.25 + n % 3 / 10} for k in ("sm_active", "sm_occupancy")}
    gauges["warptd_device_dram_bandwidth_ratio"] = {(): 0.125}
    gauges["warptd_device_pipe_active_ratio"] = {(p,): 0.1 * (i + 1) for i, p in enumerate(PIPES)}
    reading = DeviceReading(
        index=index,
        power_watts=100.0 + n % 7,
        energy_counter_joules=float(n),
        utilization=Utilization(compute=0.5),
        temperatures_celsius={"gpu": 50.0 + n % 5},
        clocks_hertz=CLOCKS,
        gauges=gauges,
        throttle_active={"sw_power_cap": n % 2 == 1, "hw_slowdown": False},
    )
    return DeviceSample(reading, energy_joules=float(n), throttle_seconds={"sw_power_cap": n / 20})


def feed(recorder: Recorder, samples: int, start: int = 0) -> None:
    for n in range(start, start + samples):
        devices = [gpm_sample(i, n) for i in range(len(recorder.targets))]
        recorder.on_sample("nvidia", devices, None, at=1000.0 + n / 10)


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
