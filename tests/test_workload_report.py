"""A workload's recording and its HTML report (--workloads): a Slurm job on two GPUs of the NVML double,
its power and SM shares scripted, runs and ends; within its retention its recording carries the
energy GET /workloads/slurm_job/ID answers, per device and CPU, beside the devices' readings, and its
report opens in a real headless chromium. Version 2 recordings still read; the bounds hold."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from tests.browser import browse
from tests.helpers import http, wait_until
from tests.plotted import plotted, traces, with_probe
from tests.test_processes import GIB
from tests.test_workloads import SLURM_V1, TICK_US, V1_JOB, Node, Rig, monitor, node, run_epilog
from warptd.cli import main
from warptd.http.app import HttpError, Request, Router
from warptd.http.workload_routes import WorkloadApi, WorkloadPath
from warptd.models import DeviceReading, Utilization
from warptd.power.base import DomainPower, PowerSource
from warptd.recording.glance import energy_text
from warptd.recording.schema import Recording
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.energy import WorkloadEnergy
from warptd.workloads.history import WorkloadHistory
from warptd.workloads.placement import CpuCgroup, WorkloadKey, user_name
from warptd.workloads.tracked import Workload

CID = "c" * 64
JOB_TASK_1 = SLURM_V1.replace("task_0", "task_1")
CONTAINER = f"0::/system.slice/docker-{CID}.scope\n"
V2_RECORDING = Path(__file__).parent / "data" / "recording-v2.json"
__all__ = ["monitor", "node"]  # test_workloads' fixtures, used here by name


def request(path: str, **headers: str) -> Request:
    return Request("GET", path, {}, {"host": "localhost", **headers}, b"", "127.0.0.1")


def answer(router: Router, path: str) -> tuple[int, dict]:
    """The route's status and JSON body (an error's too), as the server would send them."""
    try:
        response = router.dispatch(request(path))
    except HttpError as exc:
        response = exc.response()
    return response.status, json.loads(response.body)


class Job:
    """Job 4242 (pids 1001 on GPU 0, 1002 on GPU 1) beside a container (pid 1004) on GPU 0, stepped
    a second at a time with scripted power, SM samples and CPU time, as the sampler hands them over."""

    def __init__(self, node: Node, rig: Rig, history: WorkloadHistory) -> None:
        self.node, self.rig, self.history = node, rig, history
        self.cgroup = CpuCgroup(V1_JOB, "cpu,cpuacct")
        self.cpu_us = 0.0
        self.step_count = 0
        node.add(1001, SLURM_V1, uid=0)
        node.add(1002, JOB_TASK_1, uid=0)
        node.add(1004, CONTAINER, uid=0)
        node.cpu(self.cgroup, 0)
        gpu0, gpu1 = rig.gpus
        gpu0.processes = [(1001, 2 * GIB), (1004, GIB)]
        gpu1.processes = [(1002, GIB)]

    def step(self, watts: tuple[float, float], sm: dict[int, dict[int, int]], package_watts: float) -> None:
        """One second: both polls (the job's CPU time 0.5 s of 4 s of node time), then a sample of
        each GPU at ``watts`` and of the CPU package."""
        self.step_count += 1
        self.rig.clock.now += 1.0
        self.cpu_us += 0.5e6
        self.node.cpu(self.cgroup, self.cpu_us)
        self.node.tick(round(4e6 / TICK_US))
        self.rig.poll(sm)
        samples = []
        for index, power in enumerate(watts):
            self.rig.energy[index] += power
            reading = DeviceReading(
                index=index,
                uuid=self.rig.gpus[index].uuid,
                power_watts=power,
                energy_counter_joules=self.rig.energy[index],
                utilization=Utilization(compute=min(1.0, power / 400)),
                temperatures_celsius={"gpu": 40 + power / 20 + self.step_count / 10},
                clocks_hertz={"sm": 1.4e9 + 1e6 * self.step_count},
            )
            samples.append(DeviceSample(reading, energy_joules=self.rig.energy[index]))
        self.rig.tracker.on_sample("nvidia", samples, None, self.rig.clock.now)
        self.rig.package += package_watts
        domain = DomainPower("package-0", PowerSource.RAPL, package_watts, self.rig.package)
        self.rig.tracker.on_sample("rapl", None, [domain], self.rig.clock.now)

    def end(self) -> None:
        """The job's processes and cgroup go; the container stays on GPU 0."""
        self.node.remove(1001)
        self.node.remove(1002)
        self.node.gone(self.cgroup)
        gpu0, gpu1 = self.rig.gpus
        gpu0.processes, gpu1.processes = [(1004, GIB)], []
        self.rig.clock.now += 1.0
        self.rig.poll({0: {1004: 30}})


def run_job(rig: Rig, node: Node, history: WorkloadHistory) -> Job:
    job = Job(node, rig, history)
    rig.poll({0: {1001: 60, 1004: 20}, 1: {1002: 50}})  # found; the counters' baselines follow
    for second in range(40):
        ramp = min(1.0, second / 10)
        job.step((100 + 200 * ramp, 80 + 150 * ramp), {0: {1001: 60, 1004: 20}, 1: {1002: 50}}, 50.0)
    job.end()
    return job


@pytest.fixture
def recorded(node, monitor, fake_nvml):
    rig = Rig(node, monitor, fake_nvml.gpus)
    history = WorkloadHistory(clock=rig.clock, wall=lambda: 1_780_000_000.0 + rig.clock.now)
    rig.tracker.listeners.append(history)
    rig.device_joules(0.0, 0.0)
    rig.package_joules(0.0)
    router = Router()
    WorkloadApi.add(router, rig.tracker, lambda: None, history)
    return rig, history, router


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


def test_a_workload_split_before_its_poll_ended_records_that_share_and_its_energy():
    """The split finds a workload in a poll's first half and may give it a sample's share before the
    poll's end tells the history (after_poll): its recording starts at that sample, so the share and
    the device's energy both count from the sample before it."""
    history = WorkloadHistory(clock=lambda: 0.0)
    key = WorkloadKey("slurm_job", "9")
    workload = _workload(key)

    def sample(joules: float) -> list[DeviceSample]:  # 100 W, read from the energy counter
        reading = DeviceReading(index=0, uuid="GPU-0", power_watts=100.0, energy_counter_joules=joules)
        return [DeviceSample(reading, energy_joules=joules)]

    history.after_sample("nvidia", sample(1000.0), None, 1.0, {})  # before the job
    workload.add_device("nvidia:0", "GPU-0", 100.0)  # the split's first delta: 1000 J -> 1100 J
    history.after_sample("nvidia", sample(1100.0), None, 2.0, {key: workload})
    history.after_poll({key: workload})
    workload.add_device("nvidia:0", "GPU-0", 100.0)
    history.after_sample("nvidia", sample(1200.0), None, 3.0, {key: workload})
    (target,) = history.recording(workload.view()).targets
    assert target.attributed_energy_joules == pytest.approx(200.0)
    assert (target.energy_joules, target.energy_source, target.samples) == (200.0, "counter", 2)
    assert target.energy_integrated_joules == pytest.approx(200.0)  # from the same baseline
    assert [p.attributed_energy_joules for p in target.points] == pytest.approx([100.0, 200.0])
    assert [p.energy_joules for p in target.points] == pytest.approx([100.0, 200.0])


def test_the_recording_routes_refuse_bad_input_with_json_errors(recorded, node):
    rig, history, router = recorded
    run_job(rig, node, history)
    for path, status, words in (
        ("/workloads/pod/4242/recording", 404, "no workload kind"),
        ("/workloads/slurm_job/" + "9" * 300 + "/recording", 414, "at most 256"),
        ("/workloads/slurm_job/4243/recording", 404, "no slurm_job '4243'"),
    ):
        got, body = answer(router, path)
        assert got == status and words in body["error"], (path, body)
    with pytest.raises(HttpError) as refused:  # protected as the other /workloads routes
        router.dispatch(request("/workloads/slurm_job/4242/recording", origin="http://evil.example"))
    assert refused.value.status == 403
    off = Router()
    WorkloadApi.add(off, None, lambda: None)
    got, body = answer(off, "/workloads/slurm_job/4242/recording")
    assert got == 404 and "--workloads" in body["error"]


def test_an_empty_workload_id_is_no_such_workload_not_a_too_long_one():
    """The router matches no empty segment, but the path model is the routes' one check: an empty id
    names no workload (404), it is not over the length bound (414)."""
    with pytest.raises(HttpError) as refused:
        WorkloadPath.of(_named("slurm_job", ""))
    assert refused.value.status == 404, refused.value.message
    assert "empty" in refused.value.message and "at most" not in refused.value.message
    with pytest.raises(HttpError) as refused:  # the bound itself is still a 414
        WorkloadPath.of(_named("slurm_job", "9" * 257))
    assert refused.value.status == 414
    assert WorkloadPath.of(_named("slurm_job", "4242")).workload_id == "4242"


def _named(kind: str, workload_id: str) -> Request:
    named = request(f"/workloads/{kind}/{workload_id}")
    named.params = {"kind": kind, "workload_id": workload_id}
    return named


@pytest.mark.slow
def test_a_daemons_job_report_opens_in_chromium_with_the_jobs_joules_and_charts(
    node, fake_nvml, tmp_path, capsys
):
    """End to end: a real daemon (--workloads) records job 4242 on two GPUs; it ends; within its
    retention ``warptd workload slurm_job 4242 --report`` writes the report, and chromium shows it."""
    pytest.importorskip("plotly")
    from warptd.config import load_settings
    from warptd.daemon import Daemon

    node.add(1001, SLURM_V1, uid=0)
    node.add(1002, JOB_TASK_1, uid=0)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes, gpu1.processes = [(1001, 2 * GIB)], [(1002, GIB)]
    gpu0.power_mw, gpu1.power_mw = 250_000, 120_000
    settings = load_settings(
        listen="127.0.0.1:0", backends=["nvidia"], interval=0.1, procfs=node.proc.root,
        cgroupfs=node.cgroupfs, sysfs=tmp_path, workloads=True, log_level="error",
    )  # fmt: skip
    daemon = Daemon(settings)
    daemon.start()
    try:
        url = f"http://127.0.0.1:{daemon.port}"

        def recorded_points() -> bool:
            gpu0.energy_mj += 25_000
            gpu1.energy_mj += 12_000
            status, _, body = http(daemon.port, "GET", "/workloads/slurm_job/4242/recording")
            targets = json.loads(body)["targets"] if status == 200 else []
            return len(targets) == 2 and all(len(t["points"]) >= 5 for t in targets)

        assert wait_until(recorded_points, timeout=20.0, interval=0.05)
        gpu0.processes, gpu1.processes = [], []  # the job ends: no process left, no cgroup
        node.remove(1001)
        node.remove(1002)

        def ended() -> bool:
            return (
                json.loads(http(daemon.port, "GET", "/workloads/slurm_job/4242")[2])["ended_at"] is not None
            )

        assert wait_until(ended, timeout=10.0)
        job = json.loads(http(daemon.port, "GET", "/workloads/slurm_job/4242")[2])
        page, saved = tmp_path / "job.html", tmp_path / "job.json"
        assert (
            main(["workload", "slurm_job", "4242", "--report", str(page), "--json", str(saved), "--url", url])
            == 0
        )
        assert "wrote" in capsys.readouterr().out
        recording = Recording.model_validate_json(saved.read_bytes())
        assert recording.attribution.model_dump(mode="json") == job
        for path, status in (
            ("/workloads/container/4242/recording", 404),
            ("/workloads/slurm_job/" + "9" * 300 + "/recording", 414),
            ("/workloads/nobody/1/recording", 404),
        ):
            got, _, body = http(daemon.port, "GET", path)
            assert got == status and "error" in json.loads(body), path
        assert (
            http(daemon.port, "GET", "/workloads/slurm_job/4242/recording", headers={"Host": "evil.example"})[
                0
            ]
            == 403
        )
        reports = tmp_path / "reports"
        reports.mkdir()
        run_epilog(tmp_path, url, {"WARPTD_EPILOG_REPORT_DIR": str(reports)})
        assert sorted(p.suffix for p in reports.iterdir()) == [".html", ".json"]
    finally:
        daemon.stop()
    probed = tmp_path / "probed.html"
    probed.write_text(with_probe(page.read_text(encoding="utf-8")), encoding="utf-8")
    dom, console = browse(probed.as_uri())
    assert console == [], console
    assert "slurm_job 4242" in dom
    table = dom[
        dom.index('<table id="attribution">') : dom.index("</table>", dom.index('<table id="attribution">'))
    ]
    for device in job["devices"]:  # the same figures GET /workloads/slurm_job/4242 gives
        assert f"<td>{device['device']}</td>" in table
        assert f'<td class="n">{html.escape(energy_text(device["joules"]))}</td>' in table
    assert html.escape(energy_text(job["total_joules"])) in table
    probe = plotted(dom)
    assert probe["errors"] == []
    attributed = traces(probe["plots"], "plot-attributed-energy")
    assert set(attributed) == {"nvidia:0", "nvidia:1"}
    for device in job["devices"]:
        assert attributed[device["device"]][-1][1] == pytest.approx(device["joules"], rel=1e-9)
    for plot in ("plot-power", "plot-temperature", "plot-utilization", "plot-clocks", "plot-energy"):
        assert probe["plots"][plot]["drawn"] >= 2, plot


def test_a_version_2_recording_still_reads_and_renders():
    """A window recording saved by warptd with schema 2 (tests/data): no workload fields at all."""
    raw = V2_RECORDING.read_bytes()
    assert b"attributed" not in raw
    recording = Recording.model_validate_json(raw)
    assert recording.schema_version == 2 and recording.attribution is None
    assert all(p.attributed_energy_joules is None for t in recording.targets for p in t.points)
    pytest.importorskip("plotly")
    from warptd.recording.report import render_html

    page = render_html(recording)
    assert 'id="attribution"' not in page and "plot-attributed-energy" not in page
    assert 'id="plot-power"' in page


def _workload(key: WorkloadKey) -> Workload:
    return Workload(key, "alice", started_at=1_780_000_000.0, seen=0.0)


def _gpu_samples(count: int, energy: float) -> list[DeviceSample]:
    return [
        DeviceSample(
            DeviceReading(index=i, uuid=f"GPU-{i}", power_watts=300.0, utilization=Utilization(compute=0.9)),
            energy_joules=energy,
        )
        for i in range(count)
    ]


def test_a_long_job_keeps_at_most_its_points_evenly_over_its_whole_run():
    """Over two hours at 1 Hz on 8 GPUs and a package: downsampled to at most 2048 points
    over its targets, from its first sample to its last, each point's share still cumulative."""
    history = WorkloadHistory(clock=lambda: 0.0)
    key = WorkloadKey("slurm_job", "7")
    workload = _workload(key)
    workloads = {key: workload}
    history.after_poll(workloads)
    seconds = 8_000
    for second in range(1, seconds + 1):
        for i in range(8):
            workload.add_device(f"nvidia:{i}", f"GPU-{i}", 150.0)
        workload.add_cpu(10.0)
        domain = DomainPower("package-0", PowerSource.RAPL, 90.0, 90.0 * second)
        history.after_sample("nvidia", _gpu_samples(8, 300.0 * second), None, float(second), workloads)
        history.after_sample("rapl", None, [domain], float(second), workloads)
    recording = history.recording(workload.view())
    points = [len(t.points) for t in recording.targets]
    assert len(points) == 9 and sum(points) <= 2048 and min(points) >= 2048 // 9 // 2
    for target in recording.targets:
        times = [p.t for p in target.points]
        assert times[0] <= 1.0 and times[-1] >= seconds - seconds / len(times) * 2  # the whole run
        shares = [p.attributed_energy_joules for p in target.points]
        assert shares == sorted(shares)
    assert recording.targets[0].attributed_energy_joules == pytest.approx(150.0 * seconds)
    package = next(t for t in recording.targets if t.id == "rapl:package-0")
    assert package.attributed_energy_joules == pytest.approx(10.0 * seconds)
    assert history.budget.used <= history.budget.capacity()


def test_the_workload_cap_bounds_the_recordings_and_the_memory_bound_holds(node, tmp_path):
    """1005 Slurm jobs in the cgroup tree with --workload-max 1000: 1000 recorded, 5 dropped; their
    series, each sampled on a GPU, stay within the history's bytes."""
    for job in range(1005):
        (node.cgroupfs / f"system.slice/slurmstepd.scope/job_{job}").mkdir(parents=True)
    history = WorkloadHistory(memory_bytes=2**20)
    tracker = WorkloadEnergy([], node.proc.root, node.cgroupfs, max_workloads=1000, listeners=[history])
    tracker.poll()
    assert history.recorded == 1000 and tracker.dropped == 5
    with tracker._lock:  # hand each job a share of GPU 0, as the split would
        workloads = dict(tracker._workloads)
    for second in range(1, 40):
        for workload in workloads.values():
            workload.add_device("nvidia:0", "GPU-0", 1.0)
        history.after_sample("nvidia", _gpu_samples(1, 1000.0 * second), None, float(second), workloads)
    assert history.budget.used <= 2**20
    kept = [len(history.recording(w.view()).targets[0].points) for w in list(workloads.values())[:50]]
    assert min(kept) >= 2  # thinned, never emptied, while running
    for key in list(workloads)[:10]:  # gone past the retention: their recordings go too
        del workloads[key]
    history.after_poll(workloads)
    assert history.recorded == 990


def test_the_cli_refuses_report_outputs_it_cannot_write_or_without_an_id(tmp_path, capsys):
    assert main(["workload", "slurm_job", "--report", str(tmp_path / "a.html")]) == 2
    assert main(["workload", "--json", str(tmp_path / "a.json")]) == 2
    assert "need KIND and ID" in capsys.readouterr().err
    assert main(["workload", "slurm_job", "1", "--json", str(tmp_path / "missing" / "a.json")]) == 2
    assert "cannot write" in capsys.readouterr().err
    same = str(tmp_path / "a.html")  # the messages name this command's flags, not profile's
    assert main(["workload", "slurm_job", "1", "--report", same, "--json", same]) == 2
    assert "--json and --report name the same file" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written, nothing asked of a daemon


@pytest.mark.slow
def test_the_recording_memory_setting_reads_sizes_and_zero_keeps_none(node, fake_nvml, tmp_path):
    from warptd.arguments import build_parser
    from warptd.cli import _settings
    from warptd.config import SettingsError, load_settings
    from warptd.daemon import Daemon

    assert load_settings().workload_recording_memory == 32 * 2**20
    args = build_parser().parse_args(["--workloads", "--workload-recording-memory", "4MiB"])
    assert _settings(args).workload_recording_memory == 4 * 2**20
    with pytest.raises(SettingsError):
        load_settings(workload_recording_memory=-1)
    settings = load_settings(
        listen="127.0.0.1:0", backends=["nvidia"], procfs=node.proc.root, cgroupfs=node.cgroupfs,
        sysfs=tmp_path, workloads=True, workload_recording_memory=0,
    )  # fmt: skip
    daemon = Daemon(settings)  # not started: its routes answer as they will
    assert daemon.workload_history is None and daemon.workloads.listeners == []
    node.add(1001, SLURM_V1, uid=0)
    fake_nvml.gpus[0].processes = [(1001, GIB)]
    daemon.process_sources[0].poll()  # nvidia's
    daemon.workloads.poll()
    assert answer(daemon.router, "/workloads/slurm_job/4242")[0] == 200
    status, body = answer(daemon.router, "/workloads/slurm_job/4242/recording")
    assert status == 404 and "--workload-recording-memory 0" in body["error"]
