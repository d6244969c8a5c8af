"""Every metric warptd exports: one table that both the collector and docs/metrics.md are built from.

The families every device reading has are declared here, with the node's own and the features'; the
families a vendor's rows fill come from its table (:mod:`warptd.metrics.nvidia`)."""

from __future__ import annotations

from warptd.metrics import nvidia
from warptd.metrics.spec import DOMAIN_LABELS, Cadence, MetricSpec, Twin
from warptd.metrics.spec import device as _device

#: dcgm-exporter counts memory in MiB.
MIB = 2**20

DEVICE_INFO = _device(
    "warptd_device_info",
    "gauge",
    "Device identity; always 1.",
    "model",
    "driver_version",
    "compute_capability",
    "pci_bus_id",
    "node",
    "source",
)
MIG_INFO = _device(
    "warptd_device_mig_info",
    "gauge",
    "Identity of an NVIDIA MIG device (backend nvidia_mig): its parent GPU's UUID, GPU and compute "
    "instance ids and profile; always 1.",
    "parent_uuid",
    "gpu_instance",
    "compute_instance",
    "profile",
)
DEVICE_UP = _device("warptd_device_up", "gauge", "1 if the device answered its last sample, 0 if it is lost.")
MEMORY_TOTAL = _device("warptd_device_memory_total_bytes", "gauge", "Device memory capacity.")
MEMORY_USED = _device(
    "warptd_device_memory_used_bytes",
    "gauge",
    "Device memory allocated by processes, as nvidia-smi shows it (driver-reserved memory apart where "
    "the SDK reports it).",
    dcgm=(Twin("DCGM_FI_DEV_FB_USED", 1 / MIB),),
)
MEMORY_FREE = _device(
    "warptd_device_memory_free_bytes",
    "gauge",
    "Device memory available for allocation.",
    dcgm=(Twin("DCGM_FI_DEV_FB_FREE", 1 / MIB),),
)
MEMORY_RESERVED = _device(
    "warptd_device_memory_reserved_bytes",
    "gauge",
    "Device memory the driver reserves for itself (NVML memory v2), not available to processes.",
    dcgm=(Twin("DCGM_FI_DEV_FB_RESERVED", 1 / MIB),),
)
UTILIZATION = _device(
    "warptd_device_utilization_ratio",
    "gauge",
    "Fraction of the last sample period during which the device was busy (0-1). NVML: time one or "
    "more kernels ran, not how many cores were busy.",
    dcgm=(Twin("DCGM_FI_DEV_GPU_UTIL", 100.0),),
)
MEMORY_UTILIZATION = _device(
    "warptd_device_memory_utilization_ratio",
    "gauge",
    "Fraction of the last sample period the memory controller was busy (0-1).",
    dcgm=(Twin("DCGM_FI_DEV_MEM_COPY_UTIL", 100.0),),
)
POWER = _device(
    "warptd_device_power_watts",
    "gauge",
    "Power draw of the device, the most instantaneous reading it offers (NVML: NVML_FI_DEV_POWER_INSTANT "
    "where supported, else nvmlDeviceGetPowerUsage where that is instantaneous: before Ampere, GA100; "
    "absent on R525/R530 drivers on Ampere and newer, whose only reading is the 1 s average). A device "
    "with an energy counter and no power reading at all (RAPL, i915) gets its counter's change over "
    "the sample interval.",
    dcgm=(Twin("DCGM_FI_DEV_POWER_USAGE", fallback=True),),
)
POWER_AVERAGE = _device(
    "warptd_device_power_average_watts",
    "gauge",
    "Power draw as averaged by the driver (NVML: over 1 s, Ampere and newer), where it keeps an average.",
    dcgm=(Twin("DCGM_FI_DEV_POWER_USAGE"),),
)
POWER_LIMIT = _device(
    "warptd_device_power_limit_watts", "gauge", "Enforced power limit of the device.", cadence=Cadence.HEALTH
)
ENERGY = _device(
    "warptd_device_energy_joules_total",
    "counter",
    "Energy used by the device: its hardware counter made monotonic across wraps and resets, else "
    "integrated power. Where the counter is read less often than the power (NVML: every "
    "--energy-interval), the energy the power drew since its last read (NVML: the 1 s average's tiles); "
    "never lower than before, and the counter's own at each read where it was behind it.",
    cadence=Cadence.ENERGY,
    dcgm=(Twin("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1000.0),),
)
ENERGY_READ = _device(
    "warptd_device_energy_read_timestamp_seconds",
    "gauge",
    "Unix time of the last read of the device's energy counter. warptd_device_energy_joules_total is the "
    "counter's own at each read, and between reads an estimate from the power (NVML: its 1 s average); "
    "the counter is read every --energy-interval, every second while a window records the device, and at "
    "each window's edges.",
    opt_in="the same for every device of a backend but around recordings: "
    "warptd_energy_read_timestamp_seconds{backend}, the oldest of them, stays",
)
TEMPERATURE = _device(
    "warptd_device_temperature_celsius",
    "gauge",
    "Device temperature by sensor.",
    "sensor",
    dcgm=(Twin("DCGM_FI_DEV_MEMORY_TEMP", labels=("memory",)), Twin("DCGM_FI_DEV_GPU_TEMP", labels=("gpu",))),
)
CLOCK = _device(
    "warptd_device_clock_hertz",
    "gauge",
    "Current clock frequency by clock domain.",
    "clock",
    dcgm=(Twin("DCGM_FI_DEV_SM_CLOCK", 1e-6, ("sm",)), Twin("DCGM_FI_DEV_MEM_CLOCK", 1e-6, ("memory",))),
)
THROTTLE_ACTIVE = _device(
    "warptd_device_throttle_active",
    "gauge",
    "1 while a clock throttle reason is active, 0 otherwise; one series per reason the device supports. "
    "Clock events that are not throttling (idle, clocks set) are in warptd_device_clock_event_active.",
    "reason",
    opt_in="a 0/1 sample per reason at scrape time, which misses throttling between "
    "scrapes: rate() of warptd_device_throttle_seconds_total over at least 4 of its steps gives the "
    "fraction of time throttled (to within one step of the counter over the window), and the shipped "
    "alerts use it",
)
THROTTLE_SECONDS = _device(
    "warptd_device_throttle_seconds_total",
    "counter",
    "Time spent throttled by reason: the hardware violation counter where one exists, else sampled time.",
    "reason",
    cadence=Cadence.HEALTH,  # NVIDIA's duration fields come in the health batch
)
CLOCK_EVENT_ACTIVE = _device(
    "warptd_device_clock_event_active",
    "gauge",
    "1 while a clock-event reason that is not throttling is active, 0 otherwise; one series per such "
    "reason the device supports: gpu_idle (clocks low because the device is idle), "
    "applications_clocks_setting and display_clock_setting (clocks set by an administrator or the display).",
    "reason",
    opt_in="clock events that are not throttling (idle, clocks set by an administrator or the display)",
)
DOMAIN_POWER = MetricSpec(
    "warptd_power_watts",
    "gauge",
    "Power of a power domain (RAPL package/core/uncore/dram/psys, GPU boards). Domains nest: "
    "psys > package > core/uncore. RAPL core is all cores of a package; AMD's core counter is one "
    "core's and is not exported.",
    DOMAIN_LABELS,
)
DOMAIN_ENERGY = MetricSpec(
    "warptd_energy_joules_total",
    "counter",
    "Energy of a power domain, monotonic across counter wraps and resets. RAPL core is all cores "
    "of a package; AMD's core counter is one core's and is not exported.",
    DOMAIN_LABELS,
)
DOMAIN_UP = MetricSpec(
    "warptd_power_domain_up",
    "gauge",
    "1 if the domain's counter was readable at the last sample, 0 if not (e.g. RAPL energy_uj is root-only).",
    DOMAIN_LABELS,
)
BACKEND_UP = MetricSpec(
    "warptd_backend_up",
    "gauge",
    "1 if the backend's last sample completed within the timeout and is recent; 0 means stale, "
    "and its series are dropped.",
    ("backend", "kind"),
)
SAMPLE_DURATION = MetricSpec(
    "warptd_sample_duration_seconds",
    "gauge",
    "Duration of the backend's last completed sample.",
    ("backend",),
)
SAMPLES = MetricSpec("warptd_samples_total", "counter", "Completed samples of the backend.", ("backend",))
SAMPLE_ERRORS = MetricSpec(
    "warptd_sample_errors_total",
    "counter",
    "Failed reads by kind: device_lost, permission, invalid_value (rejected garbage), sdk_error, "
    "timeout (sample over --sample-timeout), hung (a previous read has not returned), unexpected. "
    "device names the device whose read hangs (timeout once, then hung per sample while it is held "
    "apart and reads warptd_device_up 0); empty for the backend's own errors.",
    ("backend", "kind", "device"),
)
ENERGY_DROPPED = MetricSpec(
    "warptd_energy_dropped_joules_total",
    "counter",
    "Energy a reset or restored (--state-dir) counter claimed beyond the device's power limit, or "
    "5000 W without one, times the time since its last reading, or, for a counter that restarted "
    "while the daemon was down, beyond the power measured around that gap: left out of the energy totals.",
    ("backend",),
)
ENERGY_OVERCOUNT = MetricSpec(
    "warptd_energy_restart_overcount_joules_total",
    "counter",
    "Energy added to totals at a restart after their counter restarted while the daemon was down (a "
    "driver reload, a reboot), so that none is below what the run before may have exported after its "
    "last save (--state-dir): at most each device's power limit times the 10 s save interval.",
    ("backend",),
)
STATE_SAVE_ERRORS = MetricSpec(
    "warptd_state_save_errors_total",
    "counter",
    "Saves of --state-dir/counters.json that failed. Until the next one succeeds, a restart after a "
    "driver reload may find an energy total below what was exported.",
    (),
)
ENERGY_READ_OLDEST = MetricSpec(
    "warptd_energy_read_timestamp_seconds",
    "gauge",
    "Unix time of the oldest of the backend's devices' last reads of their energy counters: between two "
    "reads each device's warptd_device_energy_joules_total is an estimate from its power "
    "(warptd_device_energy_read_timestamp_seconds, opt-in, gives each device's).",
    ("backend",),
)
READ_CPU = MetricSpec(
    "warptd_backend_read_cpu_seconds_total",
    "counter",
    "CPU time the backend's reads of one kind took, in the thread that read (a driver's time in a call "
    "is CPU spent there): what the SDK charges on this node. Kinds per backend: docs/hardware.md.",
    ("backend", "read"),
)
READS = MetricSpec(
    "warptd_backend_reads_total",
    "counter",
    "Reads of one kind the backend made (see warptd_backend_read_cpu_seconds_total).",
    ("backend", "read"),
)
LAST_SAMPLE = MetricSpec(
    "warptd_last_sample_timestamp_seconds",
    "gauge",
    "Unix time of the backend's last completed sample.",
    ("backend",),
)
STRESS_LABELS = ("backend", "device", "test")
STRESS_RUNNING = MetricSpec(
    "warptd_stress_running",
    "gauge",
    "1 while a stress job is starting or running on the device, else 0; only for tests the device runs.",
    STRESS_LABELS,
    cadence=Cadence.EVENT,
    opt_in="0 for every device and stress test nearly always (2 per GPU where torch "
    "is installed): warptd_stress_runs_total and the last run's warptd_stress_last_* stay, and "
    "GET /stress lists the running jobs",
)
STRESS_RUNS = MetricSpec(
    "warptd_stress_runs_total",
    "counter",
    "Finished stress jobs by test and final status.",
    ("test", "status"),
    cadence=Cadence.EVENT,
)
STRESS_LAST_FLOPS = MetricSpec(
    "warptd_stress_last_flop_per_second",
    "gauge",
    "Throughput of the last successful compute stress run.",
    STRESS_LABELS,
    cadence=Cadence.EVENT,
)
STRESS_LAST_BYTES = MetricSpec(
    "warptd_stress_last_bytes_per_second",
    "gauge",
    "Throughput of the last successful memory stress run.",
    STRESS_LABELS,
    cadence=Cadence.EVENT,
)
STRESS_LAST_ENERGY = MetricSpec(
    "warptd_stress_last_energy_joules",
    "gauge",
    "Energy the device used during the last successful stress run.",
    STRESS_LABELS,
    cadence=Cadence.EVENT,
)
STRESS_LAST_END = MetricSpec(
    "warptd_stress_last_end_timestamp_seconds",
    "gauge",
    "Unix time the last successful stress run ended.",
    STRESS_LABELS,
    cadence=Cadence.EVENT,
)
WINDOWS_OPEN = MetricSpec(
    "warptd_windows_open", "gauge", "Energy windows open now.", (), cadence=Cadence.EVENT
)
WINDOW_ENERGY = MetricSpec(
    "warptd_window_energy_joules_total",
    "counter",
    "Energy of the ended windows of this name (devices plus CPU packages), for the names "
    "--window-energy-name allows (bounded cardinality).",
    ("name",),
    cadence=Cadence.EVENT,
)
WINDOW_ENERGY_HISTOGRAM = MetricSpec(
    "warptd_window_energy_joules",
    "histogram",
    "Energy of each ended window (devices plus CPU packages), whatever its name.",
    (),
    buckets=(1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7),
    cadence=Cadence.EVENT,
)
POD_LABELS = ("namespace", "pod", "container")
DEVICE_ALLOCATION = _device(
    "warptd_device_allocation_info",
    "gauge",
    "The kubelet allocated the device to this container (PodResources API); always 1.",
    *POD_LABELS,
    cadence=Cadence.PODS,
)
POD_ENERGY = MetricSpec(
    "warptd_pod_energy_joules_total",
    "counter",
    "Energy of the devices allocated to the container, accumulated while allocated; a device shared "
    "by several containers is split by their SM use where the GPU tells it per process (--processes), "
    "else evenly (see warptd_pod_energy_split_joules_total); the SM use of processes outside any pod "
    "goes to warptd_pod_energy_unattributed_joules_total.",
    (*POD_LABELS, "backend"),
)
PODRESOURCES_UP = MetricSpec(
    "warptd_podresources_up",
    "gauge",
    "1 if the last kubelet PodResources List call succeeded; 0 while the last good mapping is kept.",
    (),
    cadence=Cadence.PODS,
)
PODRESOURCES_ERRORS = MetricSpec(
    "warptd_podresources_errors_total",
    "counter",
    "Failed kubelet PodResources List calls by kind: unavailable (socket absent or refused), "
    "permission (the socket is root-only), timeout, error.",
    ("kind",),
    cadence=Cadence.PODS,
)
PODRESOURCES_LAST_SUCCESS = MetricSpec(
    "warptd_podresources_last_success_timestamp_seconds",
    "gauge",
    "Unix time of the last successful kubelet PodResources List call.",
    (),
    cadence=Cadence.PODS,
)
PROCESS_UTILIZATION = _device(
    "warptd_device_process_utilization_ratio",
    "gauge",
    "A running process's share of the device over the last sample period (--processes), by engine: "
    "sm, memory, encoder, decoder (NVML process utilization).",
    "pid",
    "pod_uid",
    "container_id",
    "engine",
)
POD_ENERGY_SPLIT = _device(
    "warptd_pod_energy_split_joules_total",
    "counter",
    "Energy of a device shared by several containers (or by one and processes outside any pod), by how "
    "it was split between them: sm_share (their processes' SM use), even (the GPU could not tell), "
    "mig_sm_activity or mig_slice_size (a MIG GPU, by its held slices' GPM SM activity, else their "
    "size).",
    "method",
)
POD_ENERGY_UNATTRIBUTED = _device(
    "warptd_pod_energy_unattributed_joules_total",
    "counter",
    "Energy of a device allocated to containers that went to none of them: the share of its SM use by "
    "processes outside any pod (--processes). With the containers' warptd_pod_energy_joules_total it "
    "sums to the device's energy while allocated.",
)
PROCESS_MEMORY = _device(
    "warptd_device_process_memory_bytes",
    "gauge",
    "Device memory used by a running compute process (--processes), with the pod UID and container ID "
    "its cgroup names (empty outside Kubernetes).",
    "pid",
    "pod_uid",
    "container_id",
)
XID_ERRORS = _device(
    "warptd_device_xid_errors_total",
    "counter",
    "NVIDIA XID errors reported by NVML events, by XID code.",
    "xid",
    cadence=Cadence.EVENT,
    dcgm=(Twin("DCGM_FI_DEV_XID_ERRORS"),),
)
LAST_XID = _device(
    "warptd_device_last_xid_timestamp_seconds",
    "gauge",
    "Unix time of the device's last XID error event.",
    cadence=Cadence.EVENT,
)
WORKLOAD_ENERGY = MetricSpec(
    "warptd_workload_energy_joules_total",
    "counter",
    "Energy of a workload (--workloads): kind slurm_job, systemd_unit, container or user, found from "
    "the processes on each device and their cgroups; source accelerator (its share of each device's "
    "energy by its processes' SM use, else device memory held, else evenly) or cpu (its share of the "
    "CPU packages' RAPL energy by its cgroup's CPU time). Kept for --workload-retention after the "
    "workload ends, then absent.",
    ("kind", "workload", "user", "source"),
)
WORKLOAD_ENERGY_UNATTRIBUTED = MetricSpec(
    "warptd_workload_energy_unattributed_joules_total",
    "counter",
    "Energy of the devices with process lists (source accelerator) or of the CPU packages (source cpu) "
    "that went to no known workload (--workloads): idle time, processes whose cgroup could not be "
    "read, workloads over --workload-max. With warptd_workload_energy_joules_total it sums to the "
    "energy counted since the daemon started.",
    ("source",),
)
WORKLOADS_DROPPED = MetricSpec(
    "warptd_workloads_dropped_total",
    "counter",
    "Workloads given no series because --workload-max were tracked; their energy is unattributed.",
    (),
)
WORKLOAD_UNREADABLE_PROCESSES = MetricSpec(
    "warptd_workload_unreadable_processes",
    "gauge",
    "Processes whose open files could not be read when last looked at (--workloads on TPU, "
    "Tenstorrent, Gaudi or sysfs DRM GPUs, whose users are found from /proc/PID/fd): another user's "
    "fd directory is refused without CAP_SYS_PTRACE. They count as holding no device, so a device "
    "they use is split between the others or unattributed.",
    (),
)
BUILD_INFO = MetricSpec(
    "warptd_build_info", "gauge", "warptd build information; always 1.", ("version", "python_version")
)

ALL: tuple[MetricSpec, ...] = (
    DEVICE_INFO,
    MIG_INFO,
    DEVICE_UP,
    MEMORY_TOTAL,
    MEMORY_USED,
    MEMORY_FREE,
    MEMORY_RESERVED,
    UTILIZATION,
    MEMORY_UTILIZATION,
    POWER,
    POWER_AVERAGE,
    POWER_LIMIT,
    ENERGY,
    ENERGY_READ,
    TEMPERATURE,
    CLOCK,
    THROTTLE_ACTIVE,
    THROTTLE_SECONDS,
    CLOCK_EVENT_ACTIVE,
    *nvidia.FAMILIES,
    DOMAIN_POWER,
    DOMAIN_ENERGY,
    DOMAIN_UP,
    BACKEND_UP,
    SAMPLE_DURATION,
    SAMPLES,
    SAMPLE_ERRORS,
    ENERGY_DROPPED,
    ENERGY_OVERCOUNT,
    ENERGY_READ_OLDEST,
    STATE_SAVE_ERRORS,
    READ_CPU,
    READS,
    LAST_SAMPLE,
    BUILD_INFO,
)
STRESS: tuple[MetricSpec, ...] = (
    STRESS_RUNNING,
    STRESS_RUNS,
    STRESS_LAST_FLOPS,
    STRESS_LAST_BYTES,
    STRESS_LAST_ENERGY,
    STRESS_LAST_END,
)
KUBERNETES: tuple[MetricSpec, ...] = (
    DEVICE_ALLOCATION,
    POD_ENERGY,
    PODRESOURCES_UP,
    PODRESOURCES_ERRORS,
    PODRESOURCES_LAST_SUCCESS,
    PROCESS_MEMORY,
    PROCESS_UTILIZATION,
    POD_ENERGY_SPLIT,
    POD_ENERGY_UNATTRIBUTED,
)
EVENTS: tuple[MetricSpec, ...] = (XID_ERRORS, LAST_XID)
WINDOWS: tuple[MetricSpec, ...] = (WINDOWS_OPEN, WINDOW_ENERGY, WINDOW_ENERGY_HISTOGRAM)
WORKLOADS: tuple[MetricSpec, ...] = (
    WORKLOAD_ENERGY,
    WORKLOAD_ENERGY_UNATTRIBUTED,
    WORKLOADS_DROPPED,
    WORKLOAD_UNREADABLE_PROCESSES,
)
#: Every metric, in the order docs/metrics.md lists them.
EVERY: tuple[MetricSpec, ...] = (*ALL, *STRESS, *KUBERNETES, *EVENTS, *WINDOWS, *WORKLOADS)
#: Every metric by its exposed name: backends name their further gauges and counters this way.
BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in EVERY}
#: The per-device families that are another's series summed over a label: a GPU's NVLink totals.
SUMS = nvidia.SUMS
