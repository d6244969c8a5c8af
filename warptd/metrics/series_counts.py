"""Series per GPU of each metric family, and a node's own, as bench/series_bench.py measured them
over the NVML double (8 GPUs of a model on a node, every media engine busy): docs/metrics.md and
docs/deploy.md are generated from it. Regenerate with ``python bench/series_bench.py --write``
(then ``python -m warptd.metrics.docs``)."""

#: The GPUs measured (8 on a node), as docs/metrics.md's columns name them.
MODELS = (
    "H200 PCIe, no NVLink",
    "H100 SXM, 18 NVLinks",
)
#: GPUs on the node measured.
GPUS_PER_NODE = 8
#: Family (as docs/metrics.md names it) -> its series per GPU on each of MODELS, every family
#: exported.
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
    "warptd_device_pcie_correctable_errors_total": (1, 1),
    "warptd_device_nvlink_errors_total": (0, 4),
    "warptd_device_nvlink_link_errors_total": (0, 72),
    "warptd_device_recovery_action": (1, 1),
    "warptd_device_nvml_field_latency_seconds_total": (1, 1),
    "warptd_device_graphics_engine_active_ratio": (1, 1),
    "warptd_device_sm_active_ratio": (1, 1),
    "warptd_device_sm_occupancy_ratio": (1, 1),
    "warptd_device_dram_bandwidth_ratio": (1, 1),
    "warptd_device_pipe_active_ratio": (5, 5),
    "warptd_device_engine_active_ratio": (15, 15),
    "warptd_device_decoder_utilization_ratio": (1, 1),
    "warptd_device_jpeg_utilization_ratio": (1, 1),
    "warptd_device_ofa_utilization_ratio": (1, 1),
    "warptd_device_performance_state": (1, 1),
    "warptd_device_pcie_bytes_total": (2, 2),
    "warptd_device_nvlink_bytes_total": (0, 2),
    "warptd_device_nvlink_link_bytes_total": (0, 36),
    "warptd_stress_running": (2, 2),
    "warptd_device_xid_errors_total": (9, 9),
}
#: A node's own series (on no GPU) by family -> on each of MODELS, (a plain serve, every family).
NODE_SERIES: dict[str, tuple[tuple[int, int], ...]] = {
    "warptd_backend_up": ((1, 1), (1, 1)),
    "warptd_sample_duration_seconds": ((1, 1), (1, 1)),
    "warptd_samples_total": ((1, 1), (1, 1)),
    "warptd_energy_dropped_joules_total": ((1, 1), (1, 1)),
    "warptd_energy_restart_overcount_joules_total": ((1, 1), (1, 1)),
    "warptd_energy_read_timestamp_seconds": ((1, 1), (1, 1)),
    "warptd_state_save_errors_total": ((1, 1), (1, 1)),
    "warptd_backend_read_cpu_seconds_total": ((2, 2), (2, 2)),
    "warptd_backend_reads_total": ((2, 2), (2, 2)),
    "warptd_last_sample_timestamp_seconds": ((1, 1), (1, 1)),
    "warptd_build_info": ((1, 1), (1, 1)),
    "warptd_stress_runs_total": ((6, 6), (6, 6)),
    "warptd_windows_open": ((1, 1), (1, 1)),
    "warptd_window_energy_joules": ((11, 11), (11, 11)),
    "process_cpu_seconds": ((1, 1), (1, 1)),
    "process_max_fds": ((1, 1), (1, 1)),
    "process_open_fds": ((1, 1), (1, 1)),
    "process_resident_memory_bytes": ((1, 1), (1, 1)),
    "process_start_time_seconds": ((1, 1), (1, 1)),
    "process_virtual_memory_bytes": ((1, 1), (1, 1)),
}
