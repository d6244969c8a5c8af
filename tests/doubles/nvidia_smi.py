"""Real ``nvidia-smi`` output parsed into what it states about each GPU, per state (idle, load).

The files of ``shared/data/nvidia-smi-captures/`` (one per GPU model and driver, recorded by
nvidia_gpu_exporter's capture script) hold, in sections headed ``# <state> :: <what>``: ``--version``,
``-L``, ``nvlink -s``, the symbols libnvidia-ml exports (some), and per state the default table, ``-q``,
the ``--query-gpu`` CSV and ``dmon``. :func:`parse` reads one into a :class:`SmiCapture`: values in
NVML's terms (bytes, W, MHz, °C, µs, percent), and where nvidia-smi printed a failure instead of a value
("N/A", "[N/A]", "[Not Supported]", "Requested functionality has been deprecated" …) the NVML return
code it prints that for (:class:`Failure`; :data:`NOT_SUPPORTED` for the common one).

It is the first half of ``tests.doubles.from_nvidia_smi``; it knows nothing of the capture format.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pynvml

MIB = 2**20


@dataclass(frozen=True, slots=True)
class Failure:
    """A value nvidia-smi could not show: the NVML return code its text stands for."""

    code: int

    @property
    def name(self) -> str:
        """The return code's name in nvml.h (``NVML_ERROR_NOT_SUPPORTED``)."""
        return _CODE_NAMES.get(self.code, f"NVML_ERROR_{self.code}")

    def __repr__(self) -> str:
        return self.name


NOT_SUPPORTED = Failure(pynvml.NVML_ERROR_NOT_SUPPORTED)
DEPRECATED = Failure(26)  # NVML_ERROR_DEPRECATED (nvml.h of CUDA 12.9 on; nvidia-ml-py lacks a name)
_CODE_NAMES = {
    value: name
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
} | {26: "NVML_ERROR_DEPRECATED"}
#: What nvidia-smi prints in place of a value, by the return code it stands for. "N/A" is its text for
#: NOT_SUPPORTED (``-q``; "[N/A]" in CSV, "[Not Supported]" in older ones); the rest are
#: nvmlErrorString's texts. WDDM's text is the Windows driver's NOT_SUPPORTED.
_FAILURES: dict[str, Failure] = {
    "N/A": NOT_SUPPORTED,
    "Not Supported": NOT_SUPPORTED,
    "Not available in WDDM driver model": NOT_SUPPORTED,
    "Requested functionality has been deprecated": DEPRECATED,
    "Insufficient Permissions": Failure(pynvml.NVML_ERROR_NO_PERMISSION),
    "Unknown Error": Failure(pynvml.NVML_ERROR_UNKNOWN),
    "GPU is lost": Failure(pynvml.NVML_ERROR_GPU_IS_LOST),
    "GPU requires reset": Failure(pynvml.NVML_ERROR_RESET_REQUIRED),
    "Timeout": Failure(pynvml.NVML_ERROR_TIMEOUT),
}

T = TypeVar("T")
#: A value as nvidia-smi stated it, or the failure it printed instead.
Stated = T | Failure

# -- the sections of a capture file ---------------------------------------------------------------
_SECTION = re.compile(r"^#{80}\n((?:#.*\n)+?)#{80}\n", re.MULTILINE)
_HEADER_LINE = re.compile(r"^([a-z_]+):\s+(.*)$")


def sections(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """The file's header (``collected_at``, ``os``, ``load`` …) and its sections by title
    (``"idle :: query (-q)"``)."""
    parts = _SECTION.split(text)
    header: dict[str, str] = {}
    for line in parts[2].splitlines() if len(parts) > 2 else ():
        if match := _HEADER_LINE.match(line):
            header[match[1]] = match[2].strip()
    found = {}
    for i in range(3, len(parts) - 1, 2):
        title = parts[i].splitlines()[0].removeprefix("# ").strip()
        found[title] = parts[i + 1]
    return header, found


# -- the indented tree of ``nvidia-smi -q`` -------------------------------------------------------
@dataclass
class Node:
    """One line of ``-q``: ``key : value``, or a heading (``value`` None) over its children."""

    key: str
    value: str | None = None
    children: list[Node] = field(default_factory=list)

    def get(self, *path: str) -> Node | None:
        """The first descendant along ``path`` (keys), or None."""
        node: Node | None = self
        for key in path:
            node = next((child for child in node.children if child.key == key), None) if node else None
        return node

    def all(self, key: str) -> list[Node]:
        return [child for child in self.children if child.key == key]

    def text(self, *path: str) -> str | None:
        node = self.get(*path)
        return node.value if node is not None else None


_KEY_VALUE = re.compile(r"^(.*?)\s+:\s?(.*)$")


def tree(text: str) -> Node:
    """``-q``'s lines as a tree by their indentation (four spaces a level)."""
    root = Node("")
    stack: list[tuple[int, Node]] = [(-1, root)]
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        # "Key   : value" (space before the colon: "GPU 00000000:01:00.0" is a heading); an empty value
        # is a heading too.
        match = _KEY_VALUE.match(line.strip())
        key, value = (match[1], match[2].strip()) if match else (line.strip(), "")
        node = Node(key.strip(), value or None)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


# -- values -----------------------------------------------------------------------------------------
def failure(text: str | None) -> Failure | None:
    """The failure ``text`` stands for (None: a value, or nothing printed)."""
    if text is None:
        return NOT_SUPPORTED
    stripped = text.strip().removeprefix("[").removesuffix("]").strip()
    return _FAILURES.get(stripped)


def number(text: str | None, unit: str = "") -> Stated[float]:
    """``"71.27 W"`` -> 71.27 (the unit checked, so a changed unit fails loudly), or the failure."""
    if (failed := failure(text)) is not None:
        return failed
    assert text is not None
    value, _, found = text.strip().partition(" ")
    if found.strip() != unit:
        raise ValueError(f"expected {unit or 'no unit'} in {text!r}")
    return float(value.rstrip("%x"))


def integer(text: str | None, unit: str = "") -> Stated[int]:
    value = number(text, unit)
    return value if isinstance(value, Failure) else int(value)


def mib(text: str | None) -> Stated[int]:
    """Bytes of a ``"81559 MiB"``."""
    value = integer(text, "MiB")
    return value if isinstance(value, Failure) else value * MIB


def flag(text: str | None, on: str = "Enabled", off: str = "Disabled") -> Stated[bool]:
    """True for ``on``, False for ``off`` (Yes/No, Active/Not Active …), or the failure."""
    if (failed := failure(text)) is not None:
        return failed
    if text == on:
        return True
    if text == off:
        return False
    raise ValueError(f"expected {on} or {off}: {text!r}")


def plain(text: str | None) -> Stated[str]:
    failed = failure(text)
    return failed if failed is not None else (text or "").strip()


# -- what the file states, per GPU ------------------------------------------------------------------
@dataclass(frozen=True)
class Memory:
    """A framebuffer (bytes): nvmlMemory_v2_t's total, reserved, used and free."""

    total: Stated[int]
    reserved: Stated[int]
    used: Stated[int]
    free: Stated[int]


@dataclass(frozen=True)
class Power:
    """Watts: the draw (average over 1 s, instantaneous) and the limits."""

    average: Stated[float]
    instant: Stated[float]
    limit: Stated[float] = NOT_SUPPORTED  # "Current Power Limit": nvmlDeviceGetPowerManagementLimit
    requested: Stated[float] = NOT_SUPPORTED
    default: Stated[float] = NOT_SUPPORTED
    minimum: Stated[float] = NOT_SUPPORTED
    maximum: Stated[float] = NOT_SUPPORTED
    enforced: Stated[float] = NOT_SUPPORTED  # CSV enforced.power.limit: nvmlDeviceGetEnforcedPowerLimit
    #: CSV power.draw: nvmlDeviceGetPowerUsage ("On Ampere or newer devices, returns average power draw
    #: over 1 sec. On older devices, returns instantaneous power draw", nvidia-smi --help-query-gpu).
    usage: Stated[float] = NOT_SUPPORTED


@dataclass(frozen=True)
class Clocks:
    """MHz by clock: graphics, sm, memory, video."""

    graphics: Stated[int]
    sm: Stated[int]
    memory: Stated[int]
    video: Stated[int]


@dataclass(frozen=True)
class ClockEvents:
    """The clock-event (throttle) reasons: masks of nvmlClocksEventReason bits (CSV), each reason's state
    (``-q``) and the time spent in each, in µs (``Clocks Event Reasons Counters``)."""

    supported: Stated[int]
    active: Stated[int]
    states: Mapping[str, Stated[bool]]
    counters_us: Mapping[str, Stated[int]]


@dataclass(frozen=True)
class Ecc:
    """ECC mode and error counts by location (``sram_correctable``, ``dram_uncorrectable`` …), and the
    totals NVML's fields 3-6 count (CSV ``ecc.errors.*.total``)."""

    current: Stated[bool]
    pending: Stated[bool]
    volatile: Mapping[str, Stated[int]]
    aggregate: Mapping[str, Stated[int]]
    totals: Mapping[str, Stated[int]]  # corrected_volatile, uncorrected_volatile, …_aggregate


@dataclass(frozen=True)
class RemappedRows:
    """nvmlDeviceGetRemappedRows' answer and the bank histogram; a failure on GPUs without it."""

    correctable: Stated[int]
    uncorrectable: Stated[int]
    pending: Stated[bool]
    failure: Stated[bool]
    histogram: Mapping[str, Stated[int]]


@dataclass(frozen=True)
class Pcie:
    gen_max: Stated[int]
    gen_current: Stated[int]
    device_gen_max: Stated[int]
    width_max: Stated[int]
    width_current: Stated[int]
    replays: Stated[int]
    replay_rollovers: Stated[int]
    tx_kb_per_s: Stated[int]  # nvmlDeviceGetPcieThroughput, KB/s over 20 ms
    rx_kb_per_s: Stated[int]


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a compute instance of a GPU instance)."""

    index: int
    gpu_instance: int
    compute_instance: int
    profile: str | None  # "3g.40gb", "1c.3g.71gb" (from -L)
    uuid: str | None
    multiprocessors: Stated[int]
    engines: Mapping[str, Stated[int]]  # copy, encoder, decoder, ofa, jpeg
    memory: Memory
    bar1_total: Stated[int]


@dataclass(frozen=True)
class Process:
    pid: int
    kind: str  # C, G, C+G
    name: str
    used_memory: Stated[int]
    gpu_instance: Stated[int]
    compute_instance: Stated[int]


@dataclass(frozen=True)
class SmiGpu:
    """One GPU in one state, as ``-q`` and the CSV state it."""

    index: int
    bus_id: str
    name: str
    brand: Stated[str]
    architecture: Stated[str]
    uuid: str
    serial: Stated[str]
    compute_capability: Stated[str]  # "9.0" (CSV)
    vbios: Stated[str]
    pci_device_id: Stated[str]
    pci_subsystem_id: Stated[str]
    minor_number: Stated[int]
    persistence_mode: Stated[bool]
    compute_mode: Stated[str]  # Default, Exclusive_Process, Prohibited
    driver_model: Stated[str]  # WDDM, TCC on Windows; N/A on Linux
    mig_current: Stated[bool]
    mig_pending: Stated[bool]
    mig_devices: tuple[MigDevice, ...]
    fans_percent: Stated[tuple[int, ...]]
    pstate: Stated[int]
    clock_events: ClockEvents
    memory: Memory
    bar1_total: Stated[int]
    utilization: Mapping[str, Stated[int]]  # gpu, memory, encoder, decoder, jpeg, ofa (percent)
    encoder_sessions: Stated[int]
    ecc: Ecc
    retired_pages: Mapping[str, Stated[int]]  # single_bit_ecc, double_bit_ecc, pending (0/1)
    remapped_rows: RemappedRows | Failure
    temperatures: Mapping[str, Stated[int]]  # gpu, memory, tlimit, shutdown, slowdown, max_operating …
    power: Power
    memory_power: Power
    module_power: Power
    power_smoothing: Stated[str]  # "Power Smoothing": N/A on a GPU without it
    clocks: Clocks
    max_clocks: Clocks
    applications_clocks: Mapping[str, Stated[int]]  # graphics, memory
    pcie: Pcie
    recovery_action: Stated[str]
    gsp_firmware: Stated[str]
    virtualization_mode: Stated[str]
    processes: tuple[Process, ...]


@dataclass(frozen=True)
class DmonRow:
    """One line of ``nvidia-smi dmon``: a second's power (W), temperatures (°C), utilizations (%) and
    clocks (MHz); a column the GPU lacks is a failure."""

    gpu: int
    values: Mapping[str, Stated[int]]


@dataclass(frozen=True)
class SmiState:
    """What one state (``idle``, ``load``) shows: its GPUs, and dmon's seconds."""

    name: str
    timestamp: str
    gpus: tuple[SmiGpu, ...]
    dmon: tuple[DmonRow, ...]


@dataclass(frozen=True)
class NvlinkState:
    """``nvidia-smi nvlink -s`` for one GPU: each link's speed (GB/s, None: inactive), or the failure."""

    links: Stated[tuple[float | None, ...]]
    message: str = ""  # what nvidia-smi printed instead of links


@dataclass(frozen=True)
class SmiCapture:
    """One nvidia-smi capture file: where it came from, the versions, what the driver's library exports,
    NVLink, and each state's GPUs."""

    path: Path
    header: Mapping[str, str]
    system: str  # linux, windows
    model: str  # the GPU model as the file is named ("nvidia-h100-mig")
    driver_version: str
    nvml_version: str
    cuda_version: str
    symbols: frozenset[str] | None  # None: not recorded
    nvlink: tuple[NvlinkState, ...]  # by GPU index
    mig_profiles: Mapping[int, Mapping[int, tuple[str, str]]]  # GPU -> MIG device -> (profile, uuid)
    states: Mapping[str, SmiState]


# -- parsing ------------------------------------------------------------------------------------------
_REASONS = {  # -q's reason names -> warptd's (nvmlClocksEventReason*)
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "Display Clock Setting": "display_clock_setting",
}
_REASON_COUNTERS = {
    "SW Power Capping": "sw_power_cap",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Braking": "hw_power_brake_slowdown",
}
_ECC_KINDS = {
    "SRAM Correctable": "sram_correctable",
    "SRAM Uncorrectable": "sram_uncorrectable",
    "SRAM Uncorrectable Parity": "sram_uncorrectable_parity",
    "SRAM Uncorrectable SEC-DED": "sram_uncorrectable_secded",
    "DRAM Correctable": "dram_correctable",
    "DRAM Uncorrectable": "dram_uncorrectable",
}
#: Temperature lines across driver branches (R610 renamed several) -> one name.
_TEMPERATURES = {
    "GPU Current Temp": "gpu",
    "GPU T.Limit Temp": "tlimit",
    "GPU Current T.Limit Temp": "tlimit",
    "GPU Shutdown T.Limit Temp": "shutdown_tlimit",
    "GPU Slowdown T.Limit Temp": "slowdown_tlimit",
    "GPU Max Operating T.Limit Temp": "max_operating_tlimit",
    "GPU Shutdown Temp": "shutdown",
    "GPU Slowdown Temp": "slowdown",
    "GPU Max Operating Temp": "max_operating",
    "GPU Target Temperature": "target",
    "GPU Target Temperature Specification": "target",
    "Memory Current Temp": "memory",
    "Memory Max Operating T.Limit Temp": "memory_max_operating_tlimit",
    "Memory Max Operating Temp": "memory_max_operating",
}
_UTILIZATION = {
    "GPU": "gpu", "Memory": "memory", "Encoder": "encoder", "Decoder": "decoder", "JPEG": "jpeg", "OFA": "ofa"
}  # fmt: skip
_ENGINES = {
    "Copy Engine count": "copy",
    "Encoder count": "encoder",
    "Decoder count": "decoder",
    "OFA count": "ofa",
    "JPG count": "jpeg",
}


def _memory(node: Node | None) -> Memory:
    if node is None:
        return Memory(NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED)
    reserved = node.text("Reserved")
    return Memory(
        total=mib(node.text("Total")),
        reserved=mib(reserved) if reserved is not None else NOT_SUPPORTED,
        used=mib(node.text("Used")),
        free=mib(node.text("Free")),
    )


def _power(node: Node | None, csv_row: Mapping[str, str] | None = None, prefix: str = "") -> Power:
    """A ``… Power Readings`` block with its CSV columns (``prefix``: ``module.`` for the module's);
    R610 nests the limits under "GPU Ceiling Power Limit"."""
    if node is None:
        return Power(NOT_SUPPORTED, NOT_SUPPORTED)
    limits = node.get("GPU Ceiling Power Limit") or node
    row = csv_row or {}
    enforced = row.get(f"{prefix}enforced.power.limit [W]")
    usage = row.get("power.draw [W]") if not prefix else None
    # The draw as the CSV states it, at the one instant of power.draw and the enforced limit (-q's are
    # read apart, a second away under a changing load); -q's where the CSV lacks it.
    average = row.get(f"{prefix}power.draw.average [W]", node.text("Average Power Draw"))
    instant = row.get(f"{prefix}power.draw.instant [W]", node.text("Instantaneous Power Draw"))
    return Power(
        average=number(average, "W"),
        instant=number(instant, "W"),
        limit=number(limits.text("Current Power Limit"), "W"),
        requested=number(limits.text("Requested Power Limit"), "W"),
        default=number(limits.text("Default Power Limit"), "W"),
        minimum=number(node.text("Min Power Limit"), "W"),
        maximum=number(node.text("Max Power Limit"), "W"),
        enforced=number(enforced, "W") if enforced is not None else NOT_SUPPORTED,
        usage=number(usage, "W") if usage is not None else NOT_SUPPORTED,
    )


def _clocks(node: Node | None) -> Clocks:
    node = node or Node("")
    return Clocks(*(integer(node.text(key), "MHz") for key in ("Graphics", "SM", "Memory", "Video")))


def _mask(text: str | None) -> Stated[int]:
    if (failed := failure(text)) is not None:
        return failed
    return int(text or "", 16)


def _counts(node: Node | None, names: Mapping[str, str], unit: str = "") -> dict[str, Stated[int]]:
    if node is None:
        return {}
    return {names[child.key]: integer(child.value, unit) for child in node.children if child.key in names}


def _ecc(gpu: Node, row: Mapping[str, str]) -> Ecc:
    errors = gpu.get("ECC Errors") or Node("")
    totals = {
        f"{kind}_{scope}": integer(row.get(f"ecc.errors.{kind}.{scope}.total", "[N/A]"))
        for kind in ("corrected", "uncorrected")
        for scope in ("volatile", "aggregate")
    }
    return Ecc(
        current=flag(gpu.text("ECC Mode", "Current")),
        pending=flag(gpu.text("ECC Mode", "Pending")),
        volatile=_counts(errors.get("Volatile"), _ECC_KINDS),
        aggregate=_counts(errors.get("Aggregate"), _ECC_KINDS),
        totals=totals,
    )


def _remapped(node: Node | None) -> RemappedRows | Failure:
    if node is None or node.value is not None:
        return failure(node.value if node else None) or NOT_SUPPORTED
    histogram = node.get("Bank Remap Availability Histogram") or Node("")
    return RemappedRows(
        correctable=integer(node.text("Correctable Error")),
        uncorrectable=integer(node.text("Uncorrectable Error")),
        pending=flag(node.text("Pending"), "Yes", "No"),
        failure=flag(node.text("Remapping Failure Occurred"), "Yes", "No"),
        histogram={child.key.lower(): integer(child.value, "bank(s)") for child in histogram.children},
    )


def _retired(node: Node | None) -> dict[str, Stated[int]]:
    node = node or Node("")
    pending = node.text("Pending Page Blacklist")
    return {
        "single_bit_ecc": integer(node.text("Single Bit ECC")),
        "double_bit_ecc": integer(node.text("Double Bit ECC")),
        "pending": _as_int(flag(pending, "Yes", "No")),
    }


def _as_int(value: Stated[bool]) -> Stated[int]:
    return value if isinstance(value, Failure) else int(value)


def _fans(text: str | None) -> Stated[tuple[int, ...]]:
    value = integer(text, "%")
    return value if isinstance(value, Failure) else (value,)


def _pstate(text: str | None) -> Stated[int]:
    if (failed := failure(text)) is not None:
        return failed
    return int((text or "").removeprefix("P"))


def _processes(node: Node | None) -> tuple[Process, ...]:
    """``Processes``: each "Process ID" line with the instance ids before it and its details under it."""
    if node is None or node.value is not None:
        return ()
    found, instance = [], {"GPU instance ID": "N/A", "Compute instance ID": "N/A"}
    for child in node.children:
        if child.key in instance:
            instance[child.key] = child.value or "N/A"
        elif child.key == "Process ID":
            found.append(
                Process(
                    pid=int(child.value or 0),
                    kind=child.text("Type") or "",
                    name=child.text("Name") or "",
                    used_memory=mib(child.text("Used GPU Memory")),
                    gpu_instance=integer(instance["GPU instance ID"]),
                    compute_instance=integer(instance["Compute instance ID"]),
                )
            )
    return tuple(found)


def _mig_devices(gpu: Node, profiles: Mapping[int, tuple[str, str]]) -> tuple[MigDevice, ...]:
    devices = []
    for node in gpu.all("MIG Device"):
        index = int(node.text("Index") or 0)
        shared = node.get("Device Attributes", "Shared") or Node("")
        profile, uuid = profiles.get(index, (None, None))
        devices.append(
            MigDevice(
                index=index,
                gpu_instance=int(node.text("GPU Instance ID") or 0),
                compute_instance=int(node.text("Compute Instance ID") or 0),
                profile=profile,
                uuid=uuid,
                multiprocessors=integer(shared.text("Multiprocessor count")),
                engines=_counts(shared, _ENGINES),
                memory=_memory(node.get("Shared FB Memory Usage")),
                bar1_total=mib(node.text("Shared BAR1 Memory", "Total")),
            )
        )
    return tuple(devices)


def _gpu(index: int, node: Node, row: Mapping[str, str], profiles: Mapping[int, tuple[str, str]]) -> SmiGpu:
    """One ``GPU <bus id>`` block of ``-q``, with the same GPU's CSV row for what only it states."""
    links = node.get("PCI", "GPU Link Info") or Node("")
    pci = node.get("PCI") or Node("")
    reasons = node.get("Clocks Event Reasons") or node.get("Clocks Throttle Reasons") or Node("")
    states: dict[str, Stated[bool]] = {}
    for child in reasons.children:  # HW Slowdown holds its two kinds
        for each in (child, *child.children):
            if each.key in _REASONS:
                states[_REASONS[each.key]] = flag(each.value, "Active", "Not Active")
    utilization = node.get("Utilization") or Node("")
    return SmiGpu(
        index=index,
        bus_id=node.key.removeprefix("GPU ").strip(),
        name=node.text("Product Name") or "",
        brand=plain(node.text("Product Brand")),
        architecture=plain(node.text("Product Architecture")),
        uuid=node.text("GPU UUID") or "",
        serial=plain(node.text("Serial Number")),
        compute_capability=plain(row.get("compute_cap", "[N/A]")),
        vbios=plain(node.text("VBIOS Version")),
        pci_device_id=plain(pci.text("Device Id")),
        pci_subsystem_id=plain(pci.text("Sub System Id")),
        minor_number=integer(node.text("Minor Number")),
        persistence_mode=flag(node.text("Persistence Mode")),
        compute_mode=plain(node.text("Compute Mode")),
        driver_model=plain(node.text("Driver Model", "Current")),
        mig_current=flag(node.text("MIG Mode", "Current")),
        mig_pending=flag(node.text("MIG Mode", "Pending")),
        mig_devices=_mig_devices(node, profiles),
        fans_percent=_fans(node.text("Fan Speed")),
        pstate=_pstate(node.text("Performance State")),
        clock_events=ClockEvents(
            supported=_mask(row.get("clocks_event_reasons.supported", "[N/A]")),
            active=_mask(row.get("clocks_event_reasons.active", "[N/A]")),
            states=states,
            counters_us=_counts(node.get("Clocks Event Reasons Counters"), _REASON_COUNTERS, "us"),
        ),
        memory=_memory(node.get("FB Memory Usage")),
        bar1_total=mib(node.text("BAR1 Memory Usage", "Total")),
        utilization={
            _UTILIZATION[child.key]: integer(child.value, "%")
            for child in utilization.children
            if child.key in _UTILIZATION
        },
        encoder_sessions=integer(node.text("Encoder Stats", "Active Sessions")),
        ecc=_ecc(node, row),
        retired_pages=_retired(node.get("Retired Pages")),
        remapped_rows=_remapped(node.get("Remapped Rows")),
        temperatures=_counts(node.get("Temperature"), _TEMPERATURES, "C"),
        power=_power(node.get("GPU Power Readings") or node.get("Power Readings"), row),
        memory_power=_power(node.get("GPU Memory Power Readings")),
        module_power=_power(node.get("Module Power Readings"), row, "module."),
        power_smoothing=plain(node.text("Power Smoothing")),
        clocks=_clocks(node.get("Clocks")),
        max_clocks=_clocks(node.get("Max Clocks")),
        applications_clocks={
            key.lower(): integer(node.text("Applications Clocks", key), "MHz")
            for key in ("Graphics", "Memory")
        },
        pcie=Pcie(
            gen_max=integer(links.text("PCIe Generation", "Max")),
            gen_current=integer(links.text("PCIe Generation", "Current")),
            device_gen_max=integer(links.text("PCIe Generation", "Device Max")),
            width_max=integer(links.text("Link Width", "Max")),
            width_current=integer(links.text("Link Width", "Current")),
            replays=integer(pci.text("Replays Since Reset")),
            replay_rollovers=integer(pci.text("Replay Number Rollovers")),
            tx_kb_per_s=integer(pci.text("Tx Throughput"), "KB/s"),
            rx_kb_per_s=integer(pci.text("Rx Throughput"), "KB/s"),
        ),
        recovery_action=plain(node.text("GPU Recovery Action")),
        gsp_firmware=plain(node.text("GSP Firmware Version")),
        virtualization_mode=plain(node.text("GPU Virtualization Mode", "Virtualization Mode")),
        processes=_processes(node.get("Processes")),
    )


def _csv_rows(text: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    reader = csv.reader(lines, skipinitialspace=True)
    header = next(reader)
    return [dict(zip(header, row, strict=True)) for row in reader]


def _dmon(text: str) -> tuple[DmonRow, ...]:
    """dmon's lines under its ``# gpu pwr gtemp …`` heading; "-" is a column the GPU lacks."""
    columns: list[str] = []
    rows = []
    for line in text.splitlines():
        if line.startswith("# gpu"):
            columns = line.lstrip("# ").split()
        elif line.strip() and not line.startswith("#") and columns:
            cells = line.split()
            values = {
                column: NOT_SUPPORTED if cell == "-" else int(cell)
                for column, cell in zip(columns[1:], cells[1:], strict=True)
            }
            rows.append(DmonRow(int(cells[0]), values))
    return tuple(rows)


def _state(
    name: str, found: Mapping[str, str], profiles: Mapping[int, Mapping[int, tuple[str, str]]]
) -> SmiState:
    query = tree(found[f"{name} :: query (-q)"])
    rows = _csv_rows(found.get(f"{name} :: query-gpu (csv, what the exporter parses)", ""))
    blocks = [child for child in query.children if child.key.startswith("GPU ")]
    gpus = tuple(
        _gpu(i, block, rows[i] if i < len(rows) else {}, profiles.get(i, {}))
        for i, block in enumerate(blocks)
    )
    return SmiState(
        name=name,
        timestamp=query.text("Timestamp") or "",
        gpus=gpus,
        dmon=_dmon(found.get(f"{name} :: dmon (per-device monitor, incl. PCIe rx/tx)", "")),
    )


_LIST_GPU = re.compile(r"^GPU (\d+): .*\(UUID: (\S+)\)$")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (\S+)\)$")


def _mig_profiles(text: str) -> dict[int, dict[int, tuple[str, str]]]:
    """``-L``: each GPU's MIG devices as (profile, UUID) by device index."""
    profiles: dict[int, dict[int, tuple[str, str]]] = {}
    gpu = -1
    for line in text.splitlines():
        if match := _LIST_GPU.match(line):
            gpu = int(match[1])
            profiles[gpu] = {}
        elif (match := _LIST_MIG.match(line)) and gpu >= 0:
            profiles[gpu][int(match[2])] = (match[1], match[3])
    return profiles


_LINK = re.compile(r"^\s+Link (\d+): (?:([\d.]+) GB/s|<inactive>)")


def _nvlink(text: str, gpus: int) -> tuple[NvlinkState, ...]:
    """``nvlink -s`` per GPU: its links' speeds, or what it printed instead (not supported)."""
    found: list[NvlinkState] = []
    links: list[float | None] = []
    message: list[str] = []

    def close() -> None:
        if links:
            found.append(NvlinkState(tuple(links)))
        else:
            found.append(NvlinkState(NOT_SUPPORTED, " ".join(message)))

    started = False
    for line in text.splitlines():
        if line.startswith("GPU "):
            if started:
                close()
            started, links, message = True, [], []
        elif match := _LINK.match(line):
            links.append(float(match[2]) if match[2] else None)
        elif line.strip():
            message.append(line.strip())
    if started:
        close()
    elif gpus:  # nothing per GPU: one message (or nothing) for all
        found = [NvlinkState(NOT_SUPPORTED, " ".join(message)) for _ in range(gpus)]
    return tuple(found)


def _versions(text: str) -> dict[str, str]:
    versions = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        versions[key.strip()] = value.strip()
    return versions


def _version(versions: Mapping[str, str], *keys: str) -> str:
    """The first of ``keys`` stating a version: R610's nvidia-smi calls the driver "KMD version" and
    prints "Deprecated, see …" under the old name."""
    for key in keys:
        value = versions.get(key, "")
        if value and not value.startswith("Deprecated"):
            return value
    return ""


def parse(path: str | Path) -> SmiCapture:
    """Read one capture file (``<os>-<arch>__<model>__<driver>.txt``)."""
    path = Path(path)
    header, found = sections(path.read_text(encoding="utf-8"))
    versions = _versions(found["capabilities :: version"])
    profiles = _mig_profiles(found.get("capabilities :: list (-L)", ""))
    states = {
        name: _state(name, found, profiles) for name in ("idle", "load") if f"{name} :: query (-q)" in found
    }
    symbols = found.get("capabilities :: nvml-symbols")
    gpus = len(next(iter(states.values())).gpus) if states else 0
    system, model, _ = path.stem.split("__")
    return SmiCapture(
        path=path,
        header=header,
        system=system.split("-")[0],
        model=model,
        driver_version=_version(versions, "DRIVER version", "KMD version"),
        nvml_version=versions.get("NVML version", ""),
        cuda_version=_version(versions, "CUDA Version", "CUDA version", "CUDA UMD version"),
        symbols=frozenset(symbols.split()) if symbols is not None else None,
        nvlink=_nvlink(found.get("capabilities :: nvlink -s", ""), gpus),
        mig_profiles=profiles,
        states=states,
    )


def captures(directory: str | Path) -> Iterator[SmiCapture]:
    """Every capture file under ``directory`` (its subfolders too), by name."""
    for path in sorted(Path(directory).rglob("*__*__*.txt"), key=lambda p: p.name):
        yield parse(path)
