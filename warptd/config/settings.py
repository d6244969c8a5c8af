"""Every setting of the daemon, each one field: its type and bounds, its docstring (its line in
docs/configuration.md) and its :class:`~warptd.config.knob.Knob` (its flag, and whether a reload applies
it). The flags (arguments.py), the ``WARPTD_*`` variables, the config file's keys and the docs' table are
made from these fields; the fields are grouped as ``--help`` groups their flags."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from warptd import files
from warptd.config.knob import LOADING, METRICS, RECORDING, SAMPLING, SERVING, Option, setting
from warptd.config.sources import TomlFile, config_file
from warptd.config.values import (
    SLURM_ROOTS,
    WORKLOAD_KINDS,
    BackendNames,
    CgroupRoots,
    Globs,
    HostPort,
    Release,
    Size,
    WindowNames,
    WorkloadKinds,
)
from warptd.metrics import dcgm
from warptd.metrics.selection import MetricSelection, select

#: The most a token file may hold: its first line is the token.
MAX_TOKEN_FILE_BYTES = 64 * 1024
#: Not taken by node_exporter (9100), dcgm-exporter (9400) or nvidia_gpu_exporter (9835).
DEFAULT_PORT = 9465


class SettingsError(ValueError):
    """A setting failed validation; ``str()`` is one line naming the setting."""


class Part(BaseModel):
    """Settings whose flags ``--help`` shows under one title (``group``); each field's docstring is its
    description."""

    model_config = ConfigDict(use_attribute_docstrings=True)
    group: ClassVar[str]


class ServingSettings(Part):
    """Where and how the daemon serves: its address, TLS and auth, what one client may hold, its state."""

    group = SERVING

    listen: HostPort = setting(f":{DEFAULT_PORT}", "address to serve on", "HOST:PORT")
    """`HOST:PORT`; empty host = every IPv4 and IPv6 address"""
    web_config_file: Path | None = setting(None, "TLS/basic auth config (exporter-toolkit format)", "FILE")
    """TLS, mutual TLS and bcrypt basic auth for every endpoint, in the exporter-toolkit format
    ([security.md](security.md)); needs the `web` extra"""
    http_header_timeout: float = setting(10.0, "request head or TLS handshake", "SECONDS", gt=0, le=3600)
    """seconds from a new connection (or a request's first byte) to its complete head; TLS handshakes too"""
    http_body_timeout: float = setting(10.0, "for a request body", "SECONDS", gt=0, le=3600)
    """seconds to receive a request body (then 408), and again to send a response"""
    http_idle_timeout: float = setting(120.0, "a keep-alive connection may idle", "SECONDS", gt=0, le=86400)
    """seconds a keep-alive connection may wait for its next request"""
    http_max_connections: int = setting(4096, "open connections", "N", ge=1, le=1_000_000)
    """open connections; at the cap a new connection closes the one doing least (the longest-idle
    keep-alive one, else the one waiting longest for its request head, then body, then for the client to
    take a response); 503 only while every open connection has a request being handled, which the bound on
    waiting requests (`--http-max-requests`) rules out above 6 × that setting + 1"""  # noqa: RUF001
    http_max_client_connections: int = setting(256, "open connections per client", "N", ge=1, le=1_000_000)
    """open connections of one client address (an IPv6 client's /64); at the cap its own connection doing
    least is closed for its new one, so one host never holds more than this many slots"""
    http_max_requests: int = setting(40, "requests handled in the pool at once", "N", ge=1, le=10_000)
    """requests in the worker pool at once (stress, reports, window edges; and apart from them, under
    basic auth, as many of `/metrics` and the probes), like node_exporter's `--web.max-requests`; routes
    that build their answer in Python (listings, recordings) run one at a time beside them; up to 4 times
    as many others wait up to the header timeout, then 503; any more get 503 at once"""
    http_backlog: int = setting(1024, "listen backlog", "N", ge=128, le=65535)
    """listen backlog (at least 128; the kernel caps it at `net.core.somaxconn`)"""
    http_max_header_bytes: int = setting(
        16 * 1024, "request line and headers", "BYTES", ge=1024, le=1024 * 1024
    )
    """request line plus headers; beyond it 431"""
    http_max_response_bytes: Size = setting(
        16 * 2**20,
        "responses not yet taken by their clients, all together",
        "SIZE",
        ge=64 * 2**10,
        le=64 * 2**30,
    )
    """bytes that responses written but not yet taken by their clients may hold, all connections together
    (`512KiB`, `64MiB` or bytes; at least 64 KiB); a connection whose response is not taken is served no
    further (its next request stays unread) until it is, or until the body timeout closes it; while they
    hold this much, requests other than `/metrics` and the probes wait (up to the header timeout), then
    503 ([security.md](security.md#limits-that-protect-the-daemon))"""
    state_dir: Path | None = setting(None, "keep energy totals here across restarts", "DIR")
    """keep energy totals across daemon restarts (`counters.json` with the boot id from `--procfs`,
    written atomically at the first reading, every 10 s and at stop, each total with the most it may reach
    before the next save: no total goes back across SIGKILL, restart and driver reload
    ([hardware](hardware.md#nvidia-a-driver-reload-while-warptd-was-down)); restarted on the same boot, a
    RAPL counter found lower than saved has wrapped; what a restored counter adds is at most the power
    limit times the time since its saved reading, and for one that restarted meanwhile (a reboot, a driver
    reload) at most the power measured on both sides of the gap times it, the rest counted in
    `warptd_energy_dropped_joules_total`; an entry that cannot be (`NaN`, negative, more than 5000 W could
    have counted) is refused with a warning: [telemetry.md](telemetry.md))"""
    node: str = setting(default_factory=socket.gethostname, default_text="hostname")
    """`node` label of `warptd_device_info`"""

    @property
    def listen_address(self) -> tuple[str, int]:
        """``listen`` split into (host, port); an empty host means every interface."""
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


class EndpointSettings(Part):
    """The endpoints that start work: stress jobs and energy windows."""

    group = SERVING

    stress: bool = setting(True, "turn /stress off")
    """serve the `/stress` endpoints"""
    stress_token: SecretStr | None = setting(
        None, "bearer token for POST/DELETE /stress (visible in ps: prefer the file)", "TOKEN", live=True
    )
    """bearer token for `POST`/`DELETE /stress` (prefer the file: a flag shows in `ps`)"""
    stress_token_file: Path | None = setting(None, "file holding the stress token", "FILE", live=True)
    """a file whose first line is that token (which `ps` does not show then)"""
    stress_max_duration: float = setting(3600.0, ge=1, le=7 * 86400, live=True)
    """longest stress run, seconds"""
    stress_history: int = setting(50, ge=1, le=10_000, live=True)
    """finished jobs kept for `GET /stress`"""
    windows: bool = setting(True, "turn /windows off")
    """serve the `/windows` endpoints ([recordings.md](recordings.md)); they take the stress token"""
    window_max_duration: float = setting(
        86400.0, "an open window ends by itself", "SECONDS", ge=1, le=30 * 86400, live=True
    )
    """seconds after which an open window ends by itself (`end_reason: max_duration`), leased or not; the
    only end of a window opened without a lease that nobody ends"""
    window_lease_min: float = setting(
        5.0, "shortest lease a window may ask for", "SECONDS", gt=0, le=3600, live=True
    )
    """shortest lease (`lease_s`) a window may be opened with; a window whose client does not renew its
    lease in time ends `lease_expired` ([recordings.md](recordings.md))"""
    window_lease_max: float = setting(
        600.0, "longest lease a window may ask for", "SECONDS", gt=0, le=86400, live=True
    )
    """longest lease a window may be opened with (at most 86400; not below `--window-lease-min`)"""
    window_max_open: int = setting(64, "windows open at once", "N", ge=1, le=10_000, live=True)
    """windows open at once; the next `POST /windows` gets 429"""
    window_history: int = setting(100, "ended windows kept", "N", ge=1, le=10_000, live=True)
    """ended windows kept for `GET /windows`"""
    window_memory: Size = setting(
        8 * 2**20, "bytes the windows' time series may take", "SIZE", ge=64 * 2**10, le=64 * 2**30, live=True
    )
    """bytes the time series of open and ended windows may take (`512KiB`, `64MiB`, `1GiB` or bytes; 64
    KiB to 64 GiB): ended windows' points go first, then the largest open window keeps every other point;
    a `POST /windows` whose 64 points a device would not fit gets 429
    ([recordings.md](recordings.md#memory))"""
    window_energy_names: WindowNames = setting(
        None,
        "export this window name's energy as a labelled counter (repeatable)",
        "NAME",
        flag="--window-energy-name",
        repeatable=True,
        example="epoch,eval",
    )
    """window names whose energy goes to `warptd_window_energy_joules_total{name}`; every window goes to
    the histogram"""

    @model_validator(mode="after")
    def _check_lease_bounds(self) -> EndpointSettings:
        if self.window_lease_min > self.window_lease_max:
            raise ValueError(
                f"window_lease_min ({self.window_lease_min:g}) is above window_lease_max "
                f"({self.window_lease_max:g})"
            )
        return self

    def stress_token_value(self) -> str | None:
        """The configured token, from ``stress_token`` or the first line of ``stress_token_file``.

        An empty token is an error, never "no token": that would silently fall back to open loopback.
        """
        if self.stress_token is not None:
            token = self.stress_token.get_secret_value().strip()
            if not token:
                raise SettingsError("invalid setting stress_token: empty")
            return token
        if self.stress_token_file is not None:
            try:
                lines = files.read_text(self.stress_token_file, MAX_TOKEN_FILE_BYTES).splitlines()
            except OSError as exc:
                raise SettingsError(f"invalid setting stress_token_file: {exc.strerror or exc}") from None
            token = lines[0].strip() if lines else ""
            if not token:
                raise SettingsError(f"invalid setting stress_token_file: {self.stress_token_file} is empty")
            return token
        return None


class AttributionSettings(Part):
    """Who uses each device: pods, processes, workloads; and the XID events of NVIDIA GPUs."""

    group = SERVING

    kubelet_socket: Path = setting(
        Path("/var/lib/kubelet/pod-resources/kubelet.sock"), "kubelet PodResources socket", "PATH"
    )
    """kubelet PodResources API; attribution is off while it is absent (a debug line at the default path,
    an info line at one you set)"""
    pod_attribution: bool = setting(True, "do not map devices to pods")
    """map devices to pods"""
    pod_resources_interval: float = setting(10.0, ge=1, le=3600)
    """seconds between two PodResources `List` calls"""
    pod_labels: bool = setting(False, "add namespace/pod/container labels to device series")
    """add `namespace`, `pod`, `container` to every device series"""
    processes: bool = setting(False, "export per-process memory (NVIDIA)")
    """per-process device memory and utilization of NVIDIA compute processes
    ([telemetry.md](telemetry.md#nvidia-xid-errors-and-processes)); with pod attribution, shared GPUs
    split pod energy by SM use ([kubernetes.md](kubernetes.md#shared-gpus-energy-split-by-sm-use))"""
    process_utilization_interval: float = setting(
        1.0,
        "between two reads of a GPU's per-process utilization, 1 to 10",
        "SECONDS",
        ge=1.0,
        le=10.0,
        live=True,
    )
    """seconds between two reads of a GPU's per-process utilization (`--processes`, `--workloads`) while
    its processes stay the same, 1 to 10 (NVML's read costs 2.1 ms of CPU on an H200). A read returns
    every sample the driver took since the last (it keeps its last 100 sampling windows, 72 in older
    drivers, of 1/6 s and more), so a longer interval loses no sample: each process's share is then its
    mean over the longer span, and the split of shared GPUs' energy follows a changing mix that much
    later. A GPU that lists no process is not read; one where a process appears is read at once and again
    a second later, whatever this says ([telemetry.md](telemetry.md#nvidia-xid-errors-and-processes))"""
    workloads: bool = setting(False, "split energy between Slurm jobs, systemd units, containers and users")
    """split each accelerator's energy (NVIDIA and AMD from their process lists; TPU, Tenstorrent, Gaudi
    and DRM GPUs from `/proc/PID/fd`) between the Slurm jobs, systemd units, containers and users whose
    processes run on it, and the CPU packages' RAPL energy by their cgroups' CPU time:
    `warptd_workload_energy_joules_total`, `GET /workloads`, `warptd workload KIND ID`
    ([workloads.md](workloads.md)); off by default because it reads every device process's `/proc` entries
    and the cgroup tree (host pid namespace and cgroupfs needed) and its labels name users and jobs"""
    workload_retention: float = setting(
        600.0, "an ended workload's series stays", "SECONDS", ge=0, le=7 * 86400
    )
    """seconds an ended workload's series, `GET /workloads` entry and recording stay (so Prometheus
    scrapes its final total and an epilog can save its report), then go"""
    workload_kinds: WorkloadKinds = setting(
        list(WORKLOAD_KINDS),
        "workload kinds tracked, comma-separated",
        "KINDS",
        min_length=1,
        example="slurm_job,user",
        default_text="all four",
    )
    """kinds tracked: `slurm_job`, `systemd_unit`, `container`, `user`; a process of another kind counts
    for its user where `user` is tracked, else is unattributed"""
    workload_slurm_roots: CgroupRoots = setting(
        list(SLURM_ROOTS),
        "comma-separated cgroup paths where slurmd puts jobs",
        "PATHS",
        min_length=1,
        max_length=16,
        example="/system.slice/slurmstepd.scope,/slurm",
    )
    """cgroup paths where slurmd puts jobs (`job_J` or `uid_U/job_J` right under one); a `job_J` anywhere
    else is not a Slurm job. `*` matches within one element; at most 16
    ([workloads.md](workloads.md#who-runs-where))"""
    workload_max: int = setting(1000, "workloads tracked", "N", ge=1, le=100_000)
    """workloads tracked at once, live and retained (each is at most two series); a new one beyond it gets
    no series, its energy goes to `warptd_workload_energy_unattributed_joules_total` and it is counted
    once in `warptd_workloads_dropped_total`"""
    workload_recording_memory: Size = setting(
        32 * 2**20, "bytes the workloads' recordings may take (0: none)", "SIZE", ge=0, le=64 * 2**30
    )
    """bytes every workload's recording (`GET /workloads/KIND/ID/recording`, `warptd workload KIND ID
    --report`) may take together (`512KiB`, `64MiB` or bytes; `0`: none kept, the endpoint answers 404):
    ended workloads' points go first, oldest first, then the running workload holding the most keeps every
    other point; each keeps at most 2048 points, about 364 KiB on 8 GPUs
    ([workloads.md](workloads.md#the-jobs-report))"""
    xid_events: bool = setting(True, "ignore XID events")
    """count NVIDIA XID errors from NVML events"""


class SelectionSettings(Part):
    """Which series are exported, and read."""

    group = METRICS

    compat: Literal["dcgm-exporter"] | None = setting(
        None,
        "also serve another exporter's series from the same samples: dcgm-exporter's default "
        "counters, names, units and labels",
        example="dcgm-exporter",
        default_text="off",
    )
    """also serve dcgm-exporter's default series (its names, units and labels) from the same samples, so
    its dashboards, alerts and autoscalers work unchanged
    ([migrating-from-dcgm-exporter.md](migrating-from-dcgm-exporter.md))"""
    dcgm_exporter_release: Release = setting(
        dcgm.LATEST,
        "the dcgm-exporter release --compat replaces, as its images are tagged: its labels "
        "(4.5.3-4.8.2 and earlier name the node Hostname, later ones hostname)",
        "RELEASE",
        example="4.5.3-4.8.2",
    )
    """the dcgm-exporter release `--compat` replaces, as its images are tagged (or the exporter's own
    version): its labels. `latest` names the node `hostname`; 4.5.3-4.8.2 and earlier name it `Hostname`
    ([migrating-from-dcgm-exporter.md](migrating-from-dcgm-exporter.md#labels))"""
    metrics_exclude: Globs = setting(
        [],
        "leave out the metric families this glob matches (repeatable; names as docs/metrics.md lists them)",
        "GLOB",
        max_length=200,
        repeatable=True,
        example="warptd_device_pcie_*,warptd_device_fan_speed_ratio",
    )
    """metric families not to export, by globs over their names as [metrics.md](metrics.md) lists them (a
    counter's with `_total`; `*`, `?`, `[seq]`, `[!seq]`, case-sensitive); added to the default's
    exclusions. Where a read serves only excluded families, it is not made either
    ([which](metrics.md#families-you-choose)). A glob that is malformed or matches no family stops the
    start (one line, exit 2)"""
    metrics_include: Globs = setting(
        [],
        "export the families this glob matches, whatever the exclusions say (repeatable; names "
        "as docs/metrics.md lists them)",
        "GLOB",
        max_length=200,
        repeatable=True,
        example="warptd_device_engine_*",
    )
    """families to export whatever the exclusions say: one the default leaves out (`--metrics-include
    warptd_device_engine_active_ratio`), or the few to keep from a broad exclusion; `--metrics-include
    '*'` exports every family"""

    @property
    def metric_selection(self) -> MetricSelection:
        """The families exported and read (``metrics_exclude``/``_include`` over the default's)."""
        return select(tuple(self.metrics_exclude), tuple(self.metrics_include), self.compat is not None)


class SamplingSettings(Part):
    """How often each value is read."""

    group = SAMPLING

    interval: float = setting(1.0, "between two samples", "SECONDS", gt=0, le=3600, live=True)
    """seconds between two samples of a backend; a backend that must be read more often runs at its own
    maximum instead (RAPL: a quarter of its shortest wrap period at 1 kW, 16 s on AMD, 65 s on Intel)"""
    sample_timeout: float = setting(2.0, "a sample may take", "SECONDS", gt=0, le=600, live=True)
    """seconds before a sample is given up and the backend marked stale"""
    health_interval: float = setting(
        30.0,
        "between two reads of health counters and other slow values",
        "SECONDS",
        gt=0,
        le=3600,
        live=True,
    )
    """seconds between two reads of a device's slow-changing values when `--interval` is shorter: NVIDIA's
    health and link field batch (ECC, row remapping, retired pages, PCIe replays and bytes, NVLink errors
    and bytes, recovery action, throttle times), enforced power limit, fans, encoder and decoder
    utilization (5.3 ms of CPU a read on an H200, the energy counter with it); the samples in between
    report their last values (like DCGM's per-field update interval; dcgm-exporter collects every 30 s),
    and throttle seconds run on between two reads by the time each reason was seen active. At `--interval`
    ≥ this, every sample reads them"""
    energy_interval: float = setting(
        30.0,
        "between two reads of a device's energy counter, at least 1",
        "SECONDS",
        ge=1.0,
        le=3600,
        live=True,
    )
    """seconds between two reads of a device's energy counter when `--interval` is shorter, at least 1
    (NVML's counter costs 2.9 ms of CPU a read on an H200 and changes every 100 ms). Between two reads the
    total advances by the energy the power drew: the driver's 1 s average tiles the time (a load changing
    faster than the sampler is counted), with its lag behind the counter learnt from the instant power; at
    the counter's next read a total behind it steps up to it, one ahead of it runs on at half the
    estimate's rate until they meet: the total never goes down.
    `warptd_device_energy_read_timestamp_seconds` says when the counter was last read. Every health read
    (`--health-interval`) reads the counter too, so a value above it changes nothing. Windows, profiles,
    stress jobs and workload recordings read the counter at their edges and every
    `--window-energy-interval` between
    ([hardware](hardware.md#nvidia-the-energy-total-between-two-reads-of-the-counter))"""

    @property
    def stale_after(self) -> float:
        """Seconds after its last good sample that a backend counts as stale and loses its series: a
        device whose read hangs holds the others up to the timeout, then they are read at once, so a
        backend is stale once no sample completed an interval past that."""
        return max(3 * self.interval, 2 * self.interval + self.sample_timeout)


class RecordingSettings(Part):
    """How recordings sample, and what they say of energy."""

    group = RECORDING

    window_interval: float = setting(
        0.1, "between two samples of a measured device", "SECONDS", gt=0, le=3600, live=True
    )
    """seconds between two samples of a device inside an open window or stress run (other devices stay at
    `--interval`); also `warptd profile`'s default `--interval`"""
    window_energy_interval: float = setting(
        1.0, "between two reads of a measured device's energy counter", "SECONDS", ge=0.1, le=3600
    )
    """seconds between two reads of the energy counter of a device that a window, profile, stress job or
    workload recording samples, counted from its edge (at least 0.1): each such span of a recording is the
    counter's own delta (0.29 % of a core per GPU recorded at 1 s on an H200)"""
    carbon_intensity: float | None = setting(
        None, "gCO2e per kWh, for recordings' carbon", "G_PER_KWH", ge=0, le=10_000, live=True
    )
    """gCO2e per kWh: recordings also give grams CO2e (nothing is looked up online)"""
    energy_price: float | None = setting(
        None, "price per kWh, for recordings' cost", "PRICE", ge=0, le=1e6, live=True
    )
    """price per kWh, in your currency: recordings also give a cost"""


class LoadingSettings(Part):
    """Which backends load and where they look, and the logs."""

    group = LOADING

    config: Path | None = setting(None, "TOML config file (env WARPTD_CONFIG)", "FILE")
    """a TOML file of any of these settings by name (`interval = 1.0`), below the variables and flags"""
    backends: BackendNames = setting(
        None,
        "load only this backend (repeatable; env WARPTD_BACKENDS=nvidia,cpu); default all",
        "NAME",
        flag="--backend",
        repeatable=True,
        example="nvidia,cpu",
        default_text="all",
    )
    """load only these; naming an accelerator backend also loads its power backend (`nvidia` → `nvml`,
    `cpu` → `rapl`); MIG devices are the `nvidia_mig` backend, named on its own (`nvidia,nvidia_mig`). A
    named backend that cannot load stops the start (exit 2, one line with the reason); by default, and for
    the power backend it brings, one that cannot load is skipped with a log line"""
    sysfs: Path = setting(Path("/sys"), "sysfs root", "DIR")
    """sysfs root, like node_exporter's `--path.sysfs`"""
    procfs: Path = setting(Path("/proc"), "procfs root", "DIR")
    """procfs root, like node_exporter's `--path.procfs`: the boot id for `--state-dir`, the CPU vendor
    for RAPL's wrap period, each process's cgroup for `--processes`"""
    cgroupfs: Path = setting(Path("/sys/fs/cgroup"), "cgroup root", "DIR")
    """cgroup root for `--workloads`' CPU time: the cgroup v2 mount (`cpu.stat`), or the directory holding
    the v1 hierarchies (`cpu,cpuacct/…/cpuacct.usage`); in a container, mount the host's"""
    tpu_runtime_address: str | None = setting(
        None,
        "libtpu metrics (unset: tpu-info's own, localhost:8431)",
        "HOST:PORT",
        default_text="`localhost:8431`",
    )
    """libtpu runtime metrics service"""
    log_level: Literal["debug", "info", "warning", "error"] = setting("info", "what to log", live=True)
    """`debug` also says why each backend nobody named did not load; `list`, `sample` and `stress` log at
    `warning` unless one is set"""
    log_format: Literal["auto", "json", "console"] = setting(
        "auto", "auto: console on a TTY, else JSON", live=True
    )
    """JSON lines, or console output on a TTY"""


#: The parts, in the order of ``warptd --help`` and the docs' table.
PARTS: tuple[type[Part], ...] = (
    ServingSettings,
    EndpointSettings,
    AttributionSettings,
    SelectionSettings,
    SamplingSettings,
    RecordingSettings,
    LoadingSettings,
)


class Settings(BaseSettings, *PARTS):
    """Every knob of the daemon. Precedence: flags > environment > config file > defaults."""

    model_config = SettingsConfigDict(
        env_prefix="WARPTD_", extra="forbid", validate_default=True, validate_assignment=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        given = config_file(init_settings)
        if given is not None:
            sources.append(TomlFile(settings_cls, toml_file=given))
        return tuple(sources)


def options() -> list[Option]:
    """Every setting as its users give it, part after part."""
    return [Option(name, field, part.group) for part in PARTS for name, field in part.model_fields.items()]


#: The settings backends read while sampling, so a reload hands these to them (the rest of theirs,
#: paths and the like, stays as the process was started with: those need a restart).
BACKEND_LIVE_SETTINGS = ("interval", "health_interval", "energy_interval", "sample_timeout")
#: What a reload (SIGHUP) applies to the running daemon (the knobs marked ``live``); a change to any
#: other setting is logged as needing a restart.
RELOADABLE = frozenset(option.name for option in options() if option.knob.live)


def with_live_settings(current: Settings, reloaded: Settings) -> Settings:
    """``current`` with the :data:`BACKEND_LIVE_SETTINGS` of ``reloaded``."""
    return current.model_copy(update={name: getattr(reloaded, name) for name in BACKEND_LIVE_SETTINGS})
