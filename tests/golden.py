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
from warptd.metrics import catalog

ROOT = Path(__file__).parents[1]
CAPTURES = ROOT / "tests" / "captures"
COMMAND = "python -m tests.golden"
#: The daemon's cadences over a capture: every value read within a couple of seconds.
DAEMON_FLAGS = ("--interval", "0.25", "--health-interval", "1", "--energy-interval", "1")
#: Seconds after the daemon is ready before the first scrape (a health read and a GPM pair done), and
#: between the two scrapes that tell a steady value from a moving one.
SETTLE_S, APART_S = 2.5, 1.5
#: The families of what the daemon says about the hardware (its own workings are not the capture's).
KEPT = re.compile(
    r"^warptd_(device_.*|backend_up|sample_errors_total|power_domain_up|power_watts|energy_joules_total)$"
)


# -- what each unknown answer feeds -----------------------------------------------------------------------
def _field_families() -> dict[int, set[str]]:
    """Field id -> the families warptd makes of it: its health and link tables, and the fields it reads
    one by one (power, energy, throttle times, memory temperature, recovery action, link count)."""
    found: dict[int, set[str]] = {}
    for spec in (*fields.HEALTH, *fields.nvlink(fields.MAX_LINKS)):
        found.setdefault(spec.field_id, set()).add(spec.metric)
    links = {catalog.NVLINK_LINK_ERRORS.name, catalog.NVLINK_ERRORS.name}
    links |= {catalog.NVLINK_LINK_BYTES.name, catalog.NVLINK_BYTES.name}
    throttle = {field_id for n in fields.NUMBERINGS for ids in n.throttle.values() for field_id in ids}
    for field_id, families in (
        (fields.FI_TOTAL_ENERGY, {catalog.ENERGY.name, catalog.ENERGY_READ.name}),
        (fields.FI_POWER_INSTANT, {catalog.POWER.name, catalog.ENERGY.name}),
        (fields.FI_POWER_AVERAGE, {catalog.POWER_AVERAGE.name}),
        (fields.FI_MEMORY_TEMP, {catalog.TEMPERATURE.name}),
        (fields.FI_GPU_RECOVERY_ACTION, {catalog.RECOVERY_ACTION.name}),
        (fields.FI_RESET_STATUS, {catalog.RECOVERY_ACTION.name}),
        (fields.FI_DRAIN_AND_RESET_STATUS, {catalog.RECOVERY_ACTION.name}),
        (fields.FI_NVLINK_LINK_COUNT, links),
        *((field_id, {catalog.THROTTLE_SECONDS.name}) for field_id in throttle),
    ):
        found.setdefault(field_id, set()).update(families)
    for families in found.values():
        families.add(catalog.FIELD_LATENCY.name)
    return found


#: The GPM families (and the byte counters GPM stands in for): all rest on GPM where it answers.
GPM_FAMILIES = frozenset(m.metric for m in gpm.metric_table(pynvml)) | {
    catalog.PCIE_BYTES.name,
    catalog.NVLINK_BYTES.name,
}
_MIG = {"warptd_device_mig_info", catalog.MIG_INFO.name}
_PROCESSES = {catalog.PROCESS_UTILIZATION.name, catalog.PROCESS_MEMORY.name}
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
    "nvmlDeviceGetPerformanceState": {catalog.PERFORMANCE_STATE.name},
    "nvmlDeviceGetSupportedClocksEventReasons": {catalog.THROTTLE_ACTIVE.name, catalog.CLOCK_EVENT_ACTIVE.name},
    "nvmlDeviceGetCurrentClocksEventReasons": {catalog.THROTTLE_ACTIVE.name, catalog.CLOCK_EVENT_ACTIVE.name},
    "nvmlDeviceGetViolationStatus": {catalog.THROTTLE_SECONDS.name},
    "nvmlDeviceGetNumFans": {catalog.FAN_SPEED.name},
    "nvmlDeviceGetFanSpeed_v2": {catalog.FAN_SPEED.name},
    "nvmlDeviceGetEncoderUtilization": {catalog.ENCODER_UTILIZATION.name},
    "nvmlDeviceGetDecoderUtilization": {catalog.DECODER_UTILIZATION.name},
    "nvmlDeviceGetJpgUtilization": {catalog.JPEG_UTILIZATION.name},
    "nvmlDeviceGetOfaUtilization": {catalog.OFA_UTILIZATION.name},
    "nvmlDeviceGetRemappedRows": {catalog.REMAPPED_ROWS.name, catalog.ROW_REMAP_PENDING.name,
                                  catalog.ROW_REMAP_FAILURE.name},
    "nvmlDeviceGetPcieReplayCounter": {catalog.PCIE_REPLAYS.name},
    "nvmlDeviceGetNvLinkState": {catalog.NVLINK_LINK_ERRORS.name, catalog.NVLINK_ERRORS.name,
                                 catalog.NVLINK_LINK_BYTES.name, catalog.NVLINK_BYTES.name},
    "nvmlDeviceGetSupportedEventTypes": {catalog.XID_ERRORS.name, catalog.LAST_XID.name},
    "nvmlDeviceGetMaxMigDeviceCount": _MIG,
    "nvmlDeviceGetGpuInstanceProfileInfoV": {catalog.ENGINE_ACTIVE.name, catalog.ENCODER_UTILIZATION.name,
                                             catalog.DECODER_UTILIZATION.name, catalog.JPEG_UTILIZATION.name,
                                             catalog.OFA_UTILIZATION.name},
    "nvmlGpmQueryDeviceSupport": set(GPM_FAMILIES),
    "nvmlDeviceGetProcessUtilization": _PROCESSES,
    "nvmlDeviceGetProcessesUtilizationInfo": _PROCESSES,
    "nvmlDeviceGetComputeRunningProcesses_v3": _PROCESSES,
}  # fmt: skip
FIELD_FAMILIES = _field_families()


def unknowns_by_family(state: schema.GpuState) -> dict[str, list[str]]:
    """Family -> the unknown answers of ``state`` its series may rest on (as the golden file names
    them: ``field 83``, ``nvmlDeviceGetTotalEnergyConsumption()``, ``GPM``)."""
    found: dict[str, list[str]] = {}

    def add(families: Iterable[str], what: str) -> None:
        for family in families:
            if what not in found.setdefault(family, []):
                found[family].append(what)

    for answer in state.calls:
        if not answer.known:
            where = "" if answer.device == schema.GPU else f"{answer.device} "
            add(CALL_FAMILIES.get(answer.function, ()), f"{where}{answer.function}({', '.join(map(str, answer.args))})")
    for value in state.fields:
        if not value.known:
            add(FIELD_FAMILIES.get(value.id, ()), f"field {value.id}" + (f"/{value.scope}" if value.scope else ""))
    if any(not metric.known for metric in state.gpm) or not state.gpm:
        support = state.call("nvmlGpmQueryDeviceSupport")
        if support is None or not support.known or (isinstance(support.value, dict) and support.value.get("isSupportedDevice")):
            add(GPM_FAMILIES, "GPM")
    return found


# -- running the daemon ---------------------------------------------------------------------------------
def replay(capture: Path, state: str, command: Sequence[str]) -> list[str]:
    """``command`` run over ``capture``'s ``state`` through the NVML double."""
    chosen = [] if state == schema.IDLE else ["--state", state]
    return [sys.executable, "-m", "tests.doubles.replay", str(capture), *chosen, "--", *command]


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
    return repr(int(value)) if value == int(value) and abs(value) < 2**53 else repr(value)


def _scrape(port: int) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float], dict[str, str]]:
    status, _, body = http(port, "GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    values, types = {}, {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if KEPT.match(sample.name):
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "node"))
                values[sample.name, labels] = sample.value
                types[sample.name] = family.type
    return values, types


def run_daemon(capture: Path, state: str, workdir: Path) -> tuple[list[Series], dict[str, str]]:
    """The daemon over one state of a capture: its series (steady or moving) and their families' types."""
    log = workdir / f"{capture.stem}-{state}.log"
    empty = workdir / "empty"
    empty.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "warptd", "--listen", "127.0.0.1:0", "--backend", "nvidia",
               "--sysfs", str(empty), "--procfs", str(empty), "--log-format", "json", *DAEMON_FLAGS]  # fmt: skip
    env = {**os.environ, "WARPTD_NODE": "corpus", "PYTHONDONTWRITEBYTECODE": "1"}
    with log.open("w") as err:
        daemon = subprocess.Popen(replay(capture, state, command), cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)  # fmt: skip
    try:
        port = _port(daemon, log)
        time.sleep(SETTLE_S)
        first, _ = _scrape(port)
        time.sleep(APART_S)
        second, types = _scrape(port)
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=10)
    series = [
        Series(name, labels, value if first.get((name, labels)) == value else None)
        for (name, labels), value in sorted(second.items())
    ]
    return series, types


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


def run_doctor(capture: Path, state: str, workdir: Path) -> dict[str, object]:
    """``warptd doctor --json --quick`` over a state of a capture: what of it a capture fixes."""
    empty = workdir / "empty"
    empty.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "warptd", "--backend", "nvidia", "--sysfs", str(empty), "--procfs",
               str(empty), "doctor", "--json", "--quick"]  # fmt: skip
    env = {**os.environ, "WARPTD_NODE": "corpus", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(replay(capture, state, command), cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"warptd doctor ended {done.returncode}: {done.stderr[-3000:]}")
    report = json.loads(done.stdout)
    found: dict[str, object] = {"disagreements": report.get("disagreements")}
    for backend in report.get("backends", []):
        if backend.get("backend") != "nvidia":
            continue
        found["driver"] = backend.get("driver")
        found["numbering"] = backend.get("numbering", {}).get("branch")
        found["reads"] = sorted({p["read"] for d in backend.get("devices", []) for p in d.get("prices", [])})
        found["agreements"] = sorted(f"{a['pair']}: {a['status']}" for a in backend.get("agreements", []))
    return found


# -- the golden file --------------------------------------------------------------------------------------
def golden_path(capture: Path) -> Path:
    return capture.with_suffix(".golden")


def render(capture_path: Path, runs: Mapping[str, tuple[list[Series], dict[str, str], dict[str, object]]]) -> str:
    """The golden file's text: per state, the doctor's findings and every series, sorted."""
    capture = schema.Capture.read(capture_path)
    relative = capture_path.relative_to(ROOT) if capture_path.is_relative_to(ROOT) else capture_path
    lines = [
        f"# What warptd exports over {relative}, reviewed. Regenerate: {COMMAND} {relative}",
        "# A value is the one read (~: it moved); 'unverified' marks a series resting on an unknown answer.",
    ]
    for state, (series, types, doctor) in runs.items():
        lines.append(f"\n[{state}]")
        for key, value in doctor.items():
            lines.append(f"doctor {key}: {json.dumps(value)}")
        rests = _rests(capture, state)
        typed = set()
        for each in series:
            family = _family(each.name, types)
            if family not in typed:
                typed.add(family)
                lines.append(f"# TYPE {family} {types.get(family, 'unknown')}")
            on = rests.get(_catalog_name(each.name, family, types), [])
            lines.append(each.line() + (f"  # unverified: {', '.join(on)}" if on else ""))
    return "\n".join(lines) + "\n"


def _family(name: str, types: Mapping[str, str]) -> str:
    for suffix in ("_total", "_created", "_bucket", "_count", "_sum"):
        stem = name.removesuffix(suffix)
        if stem != name and stem in types:
            return stem
    return name


def _catalog_name(name: str, family: str, types: Mapping[str, str]) -> str:
    return f"{family}_total" if types.get(family) == "counter" else name


def _rests(capture: schema.Capture, state: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for gpu in capture.gpus:
        gpu_state = gpu.states.get(state)
        if gpu_state is None:
            continue
        for family, what in unknowns_by_family(gpu_state).items():
            found.setdefault(family, [])
            found[family] += [w for w in what if w not in found[family]]
    return found


def generate(capture: Path, workdir: Path) -> str:
    """Run the daemon and the doctor over each state of ``capture``; the golden file's text."""
    states = schema.Capture.read(capture).states
    runs = {}
    for state in states:
        series, types = run_daemon(capture, state, workdir)
        runs[state] = (series, types, run_doctor(capture, state, workdir))
    return render(capture, runs)


def generate_all(captures: Sequence[Path], workers: int = 4) -> dict[Path, str]:
    """Each capture's golden text, several daemons at once."""
    with tempfile.TemporaryDirectory(prefix="warptd-golden-") as tmp, concurrent.futures.ThreadPoolExecutor(
        workers
    ) as pool:
        futures = {capture: pool.submit(generate, capture, Path(tmp)) for capture in captures}
        return {capture: future.result() for capture, future in futures.items()}


def differences(expected: str, actual: str) -> list[str]:
    """The lines the two golden texts differ by (``-`` expected only, ``+`` actual only), comments aside
    from the ``# TYPE`` lines."""
    def meaningful(text: str) -> list[str]:
        return [line for line in text.splitlines() if line and (not line.startswith("#") or line.startswith("# TYPE"))]

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
    texts = generate_all(chosen)
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
