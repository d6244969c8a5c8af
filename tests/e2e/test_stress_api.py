"""POST/GET/DELETE /stress against the real daemon on loopback, with real torch on the CPU.

Each job is a real spawned worker process; the samplers record the CPU while it runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import http, parse, value, wait_until
from warptd.daemon import Daemon
from warptd.install import install_command
from warptd.stress import jobs, supervise

ROOT = Path(__file__).resolve().parents[2]


FAULTS = {
    "raise": "tests.stress_faults:RaisingTest",
    "selfkill": "tests.stress_faults:SelfKillTest",
    "hang": "tests.stress_faults:HangTest",
    "linger": "tests.stress_faults:LingerTest",
}


def post(port: int, payload: object, headers: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    """POST /stress; a dict without a device names the CPU's, as a node without an accelerator needs."""
    if isinstance(payload, dict):
        payload = {"device": "cpu:0", **payload}
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    status, head, raw = http(
        port, "POST", "/stress", body, {"Content-Type": "application/json", **(headers or {})}
    )
    return status, head, json.loads(raw)


def job(port: int, job_id: str) -> dict:
    return json.loads(http(port, "GET", f"/stress/{job_id}")[2])


def wait_done(port: int, job_id: str, timeout: float = 90) -> dict:
    active = ("starting", "running")
    assert wait_until(lambda: job(port, job_id)["status"] not in active, timeout=timeout, interval=0.2)
    return job(port, job_id)


@pytest.fixture
def daemon(settings):
    settings.backends = ["cpu"]
    settings.metrics_include = ["warptd_stress_running"]  # opt-in: a fleet's default leaves it out
    d = Daemon(settings)
    d.stress.catalog.tests.update(FAULTS)
    d.start()
    assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
    yield d
    d.stop()


@pytest.mark.slow
def test_matmul_through_the_api_records_cpu_load(daemon):
    port = daemon.port
    assert wait_until(lambda: b"warptd_device_utilization_ratio{" in http(port, "GET", "/metrics")[2])
    idle = value(
        parse(http(port, "GET", "/metrics")[2].decode()), "warptd_device_utilization_ratio", backend="cpu"
    )
    status, headers, body = post(port, {"test": "matmul", "device": "cpu:0", "duration_s": 2, "size": 512})
    assert status == 202 and body["status"] == "starting" and body["started_at"] is None
    assert headers["location"] == f"/stress/{body['id']}"
    assert wait_until(lambda: job(port, body["id"])["status"] != "starting", timeout=60, interval=0.05)
    running = job(port, body["id"])
    assert running["status"] == "running" and running["started_at"] is not None, running
    result = wait_done(port, body["id"])
    assert result["status"] == "succeeded", result["error"]
    workload = result["workload"]
    assert workload["unit"] == "FLOP/s" and workload["work_unit"] == "FLOP"
    assert workload["work"] == workload["iterations"] * 512 * 512 * (2 * 512 - 1)  # exact count
    assert workload["throughput"] == pytest.approx(workload["work"] / workload["elapsed_s"])
    assert workload["elapsed_s"] >= 2 and workload["dtype"] == "float32"
    telemetry = result["telemetry"]
    assert telemetry["samples"] >= 3
    assert telemetry["utilization_mean_ratio"] > min(idle + 0.25, 0.9)
    assert telemetry["power_mean_watts"] is None  # no RAPL here: absent, not 0
    assert result["efficiency"] is None
    assert result["started_at"] and result["ended_at"] > result["started_at"]
    samples = parse(http(port, "GET", "/metrics")[2].decode())
    labels = {"backend": "cpu", "device": "0", "test": "matmul"}
    assert value(samples, "warptd_stress_last_flop_per_second", **labels) == pytest.approx(
        workload["throughput"]
    )
    assert value(samples, "warptd_stress_running", **labels) == 0
    assert value(samples, "warptd_stress_runs_total", test="matmul", status="succeeded") == 1


@pytest.mark.slow
def test_memory_bandwidth(daemon):
    status, _, body = post(daemon.port, {"test": "memory", "duration_s": 1, "size": 32})
    assert status == 202 and body["params"]["device"] == "cpu:0"  # no accelerator: the CPU
    result = wait_done(daemon.port, body["id"])
    assert result["status"] == "succeeded", result["error"]
    workload = result["workload"]
    assert workload["unit"] == "B/s" and workload["work"] == workload["iterations"] * 2 * 32 * 2**20
    assert workload["throughput"] > 1e8


@pytest.mark.slow
def test_busy_device_409_and_cancel_within_2s(daemon):
    status, _, first = post(daemon.port, {"test": "matmul", "duration_s": 60, "size": 256})
    assert status == 202
    status, _, second = post(daemon.port, {"test": "memory", "duration_s": 5})
    assert status == 409 and "busy" in second["error"]
    assert wait_until(lambda: job(daemon.port, first["id"])["started_at"] is not None, timeout=60)
    started = time.monotonic()
    status, _, raw = http(daemon.port, "DELETE", f"/stress/{first['id']}")
    assert time.monotonic() - started < 2.0
    assert status == 200 and json.loads(raw)["status"] == "cancelled"
    assert http(daemon.port, "DELETE", f"/stress/{first['id']}")[0] == 409  # already ended
    status, _, _ = post(daemon.port, {"test": "raise", "duration_s": 1})
    assert status == 202  # the device is free again


@pytest.mark.slow
@pytest.mark.parametrize(
    ("payload", "code", "message"),
    [
        (b"{not json", 400, "malformed JSON"),
        (b"[1, 2]", 400, "JSON object"),
        ('{"test": "matmul"}'.encode("utf-16"), 400, "not UTF-8"),
        ({"test": "fft"}, 422, "unknown test 'fft'"),
        ({"test": "tt_matmul"}, 422, "tt_matmul runs on Tenstorrent chips; cpu:0 is a CPU"),
        ({"device": "tpu:7"}, 422, "unknown device 'tpu:7'"),
        ({"device": "cpu"}, 422, "device"),
        ({"duration_s": "30"}, 422, "duration_s"),
        ({"duration_s": 0.5}, 422, "duration_s"),
        ({"duration_s": 3601}, 422, "duration_s must be between 1 and 3600"),
        ({"dtype": "int8"}, 422, "dtype"),
        ({"dtype": "tf32", "device": "cpu:0"}, 422, "tf32"),
        ({"size": 8}, 422, "size 8 is out of range"),
        ({"sizes": 8}, 422, "sizes"),
    ],
)
def test_bad_input_is_a_clear_error_and_starts_nothing(daemon, payload, code, message):
    status, headers, body = post(daemon.port, payload)
    assert status == code and message in body["error"], body
    assert headers["content-type"] == "application/json"
    assert json.loads(http(daemon.port, "GET", "/stress")[2])["jobs"] == []


@pytest.mark.slow
def test_body_over_64k_is_413(daemon):
    status, _, body = post(daemon.port, b'{"test": "' + b"x" * 70_000 + b'"}')
    assert status == 413 and body["limit_bytes"] == 65536
    assert json.loads(http(daemon.port, "GET", "/stress")[2])["jobs"] == []


@pytest.mark.slow
def test_token_required_when_configured(settings):
    settings.backends = ["cpu"]
    settings.stress_token = "s3cret-token"
    d = Daemon(settings)
    d.stress.catalog.tests.update(FAULTS)
    d.start()
    try:
        status, headers, body = post(d.port, {"test": "raise", "duration_s": 1})
        assert status == 401 and headers["www-authenticate"].startswith("Bearer")
        status, _, body = post(d.port, {"test": "raise", "duration_s": 1}, {"Authorization": "Bearer wrong"})
        assert status == 401 and "token" in body["error"]
        assert "s3cret" not in json.dumps(body)
        status, _, body = post(
            d.port, {"test": "raise", "duration_s": 1}, {"Authorization": "Bearer s3cret-token"}
        )
        assert status == 202
        assert http(d.port, "DELETE", f"/stress/{body['id']}")[0] == 401
    finally:
        d.stop()


@pytest.mark.slow
def test_failing_workloads_leave_the_daemon_healthy(daemon, monkeypatch):
    monkeypatch.setattr(supervise, "STARTUP_GRACE_S", 3.0)
    outcomes = {}
    for test in ("raise", "selfkill", "hang"):
        status, _, body = post(daemon.port, {"test": test, "duration_s": 1})
        assert status == 202
        outcomes[test] = wait_done(daemon.port, body["id"], timeout=60)
    assert outcomes["raise"]["status"] == "failed"
    assert "illegal memory access" in outcomes["raise"]["error"]
    assert outcomes["selfkill"]["status"] == "failed" and "SIGKILL" in outcomes["selfkill"]["error"]
    assert outcomes["hang"]["status"] == "failed" and "did not finish" in outcomes["hang"]["error"]
    assert http(daemon.port, "GET", "/healthz")[0] == 200
    samples = parse(http(daemon.port, "GET", "/metrics")[2].decode())
    assert value(samples, "warptd_backend_up", backend="cpu") == 1
    assert value(samples, "warptd_stress_runs_total", test="raise", status="failed") == 1
    assert value(samples, "warptd_stress_runs_total", test="selfkill", status="failed") == 1


@pytest.mark.slow
def test_no_torch_is_503_with_install_hint(daemon, monkeypatch, capsys):
    """Issue 23: the pip command names this server's paths, so it goes to the log only; issue 33:
    the client is told which extra to install, as this warptd was installed (here a checkout)."""
    monkeypatch.setattr(jobs, "torch_installed", lambda: False)
    status, _, body = post(daemon.port, {"test": "matmul"})
    assert status == 503 and "stress extra" in body["error"]
    assert "(pip install '<checkout>[stress]')" in body["error"]
    assert install_command("stress") not in body["error"] and str(ROOT) not in body["error"]
    assert install_command("stress") in capsys.readouterr().out  # the daemon's log has it


@pytest.mark.slow
@pytest.mark.parametrize(
    "payload",
    [
        {"device": "nvidia:99"},
        {"duration_s": 1e12},
        b'{"duration_s": Infinity}',
        b'{"duration_s": NaN}',
        {"test": "rm -rf"},
        {"dtype": "int8"},
    ],
)
def test_a_bad_request_is_422_before_torch_is_looked_for(daemon, monkeypatch, payload):
    monkeypatch.setattr(jobs, "torch_installed", lambda: False)
    status, _, body = post(daemon.port, payload)
    assert status == 422, body
    assert str(ROOT) not in body["error"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"[" * 30_000, "nested deeper than 16"),
        (b'{"size": ' + b"[" * 30_000 + b"1" + b"]" * 30_000 + b"}", "nested deeper than 16"),
        (b'{"size": 1' + b"0" * 5000 + b"}", "number over 32 characters"),
        (b'{"duration_s": 1' + b"0" * 40 + b".5}", "number over 32 characters"),
    ],
)
def test_deep_nesting_and_huge_numbers_are_400_before_parsing(daemon, payload, message):
    status, _, body = post(daemon.port, payload)
    assert status == 400 and message in body["error"], body
    assert json.loads(http(daemon.port, "GET", "/stress")[2])["jobs"] == []


@pytest.mark.slow
def test_no_stress_turns_the_endpoints_off(settings):
    settings.backends = ["cpu"]
    settings.stress = False
    d = Daemon(settings)
    d.start()
    try:
        for method in ("GET", "POST"):
            status, _, raw = http(d.port, method, "/stress")
            assert status == 404 and "--no-stress" in json.loads(raw)["error"]
        assert b"warptd_stress" not in http(d.port, "GET", "/metrics")[2]
    finally:
        d.stop()


@pytest.mark.slow
def test_unknown_job_is_404(daemon):
    assert http(daemon.port, "GET", "/stress/nope")[0] == 404
    assert http(daemon.port, "DELETE", "/stress/nope")[0] == 404


@pytest.mark.slow
def test_a_worker_that_lingers_after_its_result_costs_the_daemon_no_cpu(daemon):
    cpu_before = time.process_time()
    status, _, body = post(daemon.port, {"test": "linger", "duration_s": 1})
    assert status == 202
    result = wait_done(daemon.port, body["id"])
    assert result["status"] == "succeeded"
    assert time.process_time() - cpu_before < 1.0  # the monitor waits, it does not spin on a closed pipe


@pytest.mark.slow
def test_a_failed_spawn_leaves_the_device_free(daemon, monkeypatch):
    def refuse(self):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(supervise._SPAWN.Process, "start", refuse)
    status, _, body = post(daemon.port, {"test": "raise", "duration_s": 1})
    assert status == 503 and "could not start" in body["error"]
    assert daemon.stress.jobs.list() == [] and daemon.stress.jobs.running() == []
    monkeypatch.undo()
    status, _, body = post(daemon.port, {"test": "raise", "duration_s": 1})
    assert status == 202  # not 409: nothing stayed busy


@pytest.mark.slow
def test_history_keeps_exactly_the_configured_number(settings):
    settings.backends = ["cpu"]
    settings.stress_history = 2
    d = Daemon(settings)
    d.stress.catalog.tests.update(FAULTS)
    d.start()
    try:
        ids = []
        for _ in range(4):
            status, _, body = post(d.port, {"test": "raise", "duration_s": 1})
            assert status == 202
            ids.append(body["id"])
            wait_done(d.port, body["id"])
        listed = json.loads(http(d.port, "GET", "/stress")[2])["jobs"]
        assert len(listed) == 2  # exactly the configured history
        page = json.loads(http(d.port, "GET", "/stress?limit=1")[2])  # a page of the listing
        assert [j["id"] for j in page["jobs"]] == [ids[3]] and page["total"] == 2
        assert page["next"] == "/stress?offset=1&limit=1"
        assert json.loads(http(d.port, "GET", page["next"])[2])["jobs"] == [listed[1]]
        status, _, body = post(d.port, {"test": "raise", "duration_s": 1})
        assert len(d.stress.jobs.list()) == 3  # 2 finished kept + the one running
        kept = [job.id for job in d.stress.jobs.list()]
        assert kept[0] == body["id"] and kept[1:] == [ids[3], ids[2]]  # newest first, 2 finished kept
        assert all(j.recorder is None for j in d.stress.jobs.list()[1:])  # finished jobs keep only a summary
    finally:
        d.stop()


@pytest.mark.slow
def test_the_first_response_has_the_resolved_dtype_and_size(daemon):
    """The defaults are chosen before the job exists: float32 and n=2048 on the CPU, at once."""
    status, _, body = post(daemon.port, {"test": "matmul", "duration_s": 30})
    assert status == 202 and body["status"] == "starting", body
    assert body["params"]["dtype"] == "float32" and body["params"]["size"] == 2048
    assert http(daemon.port, "DELETE", f"/stress/{body['id']}")[0] == 200
    status, _, body = post(daemon.port, {"test": "memory", "duration_s": 1, "size": 8})
    assert status == 202 and (body["params"]["dtype"], body["params"]["size"]) == ("float32", 8)
    assert wait_done(daemon.port, body["id"])["workload"]["dtype"] == "float32"


@pytest.mark.slow
def test_a_cpu_only_node_names_no_workload_it_cannot_run(daemon):
    """No tt_matmul series, and the list of tests in an error leaves it out too."""
    body = http(daemon.port, "GET", "/metrics")[2].decode()
    assert 'test="matmul"' in body and 'test="memory"' in body
    assert "tt_matmul" not in body
    status, _, error = post(daemon.port, {"test": "fft"})
    assert status == 422 and "matmul" in error["error"] and "tt_matmul" not in error["error"]


@pytest.mark.slow
def test_a_run_is_also_a_recording_with_its_throughput(daemon):
    """The stress result carries the shared recording schema; its device is sampled faster while it runs."""
    status, _, body = post(daemon.port, {"test": "memory", "duration_s": 1, "size": 16})
    assert status == 202
    assert wait_until(lambda: job(daemon.port, body["id"])["status"] != "starting", timeout=60, interval=0.05)
    if job(daemon.port, body["id"])["status"] == "running":
        assert daemon.sampler.watches.devices("cpu") == {0}
    result = wait_done(daemon.port, body["id"])
    assert result["status"] == "succeeded", result["error"]
    recording = result["recording"]
    assert (
        recording["kind"] == "stress" and recording["schema_version"] == 3 and recording["status"] == "ended"
    )
    assert recording["end_reason"] == "succeeded" and recording["name"] == "memory"
    assert recording["workload"]["throughput"] == result["workload"]["throughput"]
    cpu = recording["targets"][0]
    # at 0.1 s while it runs; about 5 at the fixture's --interval 0.2
    assert cpu["id"] == "cpu:0" and cpu["samples"] == result["telemetry"]["samples"] >= 7
    assert daemon.sampler.watches.devices("cpu") == set() and not daemon.sampler.fast_sampling("cpu")


@pytest.mark.slow
def test_a_failed_runs_recording_ends_and_carries_its_error_into_the_report(daemon, monkeypatch):
    """A worker that fails while it starts (before its timed part) and one that fails while it runs:
    each recording is ended (not open), says failed and why, and its report shows both."""
    from tests.browser import browse

    monkeypatch.setattr(supervise, "STARTUP_GRACE_S", 3.0)
    for test, why in (("raise", "illegal memory access"), ("hang", "did not finish")):
        status, _, body = post(daemon.port, {"test": test, "duration_s": 1})
        assert status == 202
        result = wait_done(daemon.port, body["id"], timeout=60)
        recording = result["recording"]
        assert result["status"] == "failed" and why in result["error"]
        assert (recording["status"], recording["end_reason"]) == ("ended", "failed")
        assert recording["error"] == result["error"] and recording["ended_at"] >= recording["started_at"]
        dom, console = browse(f"http://127.0.0.1:{daemon.port}/stress/{body['id']}/report", budget_ms=3000)
        assert console == [], console
        assert "ended: failed" in dom and "status open" not in dom and why in dom
