"""Energy windows on the real daemon over loopback: GPUs from the C-level NVML double (whose energy
counter advances at its power), CPU packages from a RAPL sysfs fixture."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.nvml import drawing
from tests.helpers import http, parse, select, value, wait_until
from warptd.daemon import Daemon

RANGE_UJ = 262_143_328_850


WATTS = {0: 300.0, 1: 150.0}


@pytest.fixture
def gpus():
    with drawing(WATTS) as fake:
        yield fake


@pytest.fixture
def make_daemon(settings, sysfs, gpus):
    sysfs.rapl_zone("intel-rapl:0", "package-0", 10_000_000, RANGE_UJ)
    sysfs.rapl_zone("intel-rapl:0:0", "core", 4_000_000, RANGE_UJ)
    daemons = []

    def make(**overrides):
        values = {"backends": ["nvidia", "rapl"], "interval": 1.0, "window_interval": 0.1, **overrides}
        for key, item in values.items():
            setattr(settings, key, item)
        daemon = Daemon(settings)
        daemon.start()
        daemons.append(daemon)
        assert wait_until(lambda: http(daemon.port, "GET", "/readyz")[0] == 200)
        return daemon

    yield make
    for daemon in daemons:
        daemon.stop()


def call(port: int, method: str, path: str, payload: object = None, headers=None) -> tuple[int, dict]:
    body = (
        None if payload is None else payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    )
    head = {"Content-Type": "application/json", **(headers or {})} if body is not None else headers or {}
    status, _, raw = http(port, method, path, body, head)
    return status, json.loads(raw) if raw else {}


def open_window(port: int, **payload) -> dict:
    status, body = call(port, "POST", "/windows", payload)
    assert status == 201, body
    return body


def end_window(port: int, window_id: str) -> dict:
    status, body = call(port, "POST", f"/windows/{window_id}/end")
    assert status == 200, body
    return body


def named(samples, name: str) -> list[float]:
    """Values of warptd_window_energy_joules_total{name} (``name`` is also helpers.value's parameter)."""
    return [
        s.value for s in samples if s.name == "warptd_window_energy_joules_total" and s.labels["name"] == name
    ]


def target(recording: dict, target_id: str) -> dict:
    return next(t for t in recording["targets"] if t["id"] == target_id)


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [2.0, 0.45])
def test_a_window_is_the_drivers_counter_at_its_edges_within_half_a_percent(make_daemon, gpus, seconds):
    """Read at the window's edges whatever the counter's own cadence (once a second), so a window of
    a second or less at 10 Hz is the counter's delta; and the power between, integrated, agrees."""
    daemon = make_daemon()
    asked = time.monotonic()
    opened = open_window(daemon.port, name="epoch-3", devices=["nvidia:0", "nvidia:1"], labels={"run": "a"})
    start = (asked, time.monotonic())
    assert opened["status"] == "open" and opened["labels"] == {"run": "a"}
    time.sleep(seconds)
    asked = time.monotonic()
    ended = end_window(daemon.port, opened["id"])
    end = (asked, time.monotonic())
    assert ended["status"] == "ended" and ended["end_reason"] == "requested" and ended["schema_version"] == 3
    assert ended["kind"] == "window" and ended["interval_seconds"] == 0.1
    assert ended["duration_seconds"] == pytest.approx(seconds, abs=0.3)
    for index, watts in WATTS.items():
        gpu = target(ended, f"nvidia:{index}")
        # the counter's delta between what it answered the daemon's reads at the window's two edges
        deltas = gpus.gpus[index].counter_deltas(start, end)
        assert any(gpu["energy_joules"] == pytest.approx(delta, rel=0.005) for delta in deltas), (gpu, deltas)
        assert gpu["energy_source"] == "counter"
        # the counter refreshes every 100 ms: each edge is up to that much of the draw behind
        assert gpu["energy_joules"] == pytest.approx(watts * ended["duration_seconds"], abs=watts * 0.25)
        assert gpu["energy_integrated_joules"] == pytest.approx(watts * ended["duration_seconds"], rel=0.05)
        assert gpu["energy_disagreement_ratio"] <= 0.2 / seconds  # the counter's two edges' refreshes
        assert gpu["samples"] >= 7 * seconds  # at --window-interval 0.1, not the 1 s --interval
        assert gpu["power_peak_watts"] == watts and gpu["power_mean_watts"] == pytest.approx(watts)
        assert gpu["up"] is True and gpu["points"][0]["t"] < 0.2
    total = sum(WATTS.values()) * ended["duration_seconds"]
    assert ended["energy_joules"] == pytest.approx(total, abs=sum(WATTS.values()) * 0.25)


@pytest.mark.slow
def test_default_targets_are_the_accelerators_and_cpu_packages(make_daemon, sysfs):
    daemon = make_daemon()
    opened = open_window(daemon.port, name="all")
    assert {t["id"] for t in opened["targets"]} == {"nvidia:0", "nvidia:1", "rapl:package-0"}
    time.sleep(0.3)
    sysfs.set_energy("intel-rapl:0", 10_000_000 + 40_000_000)  # the package used 40 J meanwhile
    time.sleep(0.3)
    ended = end_window(daemon.port, opened["id"])
    package = target(ended, "rapl:package-0")
    assert package["energy_joules"] == pytest.approx(40.0) and package["kind"] == "domain"
    gpus = sum(target(ended, f"nvidia:{i}")["energy_joules"] for i in WATTS)
    assert ended["energy_joules"] == pytest.approx(gpus + 40.0)


@pytest.mark.slow
def test_windows_nest_and_overlap(make_daemon):
    daemon = make_daemon()
    outer = open_window(daemon.port, name="outer", devices=["nvidia:0"])
    time.sleep(0.5)
    inner = open_window(daemon.port, name="inner", devices=["nvidia:0"])
    time.sleep(0.5)
    overlapping = open_window(daemon.port, name="overlap", devices=["nvidia:0", "nvidia:1"])
    time.sleep(0.5)
    inner = end_window(daemon.port, inner["id"])
    time.sleep(0.3)
    outer = end_window(daemon.port, outer["id"])
    time.sleep(0.3)
    overlapping = end_window(daemon.port, overlapping["id"])
    for recording in (outer, inner, overlapping):
        gpu0 = target(recording, "nvidia:0")
        # the driver's counter at each edge is as of its last refresh, up to 100 ms behind
        assert gpu0["energy_joules"] == pytest.approx(300 * recording["duration_seconds"], abs=300 * 0.2)
    assert target(outer, "nvidia:0")["energy_joules"] > target(inner, "nvidia:0")["energy_joules"]
    status, listing = call(daemon.port, "GET", "/windows")
    assert status == 200 and [w["name"] for w in listing["windows"]] == ["overlap", "outer", "inner"]
    assert all(t["points"] == [] for w in listing["windows"] for t in w["targets"])


@pytest.mark.slow
def test_get_shows_an_open_window_live(make_daemon):
    daemon = make_daemon()
    opened = open_window(daemon.port, name="live", devices=["nvidia:1"])
    time.sleep(0.5)
    status, first = call(daemon.port, "GET", f"/windows/{opened['id']}")
    time.sleep(0.5)
    _, second = call(daemon.port, "GET", f"/windows/{opened['id']}")
    assert status == 200 and first["status"] == "open" and first["ended_at"] is None
    assert target(second, "nvidia:1")["energy_joules"] > target(first, "nvidia:1")["energy_joules"] > 0
    assert second["duration_seconds"] > first["duration_seconds"]
    end_window(daemon.port, opened["id"])


@pytest.mark.slow
def test_faster_sampling_switches_on_for_the_windowed_device_only(make_daemon):
    daemon = make_daemon()
    reads: Counter[tuple[str, int]] = Counter()
    lock = threading.Lock()

    def count(backend, devices, domains, at):
        with lock:
            reads.update((backend, s.reading.index) for s in devices or ())

    daemon.sampler.listeners.append(count)
    assert not daemon.sampler.fast_sampling("nvidia") and not daemon.sampler.fast_sampling("rapl")
    opened = open_window(daemon.port, name="fast", devices=["nvidia:0"])
    assert daemon.sampler.fast_sampling("nvidia") and not daemon.sampler.fast_sampling("rapl")
    reads.clear()
    time.sleep(1.5)
    with lock:
        during = dict(reads)
    end_window(daemon.port, opened["id"])
    assert not daemon.sampler.fast_sampling("nvidia")
    assert during[("nvidia", 0)] >= 10  # about 15 at 0.1 s
    assert during.get(("nvidia", 1), 0) <= 3  # still at the 1 s --interval
    reads.clear()
    time.sleep(1.5)
    with lock:
        assert reads[("nvidia", 0)] <= 3  # back to --interval once the last window ended


@pytest.mark.slow
def test_fast_sampling_stays_on_until_the_last_window_on_the_device_ends(make_daemon):
    daemon = make_daemon()
    first = open_window(daemon.port, name="a", devices=["nvidia:0"])
    second = open_window(daemon.port, name="b", devices=["nvidia:0", "rapl:package-0"])
    assert daemon.sampler.fast_sampling("rapl")
    end_window(daemon.port, first["id"])
    assert daemon.sampler.fast_sampling("nvidia") and daemon.sampler.fast_sampling("rapl")
    end_window(daemon.port, second["id"])
    assert not daemon.sampler.fast_sampling("nvidia") and not daemon.sampler.fast_sampling("rapl")


@pytest.mark.slow
def test_a_device_lost_mid_window_keeps_its_energy_so_far(make_daemon, gpus):
    daemon = make_daemon()
    opened = open_window(daemon.port, name="lossy", devices=["nvidia:0", "nvidia:1"])
    time.sleep(1.0)
    gpus.gpus[1].lost = True
    time.sleep(1.0)
    ended = end_window(daemon.port, opened["id"])
    lost, alive = target(ended, "nvidia:1"), target(ended, "nvidia:0")
    assert lost["up"] is False and alive["up"] is True
    assert lost["energy_joules"] == pytest.approx(150 * 1.0, rel=0.15)  # up to the loss
    # the driver's counter at each edge is as of its last refresh, up to 100 ms behind
    assert alive["energy_joules"] == pytest.approx(300 * ended["duration_seconds"], abs=300 * 0.2)


@pytest.mark.slow
def test_a_window_with_one_sample_counts_power_times_duration(make_daemon, gpus):
    """GPU 0 hangs while the window opens, past --sample-timeout: its open read and the fast job's
    first read are given up on, and the next fast read is a minute away. Only the end's read lands:
    one sample, no counter delta, yet the energy is its power over the window's span, and says so."""
    daemon = make_daemon(interval=60.0, window_interval=60.0)
    gpus.gpus[0].hang.set()
    try:
        opened = open_window(daemon.port, name="short", devices=["nvidia:0"])  # reads given up on
    finally:
        gpus.gpus[0].hang.clear()
        gpus.gpus[0].release.set()
    time.sleep(0.2)
    ended = end_window(daemon.port, opened["id"])
    gpu = target(ended, "nvidia:0")
    assert gpu["samples"] == 1 and gpu["up"] is True and ended["duration_seconds"] > 0.5
    assert gpu["energy_joules"] == pytest.approx(WATTS[0] * ended["duration_seconds"], rel=1e-3)
    assert gpu["energy_source"] == "power_times_duration" and ended["schema_version"] == 3
    assert gpu["energy_counter_joules"] is None and ended["energy_joules"] == gpu["energy_joules"]


@pytest.mark.slow
def test_a_window_ends_by_itself_at_the_maximum_duration(make_daemon):
    daemon = make_daemon(window_max_duration=1)
    opened = open_window(daemon.port, name="forgotten", devices=["nvidia:0"])
    assert wait_until(lambda: call(daemon.port, "GET", f"/windows/{opened['id']}")[1]["status"] == "ended", 5)
    ended = call(daemon.port, "GET", f"/windows/{opened['id']}")[1]
    assert ended["end_reason"] == "max_duration" and ended["duration_seconds"] == pytest.approx(1.0, abs=0.3)
    assert not daemon.sampler.fast_sampling("nvidia")
    assert call(daemon.port, "POST", f"/windows/{opened['id']}/end")[0] == 409


@pytest.mark.slow
def test_open_windows_and_history_are_bounded(make_daemon):
    daemon = make_daemon(window_max_open=2, window_history=2)
    ids = [open_window(daemon.port, name=f"w{i}", devices=["nvidia:0"])["id"] for i in range(2)]
    status, body = call(daemon.port, "POST", "/windows", {"name": "third"})
    assert status == 429 and "--window-max-open" in body["error"]
    assert daemon.windows.open_count == 2
    for window_id in ids:
        end_window(daemon.port, window_id)
    third = open_window(daemon.port, name="w2", devices=["nvidia:0"])
    end_window(daemon.port, third["id"])
    assert call(daemon.port, "GET", f"/windows/{ids[0]}")[0] == 404  # dropped from the history
    assert [w["name"] for w in call(daemon.port, "GET", "/windows")[1]["windows"]] == ["w2", "w1"]


@pytest.mark.slow
def test_the_listing_comes_in_pages_of_at_most_100(make_daemon):
    """With 100 ended windows GET /windows answered 739 KB: a listing is now a page (20 by default,
    100 at most), open windows first, then ended ones, newest first, with the total and the next."""
    daemon = make_daemon(window_history=30)
    for i in range(24):
        end_window(daemon.port, open_window(daemon.port, name=f"w{i}", devices=["nvidia:0"])["id"])
    live = open_window(daemon.port, name="live", devices=["nvidia:0"])
    status, first = call(daemon.port, "GET", "/windows")
    assert status == 200 and first["total"] == 25 and len(first["windows"]) == 20
    assert first["windows"][0]["id"] == live["id"] and first["windows"][1]["name"] == "w23"
    assert first["next"] == "/windows?offset=20&limit=20"
    status, rest = call(daemon.port, "GET", first["next"])
    assert [w["name"] for w in rest["windows"]] == ["w4", "w3", "w2", "w1", "w0"] and rest["next"] is None
    assert all(not t["points"] for w in first["windows"] + rest["windows"] for t in w["targets"])
    assert len(call(daemon.port, "GET", "/windows?limit=100")[1]["windows"]) == 25
    assert call(daemon.port, "GET", "/windows?offset=30")[1] == {"windows": [], "total": 25, "next": None}
    for bad in ("limit=0", "limit=101", "limit=x", "offset=-1", f"offset={10**7}"):
        status, body = call(daemon.port, "GET", f"/windows?{bad}")
        assert status == 422 and "invalid page request" in body["error"], bad


@pytest.mark.slow
def test_only_the_newest_ended_windows_keep_their_time_series(make_daemon, monkeypatch):
    """The history keeps every ended window's summary, and the samples of the newest few only."""
    from warptd.recording import windows

    monkeypatch.setattr(windows, "HISTORY_WITH_POINTS", 2)
    daemon = make_daemon()
    ended = [
        end_window(daemon.port, open_window(daemon.port, name=f"w{i}", devices=["nvidia:0"])["id"])
        for i in range(4)
    ]
    for recording, kept in zip(ended, (False, False, True, True), strict=True):
        shown = call(daemon.port, "GET", f"/windows/{recording['id']}")[1]
        gpu = shown["targets"][0]
        assert bool(gpu["points"]) is kept, recording["name"]
        assert gpu["energy_joules"] == recording["targets"][0]["energy_joules"]  # the summary stays


@pytest.mark.slow
@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({}, 422, "name: Field required"),
        ({"name": "bad name!"}, 422, "name:"),
        ({"name": "x" * 65}, 422, "name:"),
        ({"name": "a", "devices": ["nvidia:7"]}, 422, "unknown device or domain 'nvidia:7'"),
        ({"name": "a", "devices": ["nonsense"]}, 422, "devices:"),
        ({"name": "a", "devices": "nvidia:0"}, 422, "devices:"),
        ({"name": "a", "color": "red"}, 422, "color: Extra inputs are not permitted"),
        ({"name": "a", "labels": {f"k{i}": "v" for i in range(17)}}, 422, "labels:"),
        ({"name": "a", "labels": {"bad-key": "v"}}, 422, "label name"),
        ({"name": "a", "labels": {"k": "v" * 257}}, 422, "over 256"),
        (b"{not json", 400, "malformed JSON"),
        (b"[1, 2]", 400, "JSON object"),
        ('{"name": "u16"}'.encode("utf-16"), 400, "not UTF-8"),  # json.loads(bytes) read it: 201
        ('{"name": "u16"}'.encode("utf-16-le"), 400, "malformed JSON"),  # no BOM: NULs in UTF-8
        ('{"name": "u32"}'.encode("utf-32"), 400, "not UTF-8"),
        (b'{"name": "caf\xe9"}', 400, "not UTF-8"),
        ('\ufeff{"name": "bom"}'.encode(), 400, "malformed JSON"),
    ],
)
def test_bad_requests_are_refused_and_start_nothing(make_daemon, payload, status, message):
    daemon = make_daemon()
    answer, body = call(daemon.port, "POST", "/windows", payload)
    assert answer == status and message in body["error"], body
    assert daemon.windows.open_count == 0 and not daemon.sampler.fast_sampling("nvidia")
    assert daemon.sampler.watches.devices("nvidia") == set()


@pytest.mark.slow
def test_other_4xx(make_daemon):
    daemon = make_daemon()
    port = daemon.port
    status, body = call(port, "POST", "/windows", b'{"name": "a"}', {"Content-Type": "text/plain"})
    assert status == 415
    assert call(port, "GET", "/windows/nope")[0] == 404
    assert call(port, "POST", "/windows/nope/end")[0] == 404
    assert call(port, "DELETE", "/windows/nope")[0] == 404
    assert call(port, "PUT", "/windows")[0] == 405
    assert call(port, "POST", "/windows", b'{"name": "' + b"a" * 70_000 + b'"}')[0] == 413
    status, body = call(port, "POST", "/windows", {"name": "a"}, {"Origin": "http://evil.example"})
    assert status == 403 and "cross-origin" in body["error"]
    opened = open_window(port, name="twice", devices=["nvidia:0"])
    assert call(port, "DELETE", f"/windows/{opened['id']}")[0] == 200
    status, body = call(port, "DELETE", f"/windows/{opened['id']}")
    assert status == 409 and "already ended" in body["error"]


@pytest.mark.slow
def test_deep_nesting_is_400_and_http10_without_host_is_403(make_daemon):
    import socket

    daemon = make_daemon()
    port = daemon.port
    status, body = call(port, "POST", "/windows", b"[" * 30_000)
    assert status == 400 and "nested deeper than 16" in body["error"]
    status, body = call(port, "POST", "/windows", b'{"name": "a", "labels": {"n": 1' + b"0" * 999 + b"}}")
    assert status == 400 and "number over 32" in body["error"]
    payload = b'{"name": "no-host"}'
    request = b"POST /windows HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(payload),
        payload,
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(request)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 403 "), reply[:200]
    assert b"Host header must name localhost" in reply
    assert daemon.windows.open_count == 0
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:  # with Host: as before
        conn.sendall(request.replace(b"HTTP/1.0\r\n", b"HTTP/1.0\r\nHost: localhost\r\n"))
        assert conn.recv(65536).startswith(b"HTTP/1.1 201 ")


@pytest.mark.slow
def test_the_token_protects_windows_on_the_daemon(make_daemon):
    daemon = make_daemon(stress_token="s3cret")
    assert call(daemon.port, "POST", "/windows", {"name": "a"})[0] == 401
    status, body = call(
        daemon.port,
        "POST",
        "/windows",
        {"name": "a", "devices": ["nvidia:0"]},
        {"Authorization": "Bearer s3cret"},
    )
    assert status == 201
    assert call(daemon.port, "POST", f"/windows/{body['id']}/end")[0] == 401
    assert call(daemon.port, "GET", f"/windows/{body['id']}")[0] == 200  # reading needs no token


@pytest.mark.slow
def test_no_windows_turns_the_endpoints_off(make_daemon):
    daemon = make_daemon(windows=False)
    status, body = call(daemon.port, "POST", "/windows", {"name": "a"})
    assert status == 404 and "--no-windows" in body["error"]
    assert call(daemon.port, "GET", "/windows")[0] == 404
    assert not select(parse(http(daemon.port, "GET", "/metrics")[2].decode()), "warptd_windows_open")


@pytest.mark.slow
def test_window_metrics_only_name_allowed_windows_and_pass_promtool(make_daemon):
    daemon = make_daemon(window_energy_names=["epoch"], carbon_intensity=400.0, energy_price=0.25)
    samples = parse(http(daemon.port, "GET", "/metrics")[2].decode())
    assert named(samples, "epoch") == [0]
    assert value(samples, "warptd_window_energy_joules_count") == 0
    first = open_window(daemon.port, name="epoch", devices=["nvidia:0"])
    second = open_window(daemon.port, name="secret-run-42", devices=["nvidia:1"])
    samples = parse(http(daemon.port, "GET", "/metrics")[2].decode())
    assert value(samples, "warptd_windows_open") == 2
    time.sleep(0.5)
    first, second = end_window(daemon.port, first["id"]), end_window(daemon.port, second["id"])
    body = http(daemon.port, "GET", "/metrics")[2]
    samples = parse(body.decode())
    assert value(samples, "warptd_windows_open") == 0
    assert named(samples, "epoch") == [pytest.approx(first["energy_joules"])]
    assert named(samples, "secret-run-42") == []
    assert value(samples, "warptd_window_energy_joules_count") == 2
    total = first["energy_joules"] + second["energy_joules"]
    assert value(samples, "warptd_window_energy_joules_sum") == pytest.approx(total)
    assert value(samples, "warptd_window_energy_joules_bucket", le="100.0") == 1  # ~75 J
    assert value(samples, "warptd_window_energy_joules_bucket", le="1000.0") == 2  # ~150 J
    assert first["carbon_grams"] == pytest.approx(first["energy_joules"] / 3.6e6 * 400)
    assert first["cost"] == pytest.approx(first["energy_joules"] / 3.6e6 * 0.25)
    assert first["targets"][0]["carbon_grams"] == pytest.approx(first["carbon_grams"])
    assert_promtool_clean(body)
    openmetrics = http(daemon.port, "GET", "/metrics", headers={"Accept": "application/openmetrics-text"})[2]
    assert b"# TYPE warptd_window_energy_joules histogram" in openmetrics


@pytest.mark.slow
def test_a_window_report_draws_the_window_s_own_samples_in_chromium(make_daemon, tmp_path):
    """GET /windows/ID/report: the recording the window returned, drawn point for point in a real
    browser; an open window's report is of what it recorded so far; an unknown one is a JSON 404."""
    from tests.browser import browse
    from tests.plotted import plotted, traces, with_probe
    from tests.recording.test_report import expected_series
    from warptd.recording.schema import Recording

    daemon = make_daemon()
    window = open_window(daemon.port, name="report-me", devices=["nvidia:0", "nvidia:1"])
    time.sleep(0.6)
    status, headers, _ = http(daemon.port, "GET", f"/windows/{window['id']}/report")
    assert status == 200 and headers["content-type"].startswith("text/html")
    recording = Recording.model_validate(end_window(daemon.port, window["id"]))
    status, headers, page = http(daemon.port, "GET", f"/windows/{window['id']}/report")
    assert status == 200 and "report-me" in page.decode()
    path = tmp_path / "window.html"
    path.write_text(with_probe(page.decode()))
    dom, console = browse(path.as_uri())
    assert console == [], console
    plots = plotted(dom)["plots"]
    power = expected_series(recording, lambda p: p.power_watts)
    assert set(power) == {"nvidia:0", "nvidia:1"} and all(len(points) >= 3 for points in power.values())
    assert traces(plots, "plot-power") == power
    status, body = call(daemon.port, "GET", "/windows/nope/report")
    assert status == 404 and "nope" in body["error"]
