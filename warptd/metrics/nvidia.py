"""NVIDIA's table: every value warptd reads from NVML by field id, GPM metric or a call of the health
reads, one :class:`~warptd.metrics.spec.Row` each, and the families they fill, declared here once.

The catalog (:mod:`warptd.metrics.catalog`) lists these families in the order of their first row;
the backend builds its field batches (``warptd.backends.nvidia.fields``), its GPM metric table and its
health reads from the rows; a test holds the NVML double to an answer for every field row. Ids, scopes
and units are nvml.h's (the driver's ABI), named as nvml.h names them; docs/telemetry.md lists each
with the driver that added it. Some families are other vendors' too (AMD fills the ECC errors, PCIe
replays, retirements pending, fans, media engines and link bytes from rows of its own).

A new NVML field metric is one row here (its family declared in it), an answer in the double's
``FIELD_ANSWERS`` and a line of a test's table; ``python -m warptd.metrics.docs --write`` and
``python bench/series_bench.py --write`` bring the generated docs and series counts along.
"""

from __future__ import annotations

from warptd.metrics.spec import Cadence, Call, Entry, Field, MetricSpec, Row, Sum, Twin, families
from warptd.metrics.spec import device as _device

HEALTH, GPM = Cadence.HEALTH, Cadence.GPM
#: The most NVLinks a GPU of the R580 drivers has (Hopper, Blackwell: 18); nvml.h's
#: NVML_NVLINK_MAX_LINKS grew to 36 in CUDA 13.5, which an R580 driver does not know.
MAX_LINKS = 18
#: Links the per-link error ids number (L0-L11). The link also goes in scopeId, where drivers from
#: R575 (CUDA 12.9) take it; links beyond are read by nvmlDeviceGetNvLinkErrorCounter, as DCGM does.
NVLINK_ERROR_LINKS = 12
#: Per-link NVLink error counters by kind: the field id of link 0 for links 0-5 and of link 6 for
#: links 6-11 (NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_L0 / _L6).
NVLINK_ERROR_IDS: dict[str, tuple[int, int]] = {
    "crc_flit": (32, 96),
    "crc_data": (39, 102),
    "replay": (46, 108),
    "recovery": (53, 114),
}
#: nvmlNvLinkErrorCounter_t by kind: NVML_NVLINK_ERROR_DL_REPLAY = 0, _RECOVERY, _CRC_FLIT, _CRC_DATA.
NVLINK_ERROR_COUNTERS: dict[str, int] = {"crc_flit": 2, "crc_data": 3, "replay": 0, "recovery": 1}

# -- health: ECC, row remapping, page retirement, link errors ------------------------------------
ECC_ERRORS = _device(
    "warptd_device_ecc_errors_total",
    "counter",
    "ECC errors counted since the driver loaded (NVML volatile counts), monotonic across driver reloads; "
    "kind corrected (single-bit) or uncorrected (double-bit). AMD: summed over the RAS blocks.",
    "kind",
    cadence=HEALTH,
)
ECC_LIFETIME_ERRORS = _device(
    "warptd_device_ecc_lifetime_errors_total",
    "counter",
    "ECC errors over the device's lifetime as the device stores them (NVML aggregate counts, kept across "
    "reboots); kind corrected or uncorrected.",
    "kind",
    cadence=HEALTH,
    opt_in="the device's own lifetime store: the volatile counts "
    "(warptd_device_ecc_errors_total) and remapped rows are what alerts watch",
)
REMAPPED_ROWS = _device(
    "warptd_device_remapped_rows",
    "gauge",
    "Memory rows remapped by the row-remapping mechanism, by the kind of error that caused it "
    "(correctable, uncorrectable).",
    "kind",
    cadence=HEALTH,
    dcgm=(
        Twin("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", labels=("uncorrectable",)),
        Twin("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", labels=("correctable",)),
    ),
)
ROW_REMAP_PENDING = _device(
    "warptd_device_row_remap_pending",
    "gauge",
    "1 while a row remap is pending (it takes effect at the next GPU reset), else 0.",
    cadence=HEALTH,
)
ROW_REMAP_FAILURE = _device(
    "warptd_device_row_remap_failure",
    "gauge",
    "1 if a row remap has failed (the GPU should be serviced), else 0.",
    cadence=HEALTH,
    dcgm=(Twin("DCGM_FI_DEV_ROW_REMAP_FAILURE"),),
)
RETIRED_PAGES = _device(
    "warptd_device_retired_pages",
    "gauge",
    "Memory pages retired, on GPUs that retire pages instead of remapping rows; cause single_bit_ecc "
    "(multiple single-bit errors) or double_bit_ecc.",
    "cause",
    cadence=HEALTH,
)
RETIRED_PAGES_PENDING = _device(
    "warptd_device_retired_pages_pending",
    "gauge",
    "1 while a page retirement is pending (it takes effect at the next reboot or driver reload), else 0.",
    cadence=HEALTH,
)
PCIE_REPLAYS = _device(
    "warptd_device_pcie_replays_total",
    "counter",
    "PCIe replays (link-level retransmissions) of the device, monotonic across driver reloads.",
    cadence=HEALTH,
    dcgm=(Twin("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),),
)
PCIE_CORRECTABLE_ERRORS = _device(
    "warptd_device_pcie_correctable_errors_total",
    "counter",
    "PCIe correctable errors the device's link reported (AER correctable: bad TLPs, bad DLLPs, receiver "
    "and replay-timer errors, each fixed by the link), monotonic across driver reloads; R535 and newer.",
    cadence=HEALTH,
    opt_in="a link-health diagnostic beside warptd_device_pcie_replays_total: a rising rate marks a "
    "degrading riser, cable or slot before the link drops",
)
NVLINK_LINK_ERRORS = _device(
    "warptd_device_nvlink_link_errors_total",
    "counter",
    "NVLink errors per link by kind: crc_flit, crc_data, replay, recovery; monotonic across driver reloads.",
    "link",
    "kind",
    cadence=HEALTH,
    opt_in="one series per NVLink and kind (72 on an H100 SXM's 18 links): "
    "warptd_device_nvlink_errors_total, every link's summed, stays",
)
NVLINK_ERRORS = _device(
    "warptd_device_nvlink_errors_total",
    "counter",
    "NVLink errors of the GPU by kind (crc_flit, crc_data, replay, recovery), every link's summed: "
    "warptd_device_nvlink_link_errors_total summed over link, each link's last total kept where a read "
    "misses it.",
    "kind",
    cadence=HEALTH,
)
RECOVERY_ACTION = _device(
    "warptd_device_recovery_action",
    "gauge",
    "The recovery action the driver recommends now, as one series of value 1 labelled with it: none, "
    "gpu_reset, node_reboot, drain_p2p, drain_and_reset, recover_imex_domain, bus_reset, system_reboot "
    "(a change of action ends one series and starts another).",
    "action",
    cadence=HEALTH,
)
FIELD_LATENCY = _device(
    "warptd_device_nvml_field_latency_seconds_total",
    "counter",
    "Time the NVIDIA driver says it spent reading this GPU's field values (nvmlFieldValue_t.latencyUsec "
    "summed over every answer of every batch, brought up to date at each health read, "
    "--health-interval); its rate is the driver's busy fraction for them.",
    cadence=HEALTH,
    opt_in="the driver's time for warptd's own field reads: a diagnostic",
)
# -- activity: what the device's units are doing, beyond "a kernel ran" -------------------------------
GRAPHICS_ENGINE_ACTIVE = _device(
    "warptd_device_graphics_engine_active_ratio",
    "gauge",
    "Fraction of time a graphics or compute context was active on the GPU between the last two GPM "
    "samples (NVIDIA GPM GRAPHICS_UTIL, Hopper and newer; DCGM's graphics engine activity, "
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE).",
    cadence=GPM,
    dcgm=(Twin("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),),
)
SM_ACTIVE = _device(
    "warptd_device_sm_active_ratio",
    "gauge",
    "Fraction of time at least one warp was resident on an SM, averaged over all SMs, between the last "
    "two GPM samples (NVIDIA GPM SM_UTIL, Hopper and newer; DCGM's SM activity).",
    cadence=GPM,
)
SM_OCCUPANCY = _device(
    "warptd_device_sm_occupancy_ratio",
    "gauge",
    "Resident warps relative to the SMs' maximum, between the last two GPM samples "
    "(NVIDIA GPM SM_OCCUPANCY).",
    cadence=GPM,
    opt_in="profiling detail beside warptd_device_sm_active_ratio (dcgm-exporter's "
    "default leaves it out too)",
)
DRAM_BANDWIDTH = _device(
    "warptd_device_dram_bandwidth_ratio",
    "gauge",
    "Fraction of the peak device-memory bandwidth used between the last two GPM samples (NVIDIA GPM "
    "DRAM_BW_UTIL; DCGM's DRAM activity).",
    cadence=GPM,
    dcgm=(Twin("DCGM_FI_PROF_DRAM_ACTIVE"),),
)
PIPE_ACTIVE = _device(
    "warptd_device_pipe_active_ratio",
    "gauge",
    "Fraction of cycles a compute pipe was active between the last two GPM samples, by pipe: tensor, fp64, "
    "fp32, fp16, integer (NVIDIA GPM).",
    "pipe",
    cadence=GPM,
    dcgm=(Twin("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", labels=("tensor",)),),
)
ENGINE_ACTIVE = _device(
    "warptd_device_engine_active_ratio",
    "gauge",
    "Fraction of the last sample period a media engine instance was busy, by engine (nvdec, nvjpg, ofa, "
    "nvenc) and instance (NVIDIA GPM; AMD: vcn, jpeg from the GPU metrics table). NVIDIA with MIG off "
    "gives no engine count: an instance is exported once it has been busy, so these series are not every "
    "engine, and an average over them is not the GPU's (the *_utilization_ratio families are).",
    "engine",
    "instance",
    cadence=GPM,
    opt_in="one series per media engine instance (15 on an H200: 7 NVDEC, 7 NVJPG, "
    "1 OFA), and with MIG off only those that have been busy: the GPU's averages over every engine, "
    "warptd_device_{encoder,decoder,jpeg,ofa}_utilization_ratio, stay",
)
ENCODER_UTILIZATION = _device(
    "warptd_device_encoder_utilization_ratio",
    "gauge",
    "Fraction of the driver's last sampling period the video encoders (NVENC) were busy, averaged over "
    "every one the GPU has (nvidia-smi's enc). With MIG off, exported once it has been above 0.",
    cadence=HEALTH,
    dcgm=(Twin("DCGM_FI_DEV_ENC_UTIL", 100.0),),
)
DECODER_UTILIZATION = _device(
    "warptd_device_decoder_utilization_ratio",
    "gauge",
    "Fraction of the driver's last sampling period the video decoders (NVDEC) were busy, averaged over "
    "every one the GPU has (nvidia-smi's dec; 2 of 7 busy read 2/7). With MIG off, exported once it has "
    "been above 0 (NVML answers 0 for a GPU without the engine too).",
    cadence=HEALTH,
    dcgm=(Twin("DCGM_FI_DEV_DEC_UTIL", 100.0),),
)
JPEG_UTILIZATION = _device(
    "warptd_device_jpeg_utilization_ratio",
    "gauge",
    "Fraction of the driver's last sampling period the JPEG decoders (NVJPG) were busy, averaged over "
    "every one the GPU has (nvidia-smi's jpg; nvmlDeviceGetJpgUtilization). With MIG off, exported once "
    "it has been above 0.",
    cadence=HEALTH,
)
OFA_UTILIZATION = _device(
    "warptd_device_ofa_utilization_ratio",
    "gauge",
    "Fraction of the driver's last sampling period the optical flow accelerators (OFA) were busy, averaged "
    "over every one the GPU has (nvidia-smi's ofa; nvmlDeviceGetOfaUtilization). With MIG off, exported "
    "once it has been above 0.",
    cadence=HEALTH,
)
FAN_SPEED = _device(
    "warptd_device_fan_speed_ratio",
    "gauge",
    "Fan speed by fan, relative to the fan's rated maximum; absent on boards without fans. NVML's is "
    "relative to the fan's maximum noise-tolerance speed and may exceed 1.",
    "fan",
    cadence=HEALTH,
)
PERFORMANCE_STATE = _device(
    "warptd_device_performance_state",
    "gauge",
    "Performance state: 0 (P0, maximum performance) to 15 (P15, minimum).",
)
# -- traffic ------------------------------------------------------------------------------------------
PCIE_BYTES = _device(
    "warptd_device_pcie_bytes_total",
    "counter",
    "Bytes over the device's PCIe link by direction (tx from the device, rx to it): the driver's "
    "counter where it keeps one, else its throughput integrated over the sample period.",
    "direction",
    cadence=HEALTH,
    dcgm=(
        Twin("DCGM_FI_PROF_PCIE_TX_BYTES", labels=("tx",)),
        Twin("DCGM_FI_PROF_PCIE_RX_BYTES", labels=("rx",)),
    ),
)
NVLINK_LINK_BYTES = _device(
    "warptd_device_nvlink_link_bytes_total",
    "counter",
    "Bytes over an NVLink (AMD: XGMI) link by link and direction (tx, rx): the driver's counter where it "
    "keeps one, else its throughput integrated over the sample period.",
    "link",
    "direction",
    cadence=HEALTH,
    opt_in="one series per NVLink (AMD: XGMI link) and direction (36 on an H100 SXM): "
    "warptd_device_nvlink_bytes_total, every link's summed, stays",
)
NVLINK_BYTES = _device(
    "warptd_device_nvlink_bytes_total",
    "counter",
    "Bytes over the device's NVLinks (AMD: XGMI links) by direction (tx, rx), every link's summed: "
    "warptd_device_nvlink_link_bytes_total summed over link, each link's last total kept where a read "
    "misses it.",
    "direction",
    cadence=HEALTH,
)
#: The families made of another's series summed over its links (catalog.SUMS).
SUMS: tuple[Sum, ...] = (
    Sum(NVLINK_ERRORS, NVLINK_LINK_ERRORS, "link"),
    Sum(NVLINK_BYTES, NVLINK_LINK_BYTES, "link"),
)


def _link_errors() -> tuple[Row, ...]:
    """Each link's error counters by kind: the per-link field ids for links 0-11 (the link in scopeId
    too), ``nvmlDeviceGetNvLinkErrorCounter`` beyond them, as DCGM reads links 12-17."""
    rows = []
    for link in range(MAX_LINKS):
        for kind, (first, later) in NVLINK_ERROR_IDS.items():
            if link < NVLINK_ERROR_LINKS:
                field_id = first + link if link < 6 else later + link - 6
                source: Field | Call = Field(
                    field_id, f"NVML_FI_DEV_NVLINK_{kind.upper()}_ERROR_COUNT_L{link}", link
                )
            else:
                source = Call("nvmlDeviceGetNvLinkErrorCounter", f"NVML_NVLINK_ERROR_DL_{kind.upper()}")
            rows.append(Row(source, NVLINK_LINK_ERRORS, (str(link), kind)))
    return tuple(rows)


def _gpm(metric: MetricSpec, unit: str, *entries: tuple[str, tuple[str, ...]]) -> tuple[Row, ...]:
    """GPM metrics (``NVML_GPM_METRIC_<key>``) of one family, each with its own label values."""
    return tuple(Row(Entry(f"NVML_GPM_METRIC_{key}"), metric, labels, unit) for key, labels in entries)


#: GPM's media engines: (its key's name, the engine label, instances nvml.h numbers).
_ENGINES = (("NVDEC", "nvdec", 8), ("NVJPG", "nvjpg", 8), ("NVOFA", "ofa", 2), ("NVENC", "nvenc", 4))
_PIPES = (
    ("ANY_TENSOR", "tensor"),
    ("FP64", "fp64"),
    ("FP32", "fp32"),
    ("FP16", "fp16"),
    ("INTEGER", "integer"),
)

ROWS: tuple[Row, ...] = (
    Row(Field(3, "NVML_FI_DEV_ECC_SBE_VOL_TOTAL"), ECC_ERRORS, ("corrected",)),
    Row(Field(4, "NVML_FI_DEV_ECC_DBE_VOL_TOTAL"), ECC_ERRORS, ("uncorrected",)),
    Row(Field(5, "NVML_FI_DEV_ECC_SBE_AGG_TOTAL"), ECC_LIFETIME_ERRORS, ("corrected",)),
    Row(Field(6, "NVML_FI_DEV_ECC_DBE_AGG_TOTAL"), ECC_LIFETIME_ERRORS, ("uncorrected",)),
    Row(Field(142, "NVML_FI_DEV_REMAPPED_COR"), REMAPPED_ROWS, ("correctable",)),
    Row(Field(143, "NVML_FI_DEV_REMAPPED_UNC"), REMAPPED_ROWS, ("uncorrectable",)),
    Row(Field(144, "NVML_FI_DEV_REMAPPED_PENDING"), ROW_REMAP_PENDING),  # 1 = yes
    Row(Field(145, "NVML_FI_DEV_REMAPPED_FAILURE"), ROW_REMAP_FAILURE),  # 1 = yes
    Row(Field(29, "NVML_FI_DEV_RETIRED_SBE"), RETIRED_PAGES, ("single_bit_ecc",)),
    Row(Field(30, "NVML_FI_DEV_RETIRED_DBE"), RETIRED_PAGES, ("double_bit_ecc",)),
    Row(Field(31, "NVML_FI_DEV_RETIRED_PENDING"), RETIRED_PAGES_PENDING),  # 1 = yes
    Row(Field(94, "NVML_FI_DEV_PCIE_REPLAY_COUNTER"), PCIE_REPLAYS),
    Row(Field(173, "NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS"), PCIE_CORRECTABLE_ERRORS),  # R535+
    *_link_errors(),
    # One series labelled with the action (NVML_GPU_RECOVERY_ACTION_*); before R570 from 226/227.
    Row(Field(230, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"), RECOVERY_ACTION),
    Row(Call("nvmlDeviceGetFieldValues", "latencyUsec"), FIELD_LATENCY, unit="µs"),
    *_gpm(GRAPHICS_ENGINE_ACTIVE, "percent", ("GRAPHICS_UTIL", ())),
    *_gpm(SM_ACTIVE, "percent", ("SM_UTIL", ())),
    *_gpm(SM_OCCUPANCY, "percent", ("SM_OCCUPANCY", ())),
    *_gpm(DRAM_BANDWIDTH, "percent", ("DRAM_BW_UTIL", ())),
    *_gpm(PIPE_ACTIVE, "percent", *((f"{key}_UTIL", (pipe,)) for key, pipe in _PIPES)),
    *_gpm(
        ENGINE_ACTIVE,
        "percent",
        *((f"{key}_{i}_UTIL", (engine, str(i))) for key, engine, count in _ENGINES for i in range(count)),
    ),
    Row(Call("nvmlDeviceGetEncoderUtilization"), ENCODER_UTILIZATION, unit="percent"),
    Row(Call("nvmlDeviceGetDecoderUtilization"), DECODER_UTILIZATION, unit="percent"),
    Row(Call("nvmlDeviceGetJpgUtilization"), JPEG_UTILIZATION, unit="percent"),
    Row(Call("nvmlDeviceGetOfaUtilization"), OFA_UTILIZATION, unit="percent"),
    Row(Call("nvmlDeviceGetFanSpeed_v2", "fan"), FAN_SPEED, unit="percent"),
    Row(Call("nvmlDeviceGetPerformanceState"), PERFORMANCE_STATE),  # NVML_PSTATE_UNKNOWN (32): absent
    Row(Field(197, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES"), PCIE_BYTES, ("tx",)),  # may wrap
    Row(Field(198, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"), PCIE_BYTES, ("rx",)),
    *_gpm(PCIE_BYTES, "MiB/s", ("PCIE_TX_PER_SEC", ("tx",)), ("PCIE_RX_PER_SEC", ("rx",))),
    *(
        Row(
            Field(field_id, f"NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{direction.upper()}", link),
            NVLINK_LINK_BYTES,
            (str(link), direction),
            "KiB",
        )
        for link in range(MAX_LINKS)
        for field_id, direction in ((138, "tx"), (139, "rx"))
    ),
    *_gpm(
        NVLINK_LINK_BYTES,
        "MiB/s",
        *(
            (f"NVLINK_L{link}_{d.upper()}_PER_SEC", (str(link), d))
            for link in range(MAX_LINKS)
            for d in ("rx", "tx")
        ),
    ),
)
#: Every family of the table, in the order of its first row (a sum before what it sums).
FAMILIES: tuple[MetricSpec, ...] = families(ROWS, SUMS)
#: The rows read from the field batch, and the GPM metrics asked.
FIELDS: tuple[Row, ...] = tuple(row for row in ROWS if isinstance(row.source, Field))
GPM_METRICS: tuple[Row, ...] = tuple(row for row in ROWS if isinstance(row.source, Entry))


def row_of(metric: MetricSpec) -> Row:
    """The first row of a family of the table."""
    return next(row for row in ROWS if row.metric is metric)
