"""One settings model fed by CLI flags, ``WARPTD_*`` environment variables and an optional TOML file."""

from __future__ import annotations

import os
import re
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from warptd import files
from warptd.metrics import dcgm
from warptd.metrics.selection import MetricSelection, check_glob, select

#: A window name: also a label value of warptd_window_energy_joules_total.
WINDOW_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
#: What a workload can be (docs/workloads.md): the ``kind`` label of warptd_workload_energy_joules_total.
WorkloadKind = Literal["slurm_job", "systemd_unit", "container", "user"]
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = get_args(WorkloadKind)
#: Where slurmd puts jobs in the cgroup tree (docs/workloads.md): cgroup v2's scope (one per slurmd,
#: ``<node>_`` with several on a host) and cgroup v1's root in each hierarchy; ``*`` within an element.
SLURM_ROOTS = ("/system.slice/slurmstepd.scope", "/system.slice/*_slurmstepd.scope", "/slurm", "/slurm_*")
_CGROUP_ROOT = re.compile(r"(/[A-Za-z0-9_.:@*-]{1,255}){1,16}")
#: The most a token file may hold: its first line is the token.
MAX_TOKEN_FILE_BYTES = 64 * 1024
#: Not taken by node_exporter (9100), dcgm-exporter (9400) or nvidia_gpu_exporter (9835).
DEFAULT_PORT = 9465


class SettingsError(ValueError):
    """A setting failed validation; ``str()`` is one line naming the setting."""


class Settings(BaseSettings):
    """Every knob of the daemon. Precedence: flags > environment > config file > defaults."""

    model_config = SettingsConfigDict(
        env_prefix="WARPTD_", extra="forbid", validate_default=True, validate_assignment=True
    )

    config: Path | None = Field(None, description="TOML file with any of these settings")
    listen: str = Field(f":{DEFAULT_PORT}", description="HOST:PORT to serve HTTP on; empty host = all")
    interval: float = Field(1.0, gt=0, le=3600, description="Seconds between two samples of a backend")
    sample_timeout: float = Field(
        2.0, gt=0, le=600, description="Seconds a backend's sample may take before it is marked stale"
    )
    backends: Annotated[list[str] | None, NoDecode] = Field(
        None, description="Backends to load (comma-separated in the environment); default all available"
    )
    node: str = Field(
        default_factory=socket.gethostname,
        description="Node name for warptd_device_info{node}; the Helm chart sets it from spec.nodeName",
    )
    web_config_file: Path | None = Field(
        None, description="TLS and basic auth for every endpoint (exporter-toolkit web-config YAML)"
    )
    http_header_timeout: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Seconds from a new connection (or a request's first byte) to its full head",
    )
    http_body_timeout: float = Field(
        10.0, gt=0, le=3600, description="Seconds to receive a request body, and again to send a response"
    )
    http_idle_timeout: float = Field(
        120.0, gt=0, le=86400, description="Seconds a keep-alive connection may wait for its next request"
    )
    http_max_connections: int = Field(
        4096,
        ge=1,
        le=1_000_000,
        description="Open connections; at the cap the longest-idle keep-alive connection is closed "
        "for a new one",
    )
    http_max_client_connections: int = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Open connections of one client address (an IPv6 /64); at the cap its own "
        "longest-idle one is closed for a new one",
    )
    http_max_requests: int = Field(
        40,
        ge=1,
        le=10_000,
        description="Requests handled at once (node_exporter's --web.max-requests); others wait, "
        "up to http_header_timeout, then 503",
    )
    http_backlog: int = Field(
        1024, ge=128, le=65535, description="Listen backlog (capped by net.core.somaxconn)"
    )
    http_max_header_bytes: int = Field(
        16 * 1024, ge=1024, le=1024 * 1024, description="Largest request line plus headers; beyond it 431"
    )
    http_max_response_bytes: int = Field(
        16 * 2**20,
        ge=64 * 2**10,
        le=64 * 2**30,
        description="Bytes that responses not yet taken by their clients may hold, all connections "
        "together (16MiB, 512KiB or bytes); at it, requests other than /metrics and the probes wait, "
        "then 503",
    )
    state_dir: Path | None = Field(
        None, description="Directory to keep energy totals in across restarts (systemd: /var/lib/warptd)"
    )
    sysfs: Path = Field(Path("/sys"), description="Root of sysfs, as node_exporter's --path.sysfs")
    procfs: Path = Field(Path("/proc"), description="Root of procfs, as node_exporter's --path.procfs")
    kubelet_socket: Path = Field(
        Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        description="Kubelet PodResources API socket; pod attribution is off while it is absent",
    )
    pod_attribution: bool = Field(True, description="Map devices to pods via the kubelet PodResources API")
    pod_resources_interval: float = Field(
        10.0, ge=1, le=3600, description="Seconds between two PodResources List calls"
    )
    pod_labels: bool = Field(
        False, description="Add namespace/pod/container labels to the device series of allocated devices"
    )
    processes: bool = Field(False, description="Export per-process device memory (NVIDIA compute processes)")
    process_utilization_interval: float = Field(
        1.0,
        ge=1.0,
        le=10.0,
        description="Seconds between two reads of a GPU's per-process utilization (--processes, --workloads; "
        "NVML's costs 2.1 ms of CPU a read on an H200) while its processes stay the same, at least 1 (the "
        "driver's longest sampling window) and at most 10 (it keeps its last 72 to 100 windows, 12 s and "
        "more at 1/6 s each): a read returns every sample since the last. A GPU that lists no process is "
        "not read; a new process is read at once and a second later",
    )
    compat: Literal["dcgm-exporter"] | None = Field(
        None,
        description="Also serve dcgm-exporter's default series (names, units, labels) beside warptd's own",
    )
    dcgm_exporter_release: str = Field(
        dcgm.LATEST,
        description="The dcgm-exporter release --compat replaces, whose labels its series carry: latest "
        f"(the node's label is hostname), or its version ({dcgm.LAST_HOSTNAME_CAPITALISED} and earlier: "
        "Hostname)",
    )
    workloads: bool = Field(
        False,
        description="Split device and CPU package energy between Slurm jobs, systemd units, containers "
        "and users, from the processes on each device and their cgroups (see docs/workloads.md)",
    )
    workload_retention: float = Field(
        600.0, ge=0, le=7 * 86400, description="Seconds an ended workload's series stays, then goes"
    )
    workload_kinds: Annotated[list[WorkloadKind], NoDecode] = Field(
        list(WORKLOAD_KINDS),
        min_length=1,
        description="Workload kinds tracked (comma-separated in the environment); a process of another "
        "kind counts for its user where user is tracked, else is unattributed",
    )
    workload_max: int = Field(
        1000, ge=1, le=100_000, description="Workloads tracked at once (live and retained); more are dropped"
    )
    workload_recording_memory: int = Field(
        32 * 2**20,
        ge=0,
        le=64 * 2**30,
        description="Bytes the workloads' recordings (GET /workloads/KIND/ID/recording) may take (32MiB, "
        "512KiB or bytes; 0: none kept); beyond it ended workloads' points go first, then running ones "
        "keep coarser ones",
    )
    workload_slurm_roots: Annotated[list[str], NoDecode] = Field(
        list(SLURM_ROOTS),
        min_length=1,
        max_length=16,
        description="cgroup paths under which a job_J (or uid_U/job_J) directory is a Slurm job "
        "(comma-separated in the environment; * within one element); a job_J elsewhere is not one",
    )
    cgroupfs: Path = Field(
        Path("/sys/fs/cgroup"),
        description="Root of the cgroup tree (v2 mount, or the v1 hierarchies' parent)",
    )
    xid_events: bool = Field(True, description="Count NVIDIA XID errors from NVML events on their own thread")
    tpu_runtime_address: str | None = Field(
        None, description="host:port of the libtpu runtime metrics service; default tpu-info's localhost:8431"
    )
    stress: bool = Field(True, description="Serve the /stress endpoints (--no-stress turns them off)")
    stress_token: SecretStr | None = Field(
        None, description="Bearer token for POST/DELETE /stress; without one only loopback clients may"
    )
    stress_token_file: Path | None = Field(None, description="File holding the stress token")
    stress_max_duration: float = Field(3600.0, ge=1, le=7 * 86400, description="Longest stress run, seconds")
    stress_history: int = Field(50, ge=1, le=10_000, description="Finished stress jobs kept for GET /stress")
    windows: bool = Field(True, description="Serve the /windows endpoints (--no-windows turns them off)")
    health_interval: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Seconds between two reads of a device's slow-changing values (health counters, "
        "link counters, power limit, fans, media engines) when --interval is shorter",
    )
    energy_interval: float = Field(
        30.0,
        ge=1.0,
        le=3600,
        description="Seconds between two reads of a device's energy counter when --interval is shorter "
        "(NVML's costs 2.9 ms of CPU on an H200); between reads the total advances by the energy the power "
        "drew (NVML: its 1 s average), and windows, profiles, stress jobs and workload recordings read it "
        "at their edges",
    )
    window_energy_interval: float = Field(
        1.0,
        ge=0.1,
        le=3600,
        description="Seconds between two reads of the energy counter of a device that a window, profile, "
        "stress job or workload recording samples, counted from its edge: each such second is the "
        "counter's own",
    )
    window_interval: float = Field(
        0.1, gt=0, le=3600, description="Seconds between two samples of a device inside an open window"
    )
    window_max_duration: float = Field(
        86400.0, ge=1, le=30 * 86400, description="Seconds after which an open window ends by itself"
    )
    window_lease_min: float = Field(
        5.0, gt=0, le=3600, description="Shortest lease (lease_s) a client may hold a window by, seconds"
    )
    window_lease_max: float = Field(
        600.0, gt=0, le=86400, description="Longest lease (lease_s) a client may hold a window by, seconds"
    )
    window_max_open: int = Field(64, ge=1, le=10_000, description="Windows open at once; beyond, 429")
    window_history: int = Field(100, ge=1, le=10_000, description="Ended windows kept for GET /windows")
    window_memory: int = Field(
        8 * 2**20,
        ge=64 * 2**10,
        le=64 * 2**30,
        description="Bytes the time series of open and ended windows may take (8MiB, 512KiB or bytes); "
        "beyond it ended windows' points go first, then open windows keep coarser ones",
    )
    window_energy_names: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="Window names whose energy goes to warptd_window_energy_joules_total{name} "
        "(comma-separated in the environment); others only to the histogram",
    )
    carbon_intensity: float | None = Field(
        None, ge=0, le=10_000, description="gCO2e per kWh: recordings then give grams CO2e"
    )
    energy_price: float | None = Field(
        None, ge=0, le=1e6, description="Price per kWh: recordings then give a cost"
    )
    metrics_exclude: Annotated[list[str], NoDecode] = Field(
        [],
        max_length=200,
        description="Metric families not to export or read, as globs over their names (comma-separated "
        "in the environment); added to the default exclusions",
    )
    metrics_include: Annotated[list[str], NoDecode] = Field(
        [],
        max_length=200,
        description="Metric families to export whatever the exclusions say (the default's too), as globs",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto = console on a TTY, JSON otherwise"
    )

    @field_validator("backends", mode="before")
    @classmethod
    def _split_backends(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part for part in value.split(",")]
        if isinstance(value, list):
            names = [str(v).strip().lower() for v in value if str(v).strip()]
            return names or None
        return value

    @field_validator("metrics_exclude", "metrics_include", mode="before")
    @classmethod
    def _split_globs(cls, value: object) -> object:
        return [g for g in value.split(",") if g.strip()] if isinstance(value, str) else value

    @field_validator("metrics_exclude", "metrics_include")
    @classmethod
    def _check_globs(cls, value: list[str]) -> list[str]:
        return [check_glob(glob) for glob in value]

    @field_validator("window_energy_names", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list):
            names = [str(v).strip() for v in value if str(v).strip()]
            return names or None
        return value

    @field_validator("workload_kinds", mode="before")
    @classmethod
    def _split_kinds(cls, value: object) -> object:
        return [k.strip() for k in value.split(",") if k.strip()] if isinstance(value, str) else value

    @field_validator("workload_slurm_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        return [r.strip() for r in value.split(",") if r.strip()] if isinstance(value, str) else value

    @field_validator("workload_slurm_roots")
    @classmethod
    def _check_roots(cls, value: list[str]) -> list[str]:
        for root in value:
            elements = root.rstrip("/").split("/")
            if not _CGROUP_ROOT.fullmatch(root.rstrip("/")) or {".", ".."} & set(elements):
                raise ValueError(
                    f"not a cgroup path: {root[:80]!r} (absolute, elements of letters, digits, _ . : @ * -)"
                )
        return value

    @field_validator("dcgm_exporter_release")
    @classmethod
    def _check_release(cls, value: str) -> str:
        return dcgm.check_release(value)

    @field_validator("window_energy_names")
    @classmethod
    def _check_names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if len(value) > 1000:
                raise ValueError("at most 1000 names")
            bad = [n for n in value if not WINDOW_NAME.fullmatch(n)]
            if bad:
                raise ValueError(f"not a window name: {bad[0]!r} (letters, digits, . _ : - ; 1-64)")
        return value

    @model_validator(mode="after")
    def _check_lease_bounds(self) -> Settings:
        if self.window_lease_min > self.window_lease_max:
            raise ValueError(
                f"window_lease_min ({self.window_lease_min:g}) is above window_lease_max "
                f"({self.window_lease_max:g})"
            )
        return self

    @field_validator("window_memory", "workload_recording_memory", "http_max_response_bytes", mode="before")
    @classmethod
    def _parse_bytes(cls, value: object) -> object:
        """``16MiB``, ``512KiB``, ``1GiB`` (binary units; ``M`` and ``MB`` read as ``MiB``) or bytes."""
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*", value, re.IGNORECASE)
            if match is None:
                raise ValueError(f"not a size: {value[:40]!r} (bytes, or a number with KiB, MiB or GiB)")
            number, unit = float(match[1]), match[2].upper()
            return int(number * 2 ** {"": 0, "K": 10, "M": 20, "G": 30}[unit])
        return value

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError("expected HOST:PORT, e.g. ':9465' or '127.0.0.1:9465'")
        if not 0 <= int(port) <= 65535:  # 0: any free port, as the tests use
            raise ValueError(f"port out of range: {int(port)} (1-65535)")
        if host.startswith("[") != host.endswith("]"):
            raise ValueError("an IPv6 host must be bracketed, e.g. '[::1]:9465'")
        return value

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

    @property
    def metric_selection(self) -> MetricSelection:
        """The families exported and read (``metrics_exclude``/``_include`` over the default's)."""
        return select(tuple(self.metrics_exclude), tuple(self.metrics_include), self.compat is not None)

    @property
    def stale_after(self) -> float:
        """Seconds after its last good sample that a backend counts as stale and loses its series: a
        device whose read hangs holds the others up to the timeout, then they are read at once, so a
        backend is stale once no sample completed an interval past that."""
        return max(3 * self.interval, 2 * self.interval + self.sample_timeout)

    @property
    def listen_address(self) -> tuple[str, int]:
        """``listen`` split into (host, port); an empty host means every interface."""
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)

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
        config_file = _config_file(init_settings)
        if config_file is not None:
            sources.append(_TomlFile(settings_cls, toml_file=config_file))
        return tuple(sources)


class _TomlFile(TomlConfigSettingsSource):
    """The config file, read as every file that others can shape is (:mod:`warptd.files`); any
    problem with it, nesting too deep for the parser included, is a ``ValueError`` of one line."""

    def _read_file(self, file_path: Path | Any) -> dict[str, Any]:
        try:
            return tomllib.loads(files.read_text(file_path))
        except OSError as exc:
            raise ValueError(exc.strerror or str(exc)) from None
        except RecursionError:
            raise ValueError("nested too deep") from None


def _config_file(init_settings: PydanticBaseSettingsSource) -> Path | None:
    given = init_settings.init_kwargs.get("config") if isinstance(init_settings, InitSettingsSource) else None
    given = given or os.environ.get("WARPTD_CONFIG")
    return Path(given) if given else None


def load_settings(**overrides: object) -> Settings:
    """Build the settings, raising :class:`SettingsError` with a one-line message on any bad value."""
    values = {k: v for k, v in overrides.items() if v is not None}
    config_file = values.get("config") or os.environ.get("WARPTD_CONFIG")
    if config_file and not Path(str(config_file)).is_file():
        what = "not a regular file" if Path(str(config_file)).exists() else "no such file"
        raise SettingsError(f"invalid setting config: {what} {config_file}")
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise SettingsError(_one_line(exc, set(values), config_file)) from None
    except ValueError as exc:  # e.g. a TOML syntax error: tomllib names the line, never its text
        raise SettingsError(f"invalid config file {config_file}: {exc}") from None
    except RecursionError:  # a value nested past what validation recurses through
        raise SettingsError(f"invalid config file {config_file}: nested too deep") from None


#: Words that make a key's value a secret wherever it is read (settings, the config file, the web
#: config): a message never shows such a value, whatever it is.
SECRET_WORDS = ("pass", "token", "secret", "key", "credential", "auth", "cookie", "private", "session")
#: A key a message may name: one that looks like a setting's (a file whose keys are not names is no
#: config file, and its keys are its contents).
_NAMED_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
#: Problems one message lists; a file of another kind would otherwise make one line of hundreds.
MOST_PROBLEMS = 5


def is_secret(name: str) -> bool:
    """A key whose value is never shown: its name holds a :data:`SECRET_WORDS` word."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def key_text(location: tuple[object, ...]) -> str | None:
    """A key's dotted path as a message shows it; None where a part does not look like a key's name
    (a list position is shown as its number)."""
    parts = [str(part) for part in location]
    if not all(_NAMED_KEY.fullmatch(part) or part.isdigit() for part in parts):
        return None
    return ".".join(parts)


def problems_text(problems: list[str]) -> str:
    """At most :data:`MOST_PROBLEMS` problems in one line, and how many more there were."""
    shown = "; ".join(problems[:MOST_PROBLEMS])
    more = len(problems) - MOST_PROBLEMS
    return f"{shown}; and {more} more" if more > 0 else shown


def _one_line(exc: ValidationError, given: set[str], config_file: object) -> str:
    """Each bad setting, named, with what is wrong with it. A value is shown only where a flag or a
    ``WARPTD_*`` variable gave it, and never a secret's: a config file's contents never reach the log
    (``config`` may point at any file the daemon can read)."""
    parts, strangers = [], 0
    for err in exc.errors():
        location = tuple(err["loc"])
        name = key_text(location)
        if err["type"] == "extra_forbidden":
            if name is None:
                strangers += 1
            else:
                parts.append(f"{name}: no such setting")
            continue
        name = name or "settings"
        setting = str(location[0]) if location else ""
        typed = setting in given or f"WARPTD_{setting.upper()}" in os.environ
        value = err.get("input")
        secret = any(is_secret(str(part)) for part in location)
        shown = f"={_shown(value)}" if typed and not secret and not isinstance(value, dict) else ""
        parts.append(f"{name}{shown}: {plain_message(err)}")
    if strangers:
        where = f" in {config_file}" if config_file else ""
        parts.append(f"{strangers} key(s){where} that are no setting's name (is it warptd's config file?)")
    return "invalid setting " + problems_text(parts)


def _shown(value: object) -> str:
    """A value a flag or variable gave, as a message shows it: its repr, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


#: What pydantic puts before the message of an exception raised in a validator.
_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def plain_message(error: Mapping[str, Any]) -> str:
    """One pydantic error's message without the library's own prefix (``Value error, ``)."""
    message = str(error["msg"])
    for prefix in _PYDANTIC_PREFIXES:
        message = message.removeprefix(prefix)
    return message


#: The settings backends read while sampling, so a reload hands these to them (the rest of theirs,
#: paths and the like, stays as the process was started with: those need a restart).
BACKEND_LIVE_SETTINGS = ("interval", "health_interval", "energy_interval", "sample_timeout")
#: What a reload (SIGHUP) applies to the running daemon; a change to any other setting is logged as
#: needing a restart. A new setting needs a restart until the daemon applies it live and lists it here.
RELOADABLE = frozenset(
    {
        *BACKEND_LIVE_SETTINGS,
        "log_level",
        "log_format",
        "process_utilization_interval",
        "carbon_intensity",
        "energy_price",
        "stress_history",
        "stress_max_duration",
        "stress_token",
        "stress_token_file",
        "window_history",
        "window_interval",
        "window_lease_max",
        "window_lease_min",
        "window_max_duration",
        "window_max_open",
        "window_memory",
    }
)


def with_live_settings(current: Settings, reloaded: Settings) -> Settings:
    """``current`` with the :data:`BACKEND_LIVE_SETTINGS` of ``reloaded``."""
    return current.model_copy(update={name: getattr(reloaded, name) for name in BACKEND_LIVE_SETTINGS})
