"""Series per GPU of each metric family, as bench/series_bench.py measured them over the NVML
double with every family exported: docs/metrics.md is generated from it. Regenerate with
``python bench/series_bench.py --write`` (then ``python -m warptd.metrics.docs``)."""

#: The GPUs measured (8 on a node), as docs/metrics.md's columns name them.
MODELS = (
    "H200 PCIe, no NVLink",
    "H100 SXM, 18 NVLinks",
)
#: Family (as docs/metrics.md names it) -> its series per GPU on each of MODELS.
SERIES_PER_GPU: dict[str, tuple[int, ...]] = {
    "warptd_device_info": (1, 1),
    "warptd_device_up": (1, 1),
    "warptd_device_memory_total_bytes": (1, 1),
    "warptd_device_memory_used_bytes": (1, 1),
    "warptd_device_memory_free_bytes": (1, 1),
    "warptd_device_memory_reserved_bytes": (1, 1),
    "warptd_device_utilization_ratio": (1, 1),
    "warptd_device_memory_utilization_ratio": (1, 1),
    "warptd_device_power_watts": (1, 1),
    "warptd_device_power_average_watts": (1, 1),
    "warptd_device_power_limit_watts": (1, 1),
    "warptd_device_energy_joules_total": (1, 1),
    "warptd_device_energy_read_timestamp_seconds": (1, 1),
    "warptd_device_temperature_celsius": (2, 2),
    "warptd_device_clock_hertz": (3, 3),
    "warptd_device_throttle_active": (6, 6),
    "warptd_device_throttle_seconds_total": (6, 6),
    "warptd_device_clock_event_active": (3, 3),
    "warptd_device_ecc_errors_total": (2, 2),
    "warptd_device_ecc_lifetime_errors_total": (2, 2),
    "warptd_device_remapped_rows": (2, 2),
    "warptd_device_row_remap_pending": (1, 1),
    "warptd_device_row_remap_failure": (1, 1),
    "warptd_device_pcie_replays_total": (1, 1),
    "warptd_device_nvlink_errors_total": (0, 72),
    "warptd_device_recovery_action": (8, 8),
    "warptd_device_nvml_field_latency_seconds_total": (1, 1),
    "warptd_device_graphics_engine_active_ratio": (1, 1),
    "warptd_device_sm_active_ratio": (1, 1),
    "warptd_device_sm_occupancy_ratio": (1, 1),
    "warptd_device_dram_bandwidth_ratio": (1, 1),
    "warptd_device_pipe_active_ratio": (5, 5),
    "warptd_device_performance_state": (1, 1),
    "warptd_device_pcie_bytes_total": (2, 2),
    "warptd_device_nvlink_bytes_total": (0, 36),
    "warptd_stress_running": (2, 2),
    "warptd_device_xid_errors_total": (9, 9),
}
