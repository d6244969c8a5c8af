"""The shared Recorder on hand-made samples: exact summaries, bounded series, both energies, carbon, cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_workloads import monitor, node
from tests.http import recorded_job
from tests.http.recorded_job import answer, run_job
from tests.plotted import drawn, traces
from tests.recordings import busy_recording, sample_recording
from tests.samples import CLOCKS, GPUS, PIPES, feed
from warptd.models import DeviceReading
from warptd.recording.glance import energy_source
from warptd.recording.recorder import Recorder, Target
from warptd.recording.report import render_html
from warptd.recording.schema import Point, Recording, TargetRecording
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.placement import user_name

recorded = recorded_job.recorded  # the workload API's router over a rig with history, a fixture

GPU = Target("device", "nvidia", "0", model="H100", uuid="GPU-0")


def test_a_version_1_recording_still_reads():
    """Version 2 only added a value of energy_source: a saved version 1 recording is a valid one."""
    from warptd.recording.schema import SCHEMA_VERSION, Recording

    recorder = Recorder([GPU], kind="window", name="w")
    recorder.start()
    saved = recorder.recording_now().model_dump(mode="json") | {"schema_version": 1}
    assert Recording.model_validate(saved).schema_version == 1
    assert recorder.recording_now().schema_version == SCHEMA_VERSION == 3
    with pytest.raises(ValueError, match="schema_version"):
        Recording.model_validate(saved | {"schema_version": 4})


def device_of(trace: dict, ids: list[str]) -> str | None:
    """The device a trace draws: its name, or the device its name starts with (``nvidia:0 power_cap``)."""
    first = trace["name"].split(" ")[0]
    return first if first in ids else None


@pytest.mark.slow
def test_every_device_keeps_one_colour_in_every_plot_and_panels_hold_one_line_per_device(tmp_path):
    recording = busy_recording()  # 12 GPUs and a package: more than the palette's ten colours
    ids = [t.id for t in recording.targets]
    plots = drawn(recording, tmp_path)["plots"]
    looks: dict[str | None, set[tuple[str, str | None]]] = {i: set() for i in ids}
    for plot in plots.values():
        for trace in plot["traces"]:
            looks.setdefault(device_of(trace, ids), set()).add((trace["color"], trace["dash"]))
    unnamed = looks.pop(None, None)
    colours = {i: {c for c, _ in seen} for i, seen in looks.items()}
    assert all(len(c) == 1 for c in colours.values()), colours  # lines and bars alike
    lines = {i: {(c, d) for c, d in seen if d is not None} for i, seen in looks.items()}
    assert all(len(line) == 1 for line in lines.values()), lines
    assert len({next(iter(line)) for line in lines.values() if line}) == len(ids)  # no two devices alike
    assert unnamed is None, "a trace that draws no one device (the energy bars are named by device)"
    for plot_id in ("plot-clocks", "plot-utilization"):
        readings: dict[str, list[str]] = {}
        for trace in plots[plot_id]["traces"]:
            readings.setdefault(trace["reading"], []).append(trace["name"])
        assert all(sorted(names) == sorted(set(names)) for names in readings.values())  # a line per device
        assert max(len(names) for names in readings.values()) <= len(ids)
    assert set(r for r in {t["reading"] for t in plots["plot-utilization"]["traces"]}) == {
        "utilization",
        "sm_active",
        "pipe_tensor",
        "dram_bandwidth",
    }
    usage, clocks = traces(plots, "plot-utilization"), traces(plots, "plot-clocks")
    for target in recording.targets[:-1]:
        for name in ("sm_active", "pipe_tensor", "dram_bandwidth"):
            assert usage[f"{target.id} {name}"] == [[p.t, p.activity[name]] for p in target.points]
        assert usage[f"{target.id} utilization"] == [[p.t, p.utilization_ratio] for p in target.points]
        for name in ("graphics", "memory", "sm", "video"):
            assert clocks[f"{target.id} {name}"] == [[p.t, p.clocks_hertz[name]] for p in target.points]


@pytest.mark.slow
def test_no_axis_repeats_a_tick_label_even_for_steady_readings(tmp_path):
    recording = sample_recording(count=10)
    for target in recording.targets:
        for point in target.points:
            point.clocks_hertz = {"memory": 2.6e9} if target.kind == "device" else {}
            point.temperature_celsius = 41.0 if target.kind == "device" else None
    plots = drawn(recording, tmp_path)["plots"]
    steady = [[p.t, 2.6e9] for p in recording.targets[0].points]
    assert traces(plots, "plot-clocks")["nvidia:0 memory"] == steady
    for plot_id, plot in plots.items():
        for panel in plot["ticks"]:
            for axis in ("x", "y"):
                assert len(panel[axis]) == len(set(panel[axis])), (plot_id, axis, panel[axis])
    clock_ticks = plots["plot-clocks"]["ticks"][0]["y"]
    assert len(clock_ticks) >= 3 and "2.6G" in clock_ticks


def test_an_energy_method_this_warptd_does_not_know_is_shown_by_its_name():
    """The recording may name methods newer than this report (power x duration): shown, never dropped."""
    known = TargetRecording(id="nvidia:0", kind="device", backend="nvidia", energy_source="integrated")
    assert energy_source(known) == "integrated power"
    newer = TargetRecording.model_construct(id="gaudi:0", energy_source="power_times_duration")
    assert energy_source(newer) == "power \N{MULTIPLICATION SIGN} duration"
    unknown = TargetRecording.model_construct(id="tpu:0", energy_source="vendor_estimate")
    assert energy_source(unknown) == "vendor estimate"
    assert energy_source(TargetRecording(id="cpu:0", kind="device", backend="cpu")) is None


def test_the_compact_series_gives_the_same_points():
    recorder = Recorder(GPUS[:1], kind="window", name="w", edges=True)
    recorder.start()
    feed(recorder, 3)
    reading = DeviceReading(index=0, power_watts=None, clocks_hertz={"sm": 1e9}, temperatures_celsius={})
    recorder.on_sample("nvidia", [DeviceSample(reading)], None, at=1000.3)  # a key goes, a value is absent
    points = recorder.recording_now().targets[0].points
    second = points[1]
    assert second == Point(
        t=second.t,
        power_watts=101.0,
        energy_joules=1.0,
        temperature_celsius=51.0,
        utilization_ratio=0.5,
        clocks_hertz=CLOCKS,
        activity={
            "sm_active": 0.25 + 1 / 10,
            "sm_occupancy": 0.25 + 1 / 10,
            "dram_bandwidth": 0.125,
            **{f"pipe_active_{p}": 0.1 * (i + 1) for i, p in enumerate(PIPES)},
        },
        throttle_active=["sw_power_cap"],
    )
    assert points[3] == Point(t=points[3].t, energy_joules=2.0, clocks_hertz={"sm": 1e9})


__all__ = ["monitor", "node"]


V2_RECORDING = Path(__file__).parents[1] / "data" / "recording-v2.json"


def test_an_ended_jobs_recording_has_the_energy_get_workloads_answers_and_monotone_points(recorded, node):
    rig, history, router = recorded
    run_job(rig, node, history)
    status, job = answer(router, "/workloads/slurm_job/4242")
    assert status == 200 and job["ended_at"] is not None
    status, body = answer(router, "/workloads/slurm_job/4242/recording")
    assert status == 200
    recording = Recording.model_validate(body)
    assert (recording.kind, recording.schema_version, recording.status) == ("workload", 3, "ended")
    assert recording.end_reason == "workload_ended" and recording.name == "slurm_job 4242"
    assert recording.attribution.model_dump(mode="json") == job  # identity, dates and every figure
    # The scripted split: GPU 0 by SM 60:20, GPU 1 the job's alone, the CPU by 0.5 s of 4 s.
    gpu0 = sum(100 + 200 * min(1.0, s / 10) for s in range(40))
    gpu1 = sum(80 + 150 * min(1.0, s / 10) for s in range(40))
    devices = {d["device"]: d["joules"] for d in job["devices"]}
    assert devices == pytest.approx({"nvidia:0": 0.75 * gpu0, "nvidia:1": gpu1}, rel=1e-6)
    assert job["cpu_joules"] == pytest.approx(0.125 * 50.0 * 40, rel=1e-6)
    assert job["user"] == user_name(1000) and job["steps"] == ["0"]
    targets = {t.id: t for t in recording.targets}
    assert set(targets) == {"nvidia:0", "nvidia:1", "rapl:package-0"}
    for device, joules in devices.items():
        target = targets[device]
        assert target.attributed_energy_joules == joules
        assert target.samples == 40 and target.power_peak_watts is not None
        assert target.utilization_mean_ratio is not None and target.temperature_peak_celsius is not None
    package = targets["rapl:package-0"]
    assert package.attributed_energy_joules == pytest.approx(job["cpu_joules"], rel=1e-9)
    for target in targets.values():
        shares = [p.attributed_energy_joules for p in target.points]
        assert None not in shares and shares == sorted(shares), target.id  # cumulative: never down
        assert shares[-1] == pytest.approx(target.attributed_energy_joules, rel=1e-9)
        assert all(p.power_watts is not None for p in target.points)
    # The device's own energy and readings. Its energy counts from the sample before the job's first
    # share (the fixture's baseline, 0 J), as the split's first delta does: the job's whole 40 s,
    # not gpu0 - 100 (the first second's 100 J were in the job's share, so they are in the device's).
    own = targets["nvidia:0"]
    assert own.energy_joules == pytest.approx(gpu0, rel=1e-6) and own.energy_source == "counter"
    assert [p.power_watts for p in own.points][:3] == [100.0, 120.0, 140.0]


def test_a_workloads_share_of_a_target_never_exceeds_the_targets_own_energy(recorded, node):
    """Each target's own energy in a workload's recording spans the same intervals as the split's
    deltas that gave the workload its share (from the sample before its first), so the share is at
    most the whole, at the end and at every point; on GPU 1, the job's alone, they are equal."""
    rig, history, router = recorded
    run_job(rig, node, history)
    recording = Recording.model_validate(answer(router, "/workloads/slurm_job/4242/recording")[1])
    targets = {t.id: t for t in recording.targets}
    assert set(targets) == {"nvidia:0", "nvidia:1", "rapl:package-0"}
    for target in targets.values():
        assert target.attributed_energy_joules is not None and target.energy_joules is not None
        assert target.attributed_energy_joules <= target.energy_joules + 1e-9, target.id
        for point in target.points:
            assert point.attributed_energy_joules <= point.energy_joules + 1e-9, (target.id, point.t)
    alone = targets["nvidia:1"]
    gpu1 = sum(80 + 150 * min(1.0, s / 10) for s in range(40))
    assert alone.attributed_energy_joules == pytest.approx(gpu1, rel=1e-9)
    assert alone.energy_joules == pytest.approx(gpu1, rel=1e-9)  # was 8295 J: the first second left out
    assert targets["rapl:package-0"].energy_joules == pytest.approx(50.0 * 40, rel=1e-9)


def test_a_version_2_recording_still_reads_and_renders():
    """A window recording saved by warptd with schema 2 (tests/data): no workload fields at all."""
    raw = V2_RECORDING.read_bytes()
    assert b"attributed" not in raw
    recording = Recording.model_validate_json(raw)
    assert recording.schema_version == 2 and recording.attribution is None
    assert all(p.attributed_energy_joules is None for t in recording.targets for p in t.points)
    pytest.importorskip("plotly")

    page = render_html(recording)
    assert 'id="attribution"' not in page and "plot-attributed-energy" not in page
    assert 'id="plot-power"' in page
