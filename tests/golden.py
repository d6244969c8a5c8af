"""The corpus's golden files: what the real daemon exports over each capture of ``tests/captures/``, reviewed.

``python -m tests.golden [CAPTURE ...]`` runs ``warptd`` (and ``warptd doctor --json``) over each
capture through the NVML double (``python -m tests.doubles.replay CAPTURE -- …``), in each state the
capture holds, and writes ``NAME.golden`` beside ``NAME.json``: every series of the GPU's families on
``/metrics`` with its labels, its value where it stood still between two scrapes (``~`` where it moved:
counters, timestamps), its family's type; and what the doctor found (the field numbering, the reads, its
agreements). A series that rests on an answer the capture does not know (``ret: unknown``, answered by
the double's model) is marked ``unverified`` with the answers it rests on. Review the diff before
committing it: it is what warptd is held to on that GPU and driver. ``--check`` compares instead, as
``tests/e2e/test_corpus.py`` does.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pynvml
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import http
from warptd.backends.nvidia import fields, gpm
from warptd.capture import schema
from warptd.metrics import catalog, nvidia
from warptd.metrics.selection import DEFAULT_EXCLUDE

ROOT = Path(__file__).parents[1]
CAPTURES = ROOT / "tests" / "captures"
COMMAND = "python -m tests.golden"
#: Cadences that read every value within a couple of seconds; the per-process reads on.
DAEMON_FLAGS = ("--interval", "0.25", "--health-interval", "1", "--energy-interval", "1", "--processes")
#: The backends that read NVML (every available one loads, as for a user; the host's CPU is left out).
NVML_BACKENDS = frozenset({"nvidia", "nvidia_mig", "nvml"})
#: Seconds after the daemon is ready before the first scrape (a health read and a GPM pair done), and
#: between the two scrapes that tell a steady value from a moving one.
SETTLE_S, APART_S = 2.0, 1.2
#: The families of what the daemon says about the hardware (its own workings are not the capture's).
KEPT = re.compile(
    r"^warptd_(device_.*|backend_up|sample_errors_total|power_domain_up|power_watts|energy_joules_total)$"
)


# -- what each unknown answer feeds -----------------------------------------------------------------------
def _field_families() -> dict[int, set[str]]:
    """Field id -> the families warptd makes of it: its health and link tables, and the fields it reads
    one by one (power, energy, throttle times, memory temperature, recovery action, link count)."""
    found: dict[int, set[str]] = {}
    for row in (*fields.HEALTH, *fields.nvlink(nvidia.MAX_LINKS)):
        found.setdefault(row.source.id, set()).add(row.metric.name)
    links = {nvidia.NVLINK_LINK_ERRORS.name, nvidia.NVLINK_ERRORS.name}
    links |= {nvidia.NVLINK_LINK_BYTES.name, nvidia.NVLINK_BYTES.name}
    throttle = {field_id for n in fields.NUMBERINGS for ids in n.throttle.values() for field_id in ids}
    for field_id, families in (
        (fields.FI_TOTAL_ENERGY, {catalog.ENERGY.name, catalog.ENERGY_READ.name}),
        (fields.FI_POWER_INSTANT, {catalog.POWER.name, catalog.ENERGY.name}),
        (fields.FI_POWER_AVERAGE, {catalog.POWER_AVERAGE.name}),
        (fields.FI_MEMORY_TEMP, {catalog.TEMPERATURE.name}),
        (fields.FI_GPU_RECOVERY_ACTION, {nvidia.RECOVERY_ACTION.name}),
        (fields.FI_RESET_STATUS, {nvidia.RECOVERY_ACTION.name}),
        (fields.FI_DRAIN_AND_RESET_STATUS, {nvidia.RECOVERY_ACTION.name}),
        (fields.FI_NVLINK_LINK_COUNT, links),
        *((field_id, {catalog.THROTTLE_SECONDS.name}) for field_id in throttle),
    ):
        found.setdefault(field_id, set()).update(families)
    for families in found.values():
        families.add(nvidia.FIELD_LATENCY.name)
    return found


#: GPM metric id -> its family.
GPM_METRICS: dict[int, set[str]] = {}
for _metric in gpm.metric_table(pynvml):
    GPM_METRICS.setdefault(_metric.id, set()).add(_metric.metric)
#: The GPM families (and the byte counters GPM stands in for): all rest on GPM where it answers.
GPM_FAMILIES = frozenset(m.metric for m in gpm.metric_table(pynvml)) | {
    nvidia.PCIE_BYTES.name,
    nvidia.NVLINK_BYTES.name,
}
_MIG = {"warptd_device_mig_info", catalog.MIG_INFO.name}
_PROCESSES = {catalog.PROCESS_UTILIZATION.name, catalog.PROCESS_MEMORY.name}
_PROCESS_UTILIZATION = {catalog.PROCESS_UTILIZATION.name}
_REASONS = {catalog.THROTTLE_ACTIVE.name, catalog.CLOCK_EVENT_ACTIVE.name}
#: C function -> the families its answer feeds (with where warptd falls back to it).
CALL_FAMILIES: dict[str, set[str]] = {
    "nvmlDeviceGetTotalEnergyConsumption": {catalog.ENERGY.name, catalog.ENERGY_READ.name},
    "nvmlDeviceGetPowerUsage": {catalog.POWER.name, catalog.POWER_AVERAGE.name, catalog.ENERGY.name},
    "nvmlDeviceGetEnforcedPowerLimit": {catalog.POWER_LIMIT.name},
    "nvmlDeviceGetMemoryInfo_v2": {m.name for m in (catalog.MEMORY_TOTAL, catalog.MEMORY_USED,
                                                    catalog.MEMORY_FREE, catalog.MEMORY_RESERVED)},
    "nvmlDeviceGetUtilizationRates": {catalog.UTILIZATION.name, catalog.MEMORY_UTILIZATION.name},
    "nvmlDeviceGetTemperature": {catalog.TEMPERATURE.name},
    "nvmlDeviceGetClockInfo": {catalog.CLOCK.name},
    "nvmlDeviceGetPerformanceState": {nvidia.PERFORMANCE_STATE.name},
    "nvmlDeviceGetSupportedClocksEventReasons": _REASONS,
    "nvmlDeviceGetCurrentClocksEventReasons": _REASONS,
    "nvmlDeviceGetViolationStatus": {catalog.THROTTLE_SECONDS.name},
    "nvmlDeviceGetNumFans": {nvidia.FAN_SPEED.name},
    "nvmlDeviceGetFanSpeed_v2": {nvidia.FAN_SPEED.name},
    "nvmlDeviceGetEncoderUtilization": {nvidia.ENCODER_UTILIZATION.name},
    "nvmlDeviceGetDecoderUtilization": {nvidia.DECODER_UTILIZATION.name},
    "nvmlDeviceGetJpgUtilization": {nvidia.JPEG_UTILIZATION.name},
    "nvmlDeviceGetOfaUtilization": {nvidia.OFA_UTILIZATION.name},
    "nvmlDeviceGetRemappedRows": {nvidia.REMAPPED_ROWS.name, nvidia.ROW_REMAP_PENDING.name,
                                  nvidia.ROW_REMAP_FAILURE.name},
    "nvmlDeviceGetPcieReplayCounter": {nvidia.PCIE_REPLAYS.name},
    "nvmlDeviceGetNvLinkState": {nvidia.NVLINK_LINK_ERRORS.name, nvidia.NVLINK_ERRORS.name,
                                 nvidia.NVLINK_LINK_BYTES.name, nvidia.NVLINK_BYTES.name},
    "nvmlDeviceGetSupportedEventTypes": {catalog.XID_ERRORS.name, catalog.LAST_XID.name},
    "nvmlDeviceGetMaxMigDeviceCount": _MIG,
    "nvmlDeviceGetGpuInstanceProfileInfoV": {nvidia.ENGINE_ACTIVE.name, nvidia.ENCODER_UTILIZATION.name,
                                             nvidia.DECODER_UTILIZATION.name, nvidia.JPEG_UTILIZATION.name,
                                             nvidia.OFA_UTILIZATION.name},
    "nvmlDeviceGetProcessUtilization": _PROCESS_UTILIZATION,
    "nvmlDeviceGetProcessesUtilizationInfo": _PROCESS_UTILIZATION,
    "nvmlDeviceGetComputeRunningProcesses_v3": _PROCESSES,
}  # fmt: skip
FIELD_FAMILIES = _field_families()


_FIELD = re.compile(r"field (\d+)")
_GPM = re.compile(r"GPM (\d+)")
#: The GPM calls whose answers every GPM series rests on (allocating and freeing samples answer nothing).
_GPM_READS = ("nvmlGpmQueryDeviceSupport()", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet")
_CALL = re.compile(r"(?:mig:\d+ )?(nvml\w+)[( ]")


def rests_on(modelled: Iterable[str]) -> dict[str, list[str]]:
    """Family -> what of ``modelled`` (the replay's report: ``GPU 0: field 83``, ``GPU 0:
    nvmlDeviceGetFanSpeed_v2(0)``, ``GPU 0: GPM 1 on GI 3``, ``nvmlGpmMetricsGet (12 calls)``) its series
    may rest on."""
    found: dict[str, list[str]] = {}
    for item in modelled:
        what = item.split(": ", 1)[-1]
        if (match := _FIELD.match(what)) is not None:
            families: Iterable[str] = FIELD_FAMILIES.get(int(match[1]), ())
        elif (match := _GPM.match(what)) is not None:
            families = GPM_METRICS.get(int(match[1]), ())
        elif what.split(" ")[0] in _GPM_READS:
            families, what = GPM_FAMILIES, "GPM"
        elif (match := _CALL.match(what)) is not None:
            families = CALL_FAMILIES.get(match[1], ())
        else:
            families = ()
        sums = {sum_.total.name for sum_ in catalog.SUMS if sum_.of.name in families}
        for family in (*families, *sums):  # a GPU's sum over links rests on what each link does
            found.setdefault(family, []).append(what.removesuffix(" calls)").split(" (")[0])
    return {family: _few(sorted(set(items))) for family, items in found.items()}


def _few(items: list[str], shown: int = 4) -> list[str]:
    """At most ``shown`` items, then how many more."""
    return items if len(items) <= shown else [*items[:shown], f"{len(items) - shown} more"]


# -- running the daemon ---------------------------------------------------------------------------------
def replay(capture: Path, state: str, report: Path, command: Sequence[str]) -> list[str]:
    """``command`` run over ``capture``'s ``state`` through the NVML double, which writes to ``report``
    what its model answered instead of the capture."""
    options = ["--state", state, "--report", str(report)]
    return [sys.executable, "-m", "tests.doubles.replay", str(capture), *options, "--", *command]


def modelled(report: Path) -> list[str]:
    """What the replay's model answered: the capture's unknowns warptd asked, and the functions it
    called that the capture does not hold (``nvmlDeviceGetViolationStatus``)."""
    found = json.loads(report.read_text())
    return [*found.get("unknown", []), *found.get("modelled", [])]


@dataclass(frozen=True)
class Series:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float | None  # None: it moved between the scrapes

    def line(self) -> str:
        labels = ",".join(f'{k}="{v}"' for k, v in self.labels)
        value = "~" if self.value is None else _number(self.value)
        return f"{self.name}{{{labels}}} {value}"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return repr(int(value)) if value == int(value) and abs(value) < 2**53 else f"{value:.12g}"


Values = dict[tuple[str, tuple[tuple[str, str], ...]], float]
Scraped = tuple[Values, dict[str, str], bytes]


def _scrape(port: int) -> Scraped:
    """The kept series' values, their families' types, and the exposition as served."""
    status, _, body = http(port, "GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    values, types = {}, {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            backend = sample.labels.get("backend", sample.labels.get("source"))
            if KEPT.match(sample.name) and backend in NVML_BACKENDS:
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "node"))
                values[sample.name, labels] = sample.value
                types[family.name] = family.type
    return values, types, body


@dataclass(frozen=True)
class Run:
    """What one state of a capture gave: the daemon's series and their families' types, the doctor's
    findings, and what the double's model answered for either (unknowns asked, functions modelled)."""

    series: list[Series]
    exposition: bytes  # /metrics as served at the last scrape
    types: dict[str, str]
    doctor: dict[str, object]
    modelled: list[str]


def _environment() -> dict[str, str]:
    return {**os.environ, "WARPTD_NODE": "corpus", "PYTHONDONTWRITEBYTECODE": "1"}


def _roots(workdir: Path) -> list[str]:
    """Empty sysfs and procfs: nothing of this host gets into what the capture shows."""
    empty = workdir / "empty"
    empty.mkdir(exist_ok=True)
    return ["--sysfs", str(empty), "--procfs", str(empty)]


def run_daemon(
    capture: Path, state: str, workdir: Path
) -> tuple[list[Series], dict[str, str], bytes, list[str]]:
    """The daemon over one state of a capture: its series (steady or moving), their families' types,
    the last exposition, what the model answered. Ended by SIGINT to its process group, which the
    replay ignores: it then writes its report."""
    log, report = workdir / f"{capture.stem}-{state}.log", workdir / f"{capture.stem}-{state}.report"
    command = [sys.executable, "-m", "warptd", "--listen", "127.0.0.1:0", *_roots(workdir),
               "--log-format", "json", *DAEMON_FLAGS]  # fmt: skip
    with log.open("w") as err:
        daemon = subprocess.Popen(replay(capture, state, report, command), cwd=ROOT, env=_environment(),
                                  stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)  # fmt: skip
    try:
        first, second, types, body = _settled(_port(daemon, log))
    finally:
        _stop(daemon)
    series = [
        Series(name, labels, value if first.get((name, labels)) == value else None)
        for (name, labels), value in sorted(second.items())
    ]
    return series, types, body, modelled(report)


def _settled(port: int, timeout: float = 30.0) -> tuple[Values, Values, dict[str, str], bytes]:
    """Two scrapes ``APART_S`` apart with the same series, the first at least ``SETTLE_S`` after the
    daemon was ready: every read made once (a daemon slow to start on a busy machine shows its series
    late, and a series only in the second scrape would read as moving)."""
    time.sleep(SETTLE_S)
    deadline = time.monotonic() + timeout
    first, _, _ = _scrape(port)
    while True:
        time.sleep(APART_S)
        second, types, body = _scrape(port)
        if second.keys() == first.keys() or time.monotonic() > deadline:
            return first, second, types, body
        first = second


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    if daemon.poll() is not None:
        return
    os.killpg(daemon.pid, signal.SIGINT)
    try:
        daemon.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=10)


def _port(daemon: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError(f"the daemon ended ({daemon.returncode}): {log.read_text()[-3000:]}")
        for line in log.read_text().splitlines():
            if '"warptd_started"' in line:
                port = int(json.loads(line)["listen"].rpartition(":")[2])
                if http(port, "GET", "/readyz")[0] == 200:
                    return port
        time.sleep(0.1)
    raise RuntimeError(f"the daemon was not ready in {timeout:.0f} s: {log.read_text()[-3000:]}")


def run_doctor(capture: Path, state: str, workdir: Path) -> tuple[dict[str, object], list[str]]:
    """``warptd doctor --json --quick`` over a state of a capture: what of it a capture fixes (the
    driver, the field numbering, the reads it plans, its agreements), and what the model answered."""
    report = workdir / f"{capture.stem}-{state}.doctor-report"
    command = [sys.executable, "-m", "warptd", *_roots(workdir), *DAEMON_FLAGS, "doctor", "--json",
               "--quick"]  # fmt: skip
    done = subprocess.run(replay(capture, state, report, command), cwd=ROOT, env=_environment(),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"warptd doctor ended {done.returncode}: {done.stderr[-3000:]}")
    found: dict[str, object] = {}
    for backend in json.loads(done.stdout).get("backends", []):
        if backend.get("backend") != "nvidia":
            continue
        found["driver"] = backend.get("driver")
        found["numbering"] = backend.get("numbering", {}).get("branch")
        found["asked"] = backend.get("numbering", {}).get("asked")
        found["reads"] = sorted({p["read"] for d in backend.get("devices", []) for p in d.get("prices", [])})
        found["agreements"] = sorted(f"{a['pair']}: {a['status']}" for a in backend.get("agreements", []))
    return found, modelled(report)


def run(capture: Path, state: str, workdir: Path) -> Run:
    """The daemon over one state, and the doctor over the idle one (what it finds is the driver's and
    the GPU's, not the load's)."""
    series, types, body, by_daemon = run_daemon(capture, state, workdir)
    doctor, by_doctor = run_doctor(capture, state, workdir) if state == schema.IDLE else ({}, [])
    return Run(series, body, types, doctor, sorted({*by_daemon, *by_doctor}))


# -- the golden file --------------------------------------------------------------------------------------
def golden_path(capture: Path) -> Path:
    return capture.with_suffix(".golden")


def render(capture_path: Path, runs: Mapping[str, Run]) -> str:
    """The golden file's text: per state, the doctor's findings and every series, sorted."""
    relative = capture_path.relative_to(ROOT) if capture_path.is_relative_to(ROOT) else capture_path
    lines = [
        f"# What warptd exports over {relative}, reviewed. Regenerate: {COMMAND} {relative}",
        "# A value is the one read (~: it moved); 'unverified' marks a series resting on what the capture",
        "# does not hold (answered by the NVML double's model); 'absent … unverified', a family not exported",
        "# perhaps only because the model answered so.",
    ]
    for state, found in runs.items():
        lines.append(f"\n[{state}]")
        lines += [f"doctor {key}: {json.dumps(value)}" for key, value in found.doctor.items()]
        rests = rests_on(found.modelled)
        typed = set()
        for each in found.series:
            family = _family(each.name, found.types)
            if family not in typed:
                typed.add(family)
                lines.append(f"# TYPE {family} {found.types.get(family, 'unknown')}")
            on = rests.get(_catalog_name(each.name, family, found.types), [])
            lines.append(each.line() + (f"  # unverified: {', '.join(on)}" if on else ""))
        shown = {
            _catalog_name(each.name, _family(each.name, found.types), found.types) for each in found.series
        }
        for family in sorted(set(rests) - shown - set(DEFAULT_EXCLUDE)):  # absent, maybe only by the model
            lines.append(f"absent {family}  # unverified: {', '.join(rests[family])}")
    return "\n".join(lines) + "\n"


def _family(name: str, types: Mapping[str, str]) -> str:
    for suffix in ("_total", "_created", "_bucket", "_count", "_sum"):
        stem = name.removesuffix(suffix)
        if stem != name and stem in types:
            return stem
    return name


def _catalog_name(name: str, family: str, types: Mapping[str, str]) -> str:
    return f"{family}_total" if types.get(family) == "counter" else name


def run_all(captures: Sequence[Path], workers: int = 6) -> dict[Path, dict[str, Run]]:
    """Each capture's runs by state, several at once (each state of each capture its own)."""
    jobs = [(capture, state) for capture in captures for state in schema.Capture.read(capture).states]
    with (
        tempfile.TemporaryDirectory(prefix="warptd-golden-") as tmp,
        concurrent.futures.ThreadPoolExecutor(workers) as pool,
    ):
        futures = {job: pool.submit(run, *job, Path(tmp)) for job in jobs}
        runs = {job: future.result() for job, future in futures.items()}
    return {
        capture: {state: found for (of, state), found in runs.items() if of == capture}
        for capture in captures
    }


def differences(expected: str, actual: str) -> list[str]:
    """The lines the two golden texts differ by (``-`` expected only, ``+`` actual only), comments aside
    from the ``# TYPE`` lines."""

    def meaningful(text: str) -> list[str]:
        return [
            line
            for line in text.splitlines()
            if line and (not line.startswith("#") or line.startswith("# TYPE"))
        ]

    old, new = meaningful(expected), meaningful(actual)
    gone = [f"- {line}" for line in old if line not in set(new)]
    came = [f"+ {line}" for line in new if line not in set(old)]
    return gone + came


def captures(names: Sequence[str] = ()) -> list[Path]:
    """The captures named (paths), or every capture of the corpus."""
    if names:
        return [Path(name).resolve() for name in names]
    return sorted(CAPTURES.glob("*.json"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("captures", nargs="*", help="capture files (default: every one in tests/captures/)")
    parser.add_argument("--check", action="store_true", help="compare with the golden files, write nothing")
    args = parser.parse_args(argv)
    chosen = captures(args.captures)
    started = time.monotonic()
    texts = {capture: render(capture, runs) for capture, runs in run_all(chosen).items()}
    failed = 0
    for capture, text in texts.items():
        path = golden_path(capture)
        if args.check:
            expected = path.read_text() if path.exists() else ""
            diff = differences(expected, text) if expected else [f"no golden file: {path.name}"]
            failed += bool(diff)
            print(f"{path.name}: " + ("\n  ".join(["differs", *diff]) if diff else "as reviewed"))
        else:
            path.write_text(text)
            print(f"wrote {path}: review its diff before committing it")
    print(f"{len(texts)} capture(s) in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
