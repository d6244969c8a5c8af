"""What the one real GPU we measured answered (``shared/notes/real-h200.md``): an H200 on driver
580.159.04, as capture parts: its prices and refresh periods (which every capture without its own
measurements replays), and the capture built from the notes alone (:func:`capture`).

Only what the notes state is an answer; everything else is unknown, and a replay answers it with the
double's model (whose H200 is this same GPU). The notes stay the truth: a real ``warptd capture`` of an
H200 replaces this capture once a GPU is lent.
"""

from __future__ import annotations

from warptd.capture import schema
from warptd.capture.schema import Call, FieldValue, GpmMetric, GpuState, Price, Refresh

NOTES_ID = "h200-notes"
NOTES = schema.Source(
    id=NOTES_ID,
    kind="notes",
    detail="shared/notes/real-h200.md: one NVIDIA H200 (141 GB, no MIG, no NVLink) on driver 580.159.04, "
    "CUDA 13.0, measured 2026-12-04 with shared/tools/real-gpu (check.py, costs.py) through nvidia-ml-py "
    "13.615.71",
)
DRIVER = "580.159.04"
MIB = 2**20

#: Process CPU per call, median of 100 (the notes' table); a field's price is what a batch asking it
#: alone cost (the fields one firmware query answers together: 74-76, 185-186, 197-198, 1-2).
_MEASURED_US: tuple[tuple[str, int | None, float], ...] = (
    ("nvmlDeviceGetTotalEnergyConsumption", None, 2900),
    ("nvmlDeviceGetFieldValues", 83, 2900),
    ("nvmlDeviceGetFieldValues", 191, 2900),
    ("nvmlDeviceGetFieldValues", 185, 7),
    ("nvmlDeviceGetFieldValues", 186, 7),
    ("nvmlDeviceGetPowerUsage", None, 2),
    ("nvmlDeviceGetFieldValues", 74, 580),
    ("nvmlDeviceGetFieldValues", 75, 580),
    ("nvmlDeviceGetFieldValues", 76, 580),
    ("nvmlDeviceGetFieldValues", 269, 6),
    ("nvmlDeviceGetFieldValues", 270, 580),
    ("nvmlDeviceGetFieldValues", 271, 580),
    ("nvmlDeviceGetFieldValues", 1, 130),
    ("nvmlDeviceGetFieldValues", 2, 130),
    ("nvmlDeviceGetFieldValues", 94, 150),
    ("nvmlDeviceGetPcieReplayCounter", None, 150),
    ("nvmlDeviceGetFieldValues", 169, 150),
    ("nvmlDeviceGetFieldValues", 197, 270),
    ("nvmlDeviceGetFieldValues", 198, 270),
    ("nvmlDeviceGetViolationStatus", None, 650),
    ("nvmlGpmSampleGet", None, 36),
    ("nvmlDeviceGetComputeRunningProcesses_v3", None, 10),
    ("nvmlDeviceGetProcessUtilization", None, 2100),
)
PRICES: tuple[Price, ...] = tuple(
    Price(function=function, field=field, cpu_seconds=us / 1e6, measured=100, source=NOTES_ID)
    for function, field, us in _MEASURED_US
)
#: How often the driver refreshed each value (the notes: the energy counter, fields 185/186 and GPM's
#: counters every 100 ms, nvmlDeviceGetPowerUsage every 50 ms).
REFRESH: tuple[Refresh, ...] = tuple(
    Refresh(value=value, seconds=seconds, source=NOTES_ID)  # type: ignore[arg-type]
    for value, seconds in (
        ("energy", 0.1),
        ("power_instant", 0.1),
        ("power_average", 0.1),
        ("power_usage", 0.05),
        ("gpm", 0.1),
    )
)


def masked_uuid(kind: str, index: int) -> str:
    """A masked ``GPU-``/``MIG-`` UUID of the shape NVML gives, numbered by the device's index (as
    nvidia_gpu_exporter's captures mask them)."""
    return f"{kind}-{index:08x}-0000-0000-0000-{index:012x}"


# -- the capture of the notes ---------------------------------------------------------------------------
#: Field ids that answered SUCCESS (values not recorded): unknown answers, the list kept in the header.
_ANSWERED = (
    *range(1, 7), *range(74, 84), 94, 95, *range(142, 146), 147, 169, *range(173, 200), *range(226, 231),
    269, 270, 271, 301, 302,
)  # fmt: skip
#: The driver's own latencyUsec of the fields the notes name.
_LATENCY_US = {83: 5600, 191: 3200, 270: 5400, 94: 2200, 3: 1700, 271: 1200, 169: 900, 75: 600, 1: 400}
#: GPM metrics answering 0 with SUCCESS for hardware the H200 lacks: 18 links' NVLink rates, NVENC 0-3,
#: NVDEC 7, NVJPG 7, OFA 1.
_GPM_ZEROS = (
    *range(60, 96, 2), *range(61, 97, 2), 166, 167, 168, 169, 37, 47, 51,
)  # fmt: skip
#: Under a bf16 matmul: GPM against nvidia-smi dmon --gpm-metrics (percent).
_GPM_LOADED = {2: 96.4, 3: 14.3, 5: 93.6, 10: 17.4, 1: 99.8}
_LINKS = 18


def _field(field_id: int, ret: str = schema.UNKNOWN, **answer: object) -> FieldValue:
    latency = _LATENCY_US.get(field_id)
    return FieldValue(id=field_id, ret=ret, latency_us=latency, **answer)  # type: ignore[arg-type]


def _state(loaded: bool) -> GpuState:
    stated = {185} if loaded else set()
    fields = [_field(field_id) for field_id in _ANSWERED if field_id not in stated]
    fields += [
        _field(field_id, schema.NOT_SUPPORTED, type="NVML_VALUE_TYPE_UNSIGNED_INT")
        for field_id in (251, 252, 253)
    ]
    fields += [_field(field_id, schema.NOT_SUPPORTED) for field_id in (91, 272, 273)]
    fields.append(_field(274, "NVML_ERROR_INVALID_ARGUMENT"))  # past NVML_FI_MAX of this driver
    calls = [
        Call(function="nvmlDeviceGetName", ret=schema.SUCCESS, value="NVIDIA H200", type="char[]"),
        Call(function="nvmlDeviceGetCudaComputeCapability", ret=schema.SUCCESS, value=[9, 0], type="int[2]"),
        Call(function="nvmlDeviceGetMaxPcieLinkGeneration", ret=schema.SUCCESS, value=5, type="unsigned int"),
        *(
            Call(function="nvmlDeviceGetNvLinkState", args=(link,), ret=schema.NOT_SUPPORTED)
            for link in range(_LINKS)
        ),
        Call(function="nvmlDeviceGetTotalEnergyConsumption", ret=schema.UNKNOWN),
        # GPM answered (samples priced, metrics compared with nvidia-smi dmon --gpm-metrics).
        Call(
            function="nvmlGpmQueryDeviceSupport",
            ret=schema.SUCCESS,
            value={"version": 1, "isSupportedDevice": 1},
            type="c_nvmlGpmSupport_t",
        ),
        Call(function="nvmlGpmSampleGet", ret=schema.SUCCESS),
    ]
    if loaded:
        fields.append(_field(185, schema.SUCCESS, value=692_000, type="NVML_VALUE_TYPE_UNSIGNED_INT"))
        calls.append(
            Call(
                function="nvmlDeviceGetEnforcedPowerLimit",
                ret=schema.SUCCESS,
                value=700_000,
                type="unsigned int",
            )
        )
        calls.append(
            Call(
                function="nvmlDeviceGetMemoryInfo_v2",
                ret=schema.UNKNOWN,  # used 1011 MiB; total and free not recorded
            )
        )
    else:
        calls.append(Call(function="nvmlDeviceGetProcessUtilization", args=(0,), ret="NVML_ERROR_NOT_FOUND"))
    gpm = [GpmMetric(id=metric, ret=schema.SUCCESS, value=0.0) for metric in _GPM_ZEROS]
    if loaded:
        gpm += [
            GpmMetric(id=metric, ret=schema.SUCCESS, value=value) for metric, value in _GPM_LOADED.items()
        ]
    return GpuState(
        seconds=0.0,
        load="bf16 matmul 8192 (POST /stress), power capped at 700 W" if loaded else None,
        calls=tuple(calls),
        fields=tuple(fields),
        gpm=tuple(gpm),
    )


def capture() -> schema.Capture:
    """The H200 of the notes, idle and under a bf16 matmul: what they record, the rest unknown."""
    return schema.Capture(
        header=schema.Header(
            format=schema.FORMAT,
            version=schema.VERSION,
            created="2026-12-04T00:00:00Z",
            tool="tests.doubles.real_h200",
            source=NOTES_ID,
            sources=(NOTES,),
            notes=(
                "Built from shared/notes/real-h200.md alone; a real warptd capture replaces it once a GPU is "
                "lent.",
                "Fields answering SUCCESS with values not recorded (unknown here): "
                "1-6, 74-83, 94, 95, 142-145, 147, 169, 173-199, 226-230, 269-271 (64-bit), 301, 302.",
                "Recorded but not a single answer (unknown here): idle memory used 0 and reserved 645 MiB "
                "(v1 used 645 MiB), loaded 1011 MiB used; loaded instant power 690-735 W, SM clock "
                "1440-1500 MHz, SW power cap active.",
                "nvmlDeviceGetEncoderUtilization answered 0 with SUCCESS on a GPU without an encoder.",
            ),
        ),
        node=schema.Node(
            os="Linux (Firecracker VM, 16 cores)",
            driver_version=DRIVER,
            nvml_version="13.580.159.04",
            cuda_driver_version="13.0",
            nvidia_ml_py="13.615.71",
        ),
        gpus=(
            schema.Gpu(
                index=0,
                identity=schema.Identity(name="NVIDIA H200"),
                states={schema.IDLE: _state(loaded=False), schema.LOADED: _state(loaded=True)},
                prices=PRICES,
                refresh=REFRESH,
            ),
        ),
    )
