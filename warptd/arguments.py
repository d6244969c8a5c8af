"""The command line: each subcommand's own flags, then the shared ones it uses, named after settings."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from warptd import __version__
from warptd.stress.torch_device import DTYPES


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line and exit 2, without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message.removeprefix('argument ')}\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        """As argparse, but an unknown flag is reported by the command it was given to."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            prog = f"{self.prog} {parsed.command}" if getattr(parsed, "command", None) else self.prog
            self.exit(2, f"{prog}: unrecognized arguments: {' '.join(extras)} (see {prog} --help)\n")
        return parsed


def _number(text: str) -> float:
    """A flag's number, or one line saying what was wrong with it."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _positive(text: str) -> float:
    """A number above 0 (and finite), or one line saying what was wrong with it."""
    number = _number(text)
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
    return number


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


#: Shared flags, named after the settings they set, in the groups each command takes.
#: Every command loads backends and logs; serve, sample and stress also sample.
LOADING = "backends and logging"
SAMPLING = "sampling"
SERVING = "serving"
_FLAGS: dict[str, list[tuple[tuple[str, ...], dict[str, Any]]]] = {
    SERVING: [
        (("--listen",), {"metavar": "HOST:PORT", "help": "address to serve on (default :9465)"}),
        (
            ("--web-config-file",),
            {"type": Path, "metavar": "FILE", "help": "TLS/basic auth config (exporter-toolkit format)"},
        ),
        *(
            ((f"--{name.replace('_', '-')}",), {"type": kind, "metavar": metavar, "help": text})
            for name, kind, metavar, text in (
                (
                    "http_header_timeout",
                    _number,
                    "SECONDS",
                    "request head or TLS handshake (default 10)",
                ),
                ("http_body_timeout", _number, "SECONDS", "for a request body (default 10)"),
                ("http_idle_timeout", _number, "SECONDS", "a keep-alive connection may idle (default 120)"),
                ("http_max_connections", _integer, "N", "open connections (default 4096)"),
                ("http_max_client_connections", _integer, "N", "open connections per client (default 256)"),
                ("http_max_requests", _integer, "N", "requests handled in the pool at once (default 40)"),
                ("http_backlog", _integer, "N", "listen backlog (default 1024)"),
                ("http_max_header_bytes", _integer, "BYTES", "request line and headers (default 16384)"),
                (
                    "http_max_response_bytes",
                    str,
                    "SIZE",
                    "responses not yet taken by their clients, all together (default 16MiB)",
                ),
            )
        ),
        (
            ("--state-dir",),
            {"type": Path, "metavar": "DIR", "help": "keep energy totals here across restarts"},
        ),
        (
            ("--no-stress",),
            {"dest": "stress", "action": "store_const", "const": False, "help": "turn /stress off"},
        ),
        (
            ("--stress-token",),
            {
                "metavar": "TOKEN",
                "help": "bearer token for POST/DELETE /stress (visible in ps: prefer the file)",
            },
        ),
        (
            ("--stress-token-file",),
            {"type": Path, "metavar": "FILE", "help": "file holding the stress token"},
        ),
        (
            ("--no-windows",),
            {"dest": "windows", "action": "store_const", "const": False, "help": "turn /windows off"},
        ),
        (
            ("--window-max-duration",),
            {"type": _number, "metavar": "SECONDS", "help": "an open window ends by itself (default 86400)"},
        ),
        (
            ("--window-lease-min",),
            {
                "type": _number,
                "metavar": "SECONDS",
                "help": "shortest lease a window may ask for (default 5)",
            },
        ),
        (
            ("--window-lease-max",),
            {
                "type": _number,
                "metavar": "SECONDS",
                "help": "longest lease a window may ask for (default 600)",
            },
        ),
        (
            ("--window-max-open",),
            {"type": _integer, "metavar": "N", "help": "windows open at once (default 64)"},
        ),
        (
            ("--window-history",),
            {"type": _integer, "metavar": "N", "help": "ended windows kept (default 100)"},
        ),
        (
            ("--window-memory",),
            {"metavar": "SIZE", "help": "bytes the windows' time series may take (default 8MiB)"},
        ),
        (
            ("--window-energy-name",),
            {
                "dest": "window_energy_names",
                "action": "append",
                "metavar": "NAME",
                "help": "export this window name's energy as a labelled counter (repeatable)",
            },
        ),
        (("--kubelet-socket",), {"type": Path, "metavar": "PATH", "help": "kubelet PodResources socket"}),
        (
            ("--no-pod-attribution",),
            {
                "dest": "pod_attribution",
                "action": "store_const",
                "const": False,
                "help": "do not map devices to pods",
            },
        ),
        (
            ("--pod-labels",),
            {
                "action": "store_const",
                "const": True,
                "help": "add namespace/pod/container labels to device series",
            },
        ),
        (
            ("--processes",),
            {"action": "store_const", "const": True, "help": "export per-process memory (NVIDIA)"},
        ),
        (
            ("--compat",),
            {
                "choices": ["dcgm-exporter"],
                "help": "also serve another exporter's series from the same samples: dcgm-exporter's "
                "default counters, names, units and labels",
            },
        ),
        (
            ("--workloads",),
            {
                "action": "store_const",
                "const": True,
                "help": "split energy between Slurm jobs, systemd units, containers and users",
            },
        ),
        (
            ("--workload-retention",),
            {"type": _number, "metavar": "SECONDS", "help": "an ended workload's series stays (default 600)"},
        ),
        (
            ("--workload-kinds",),
            {
                "metavar": "KINDS",
                "help": "comma-separated: slurm_job,systemd_unit,container,user (default all)",
            },
        ),
        (
            ("--workload-slurm-roots",),
            {
                "metavar": "PATHS",
                "help": "comma-separated cgroup paths where slurmd puts jobs (default "
                "/system.slice/slurmstepd.scope,/system.slice/*_slurmstepd.scope,/slurm,/slurm_*)",
            },
        ),
        (("--workload-max",), {"type": _integer, "metavar": "N", "help": "workloads tracked (default 1000)"}),
        (
            ("--workload-recording-memory",),
            {"metavar": "SIZE", "help": "bytes the workloads' recordings may take (default 32MiB; 0: none)"},
        ),
        (
            ("--no-xid-events",),
            {"dest": "xid_events", "action": "store_const", "const": False, "help": "ignore XID events"},
        ),
    ],
    SAMPLING: [
        (("--interval",), {"type": _number, "metavar": "SECONDS", "help": "between two samples (default 1)"}),
        (
            ("--sample-timeout",),
            {"type": _number, "metavar": "SECONDS", "help": "a sample may take (default 2)"},
        ),
        (
            ("--health-interval",),
            {
                "type": _number,
                "metavar": "SECONDS",
                "help": "between two reads of health counters and other slow values (default 1)",
            },
        ),
        (
            ("--window-interval",),
            {
                "type": _number,
                "metavar": "SECONDS",
                "help": "between two samples of a measured device (default 0.1)",
            },
        ),
        (
            ("--carbon-intensity",),
            {"type": _number, "metavar": "G_PER_KWH", "help": "gCO2e per kWh, for recordings' carbon"},
        ),
        (
            ("--energy-price",),
            {"type": _number, "metavar": "PRICE", "help": "price per kWh, for recordings' cost"},
        ),
    ],
    LOADING: [
        (("--config",), {"type": Path, "metavar": "FILE", "help": "TOML config file (env WARPTD_CONFIG)"}),
        (
            ("--backend",),
            {
                "dest": "backends",
                "action": "append",
                "metavar": "NAME",
                "help": "load only this backend (repeatable; env WARPTD_BACKENDS=nvidia,cpu); default all",
            },
        ),
        (("--sysfs",), {"type": Path, "metavar": "DIR", "help": "sysfs root (default /sys)"}),
        (("--procfs",), {"type": Path, "metavar": "DIR", "help": "procfs root (default /proc)"}),
        (("--cgroupfs",), {"type": Path, "metavar": "DIR", "help": "cgroup root (default /sys/fs/cgroup)"}),
        (
            ("--tpu-runtime-address",),
            {"metavar": "HOST:PORT", "help": "libtpu metrics (default localhost:8431)"},
        ),
        (("--log-level",), {"choices": ["debug", "info", "warning", "error"]}),
        (("--log-format",), {"choices": ["auto", "json", "console"]}),
    ],
}
_COMMAND_GROUPS = {
    "serve": (SERVING, SAMPLING, LOADING),
    "list": (LOADING,),
    "sample": (SAMPLING, LOADING),
    "stress": (SAMPLING, LOADING),
    "report": (),
    "profile": (SAMPLING, LOADING),
    "workload": (),
}


def _add_flags(parser: argparse.ArgumentParser, command: str, default: object) -> None:
    """The shared flags ``command`` uses, after its own; a subcommand's must not reset earlier ones."""
    for title in _COMMAND_GROUPS[command]:
        group = parser.add_argument_group(f"{title} options")
        for names, options in _FLAGS[title]:
            group.add_argument(*names, default=default, **options)


def _profile_parser(sub: Any) -> argparse.ArgumentParser:
    """``warptd profile [options] -- CMD [ARGS…]``."""
    profile = sub.add_parser(
        "profile",
        help="run a command and record the devices' energy while it runs",
        description="Run CMD and record every selected device while it runs (through the local daemon "
        "when one answers, else with its own samplers). Exits with CMD's exit code.",
        usage="warptd profile [options] -- CMD [ARGS...]",
    )
    profile.add_argument(
        "--device",
        action="append",
        metavar="ID",
        help="device (nvidia:0) or domain (rapl:package-0) to record (repeatable); default every "
        "accelerator and the CPU packages",
    )
    profile.add_argument("--name", metavar="NAME", help="the recording's name (default: CMD's name)")
    profile.add_argument("--json", action="store_true", help="print the recording as JSON on stdout")
    profile.add_argument(
        "--output",
        metavar="FILE",
        help="also write an HTML report (report extra), and the recording's JSON beside it (FILE.json)",
    )
    profile.add_argument(
        "--save", metavar="FILE", help="save the recording's JSON to FILE (for warptd report later)"
    )
    where = profile.add_mutually_exclusive_group()
    where.add_argument(
        "--url",
        metavar="URL",
        help="the daemon to record through, which must answer (default $WARPTD_URL, which must too, "
        "else http://127.0.0.1:PORT when a daemon answers there)",
    )
    where.add_argument(
        "--local", action="store_true", help="sample with this process's own samplers, never a daemon"
    )
    profile.add_argument(
        "--lease",
        type=_positive,
        default=30.0,
        metavar="SECONDS",
        help="through a daemon: hold the window by a lease of SECONDS, renewed while CMD runs, so "
        "the daemon ends it if profile dies (default 30)",
    )
    profile.add_argument("profile_command", nargs=argparse.REMAINDER, metavar="CMD", help="-- CMD [ARGS...]")
    return profile


def build_parser() -> argparse.ArgumentParser:
    """The daemon's flags, and each subcommand with its own flags and the shared ones it uses."""
    parser = _Parser(prog="warptd", description="Accelerator telemetry daemon for Prometheus.")
    parser.add_argument("--version", action="version", version=f"warptd {__version__}")
    sub = parser.add_subparsers(
        dest="command", title="commands", metavar="{serve,list,sample,stress,profile,report,workload}"
    )
    serve = sub.add_parser("serve", help="run the daemon (default)", description="Run the daemon.")
    listing = sub.add_parser(
        "list", help="list the devices of every backend", description="List every device."
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument(
        "--verbose", action="store_true", help="also say why the other backends did not load"
    )
    sample = sub.add_parser("sample", help="print one snapshot", description="Print one snapshot on stdout.")
    sample.add_argument("--json", action="store_true", help="print JSON")
    stress = sub.add_parser(
        "stress", help="run a stress test here and print its result", description="Run a stress test here."
    )
    stress.add_argument(
        "--test",
        metavar="NAME",
        help="matmul, memory or tt_matmul (default matmul, tt_matmul on Tenstorrent chips)",
    )
    stress.add_argument(
        "--device", metavar="BACKEND:INDEX", help="BACKEND:INDEX (default: first accelerator, else cpu:0)"
    )
    stress.add_argument(
        "--duration", type=_number, default=10.0, metavar="SECONDS", help="seconds (default 10)"
    )
    stress.add_argument("--dtype", choices=DTYPES)
    stress.add_argument(
        "--size", type=_integer, metavar="N", help="matmul: matrix side; memory: MiB per buffer"
    )
    stress.add_argument("--json", action="store_true", help="print the result as JSON")
    report = sub.add_parser(
        "report",
        help="render a saved recording as an HTML report",
        description="Render a recording's JSON (a stress run, window or profile) as a self-contained HTML "
        "report, or two recordings side by side; needs the report extra (plotly).",
    )
    report.add_argument(
        "recording",
        nargs="+",
        metavar="RECORDING.json",
        help="the recording's JSON (- for stdin); two (A B) for a comparison with ratios B/A",
    )
    report.add_argument("-o", "--output", metavar="FILE", help="where to write the HTML (default: stdout)")
    report.add_argument(
        "--carbon-intensity",
        type=_number,
        metavar="G_PER_KWH",
        help="gCO2e per kWh: show each energy's carbon (replaces the recording's own figure)",
    )
    report.add_argument(
        "--energy-price",
        type=_number,
        metavar="PRICE",
        help="price per kWh: show each energy's cost (replaces the recording's own figure)",
    )
    workload = sub.add_parser(
        "workload",
        help="print a workload's energy (or every workload's) from the local daemon",
        description="Ask the daemon (--workloads) for a workload's joules per device and CPU, e.g. "
        "warptd workload slurm_job 4242; without KIND and ID, every workload it tracks.",
    )
    workload.add_argument(
        "kind", nargs="?", metavar="KIND", help="slurm_job, systemd_unit, container or user"
    )
    workload.add_argument("workload_id", nargs="?", metavar="ID", help="job id, unit, container id or user")
    workload.add_argument(
        "--url", metavar="URL", help="the daemon (default $WARPTD_URL, else http://127.0.0.1:9465)"
    )
    workload.add_argument(
        "--json",
        nargs="?",
        const=True,
        default=False,
        metavar="FILE",
        help="alone: print the daemon's JSON; with FILE (after KIND ID): save the workload's recording "
        "there (for warptd report later)",
    )
    workload.add_argument(
        "--report",
        metavar="FILE",
        help="write the workload's HTML report (report extra), and its recording's JSON beside it "
        "(FILE.json) unless --json FILE names where",
    )
    profile = _profile_parser(sub)
    _add_flags(parser, "serve", None)  # `warptd` alone serves
    commands = (
        ("serve", serve),
        ("list", listing),
        ("sample", sample),
        ("stress", stress),
        ("profile", profile),
        ("report", report),
        ("workload", workload),
    )
    for name, command in commands:
        _add_flags(command, name, argparse.SUPPRESS)
    return parser
