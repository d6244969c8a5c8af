"""A workload's recording and its HTML report (--workloads): a Slurm job on two GPUs of the NVML double,
its power and SM shares scripted, runs and ends; within its retention its recording carries the
energy GET /workloads/slurm_job/ID answers, per device and CPU, beside the devices' readings, and its
report opens in a real headless chromium. Version 2 recordings still read; the bounds hold."""

from __future__ import annotations

import html
import json

import pytest

from tests.browser import browse
from tests.e2e.test_processes import GIB
from tests.e2e.test_workloads import SLURM_V1, node, run_epilog
from tests.helpers import http, wait_until
from tests.http.recorded_job import JOB_TASK_1, answer
from tests.plotted import plotted, traces, with_probe
from warptd.cli import main
from warptd.recording.glance import energy_text
from warptd.recording.schema import Recording

__all__ = ["node"]


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
