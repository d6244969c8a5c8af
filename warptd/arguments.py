"""The command line: each subcommand's own flags, then the shared ones it uses, made from the settings."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from warptd import __version__
from warptd.config import DEFAULT_PORT, Option, options
from warptd.config.knob import LOADING, METRICS, RECORDING, SAMPLING, SERVING, SIZE
from warptd.stress.torch_device import DTYPES


class _Formatter(argparse.HelpFormatter):
    """argparse's help, wrapped without breaking a flag or a variable at its hyphens."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        words = " ".join(text.split())
        return textwrap.fill(
            words, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line and exit 2, without the usage block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

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


def _flag(option: Option) -> tuple[tuple[str, ...], dict[str, Any]]:
    """A setting's flag as argparse takes it: a switch, a repeatable flag, or a flag of one value whose
    help ends with the setting's own default (the help cannot say one default while the daemon uses
    another)."""
    knob, default = option.knob, option.field.default
    given: dict[str, Any] = {"dest": option.name, "help": knob.help}
    if option.switch:
        given.update(action="store_const", const=not default)
    elif knob.repeatable:
        given.update(action="append", metavar=knob.metavar)
    else:
        parse = None if knob.metavar == SIZE else _PARSERS.get(option.kind)  # a size may name its unit
        given.update(type=parse, metavar=knob.metavar, choices=option.choices or None)
        if default is not None:
            given["help"] = f"{knob.help} (default {option.typed_default})"
    return (str(option.flag),), given


#: A flag's value as its setting's type reads it, or one line saying what is wrong (others: as typed).
_PARSERS: dict[object, Callable[[str], object]] = {float: _number, int: _integer, Path: Path}
#: Shared flags, one per setting that has one, in the groups each command takes. Every command loads
#: backends and logs; serve, sample and stress also sample.
_FLAGS = {
    group: [_flag(option) for option in options() if option.group == group and option.flag]
    for group in (SERVING, METRICS, SAMPLING, RECORDING, LOADING)
}
#: The groups each command takes: those whose settings it uses, and no other (``sample`` records
#: nothing, so it takes no recording flag).
_COMMAND_GROUPS = {
    "serve": (SERVING, METRICS, SAMPLING, RECORDING, LOADING),
    "list": (LOADING,),
    "sample": (SAMPLING, LOADING),
    "stress": (SAMPLING, RECORDING, LOADING),
    "report": (),
    "profile": (SAMPLING, RECORDING, LOADING),
    "workload": (),
    "doctor": (METRICS, SAMPLING, LOADING),
    "capture": (SAMPLING, LOADING),
}


def _add_flags(parser: argparse.ArgumentParser, command: str, default: object) -> None:
    """The shared flags ``command`` uses, after its own; a subcommand's must not reset earlier ones.
    The help ends with how each of them is also a ``WARPTD_*`` variable and a config file key."""
    for title in _COMMAND_GROUPS[command]:
        group = parser.add_argument_group(f"{title} options")
        for names, given in _FLAGS[title]:
            group.add_argument(*names, default=default, **given)
    if _COMMAND_GROUPS[command]:
        parser.epilog = environment_help(command)


def environment_help(command: str) -> str:
    """What ``--help`` says of the other ways to give ``command``'s settings: the rule that names
    each flag's ``WARPTD_*`` variable, every flag the rule does not name, and (for the daemon) the
    settings no flag sets. Made from the settings themselves, so it names every variable it promises."""
    offered = [o for o in options() if o.flag and o.group in _COMMAND_GROUPS[command]]
    offered.sort(key=lambda o: _COMMAND_GROUPS[command].index(o.group))
    otherwise = [
        f"{o.flag}: {o.variable}=false" if o.switch and o.field.default else f"{o.flag}: {o.variable}"
        for o in offered
        if o.flag != f"--{o.name.replace('_', '-')}"
    ]
    example = next(o for o in offered if o.knob.metavar and not o.knob.repeatable and o.name != "config")
    flag, value, setting = example.flag, example.knob.metavar, example.name
    switch = next((o for o in offered if o.switch and not o.field.default), None)
    switched = f"; a switch: {switch.variable}=true" if switch else ""
    text = (
        "Every option of the groups above is also a WARPTD_* environment variable, its name in "
        f"capitals with underscores ({flag} {value}: {example.variable}={value}{switched}; a "
        "repeatable one: a comma-separated list), and a key of the --config TOML file "
        f'({setting} = "{value}"); a flag wins over a variable, a variable over the file.'
    )
    if otherwise:
        text += f" Named otherwise: {'; '.join(otherwise)}."
    if command == "serve":
        text += f" Without a flag: {', '.join(o.variable for o in options() if not o.flag)}."
    return text + " docs/configuration.md describes each."


def _profile_parser(sub: Any) -> argparse.ArgumentParser:
    """``warptd profile [options] -- CMD [ARGS…]``."""
    profile = sub.add_parser(
        "profile",
        help="run a command and record the devices' energy while it runs",
        description="Run CMD and record every selected device while it runs: through the local daemon "
        f"when one answers (http://127.0.0.1:{DEFAULT_PORT}, or the port of listen in the config file "
        "or WARPTD_LISTEN), else with its own samplers; it says which on stderr, and what it measures, "
        "before CMD runs. Exits with CMD's exit code.",
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
        help="FILE.json: save the recording's JSON there (as --save); any other name: write the HTML "
        "report (report extra) there, and the recording's JSON beside it (run.html: run.json)",
    )
    profile.add_argument(
        "--save", metavar="FILE", help="save the recording's JSON to FILE (for warptd report later)"
    )
    where = profile.add_mutually_exclusive_group()
    where.add_argument(
        "--url",
        metavar="URL",
        help="the daemon to record through, which must answer (default $WARPTD_URL, which must too, "
        f"else http://127.0.0.1:{DEFAULT_PORT} when a daemon answers there: the port of listen in the "
        "config file or WARPTD_LISTEN)",
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


def _stress_parser(sub: Any) -> argparse.ArgumentParser:
    """``warptd stress``: one stress test here, in the foreground."""
    stress = sub.add_parser(
        "stress", help="run a stress test here and print its result", description="Run a stress test here."
    )
    stress.add_argument(
        "--test",
        metavar="NAME",
        help="matmul, memory or tt_matmul (default matmul, tt_matmul on Tenstorrent chips)",
    )
    stress.add_argument(
        "--device",
        metavar="BACKEND:INDEX",
        help="BACKEND:INDEX (default: the first accelerator; without one, name the CPU: cpu:0)",
    )
    stress.add_argument(
        "--duration", type=_number, default=10.0, metavar="SECONDS", help="seconds (default 10)"
    )
    stress.add_argument("--dtype", choices=DTYPES)
    stress.add_argument(
        "--size", type=_integer, metavar="N", help="matmul: matrix side; memory: MiB per buffer"
    )
    stress.add_argument("--json", action="store_true", help="print the result as JSON")
    return stress


def _report_parser(sub: Any) -> argparse.ArgumentParser:
    """``warptd report RECORDING.json [B.json]``: a saved recording as an HTML report."""
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
    return report


def _workload_parser(sub: Any) -> argparse.ArgumentParser:
    """``warptd workload [KIND ID]``: a workload's energy, from the local daemon."""
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
        help="write the workload's HTML report there (report extra), and its recording's JSON beside it "
        "(job.html: job.json) unless --json FILE names where",
    )
    return workload


def _node_parsers(sub: Any) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """``warptd doctor`` and ``warptd capture``: what warptd is and costs on this node, and what its
    NVML answers, without the daemon."""
    doctor = sub.add_parser(
        "doctor",
        help="is warptd right here, and what does it cost here?",
        description="Check every backend here, without the daemon, and answer first: is warptd right here "
        "(values read two ways agree), and what does it cost here (the CPU of its reads, the series "
        "Prometheus gets). Then the details: the SDK and driver versions, the field numbering chosen, each "
        "read's CPU and how often it is made, how often values change, the series exported and those "
        "absent (docs/hardware.md#warptd-doctor). Exits 1 where two paths disagree.",
    )
    doctor.add_argument("--json", action="store_true", help="print JSON")
    doctor.add_argument("--quick", action="store_true", help="fewer reads and a shorter poll (a few seconds)")
    capture = sub.add_parser(
        "capture",
        help="record what this node's NVML answers warptd, into one file to send us",
        description="Record into one JSON file every NVML call warptd makes here (its reads, warptd doctor's "
        "checks, process and MIG discovery) with what each answered and cost, idle and with --load under "
        "the stress child, without the daemon: about 25 s idle, a minute more with --load. UUIDs, the "
        "hostname and process names are masked unless --no-mask (docs/captures.md).",
    )
    capture.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="where (default capture-<model>-<driver>.json here)"
    )
    capture.add_argument(
        "--no-mask", dest="mask", action="store_false", help="keep UUIDs, the hostname and process names"
    )
    capture.add_argument("--load", action="store_true", help="also capture every GPU under the stress child")
    return doctor, capture


def build_parser() -> argparse.ArgumentParser:
    """The daemon's flags, and each subcommand with its own flags and the shared ones it uses."""
    parser = _Parser(prog="warptd", description="Accelerator telemetry daemon for Prometheus.")
    parser.add_argument("--version", action="version", version=f"warptd {__version__}")
    sub = parser.add_subparsers(
        dest="command",
        title="commands",
        metavar="{serve,list,sample,stress,profile,report,workload,doctor,capture}",
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
    stress, report, workload = _stress_parser(sub), _report_parser(sub), _workload_parser(sub)
    profile = _profile_parser(sub)
    doctor, capture = _node_parsers(sub)
    _add_flags(parser, "serve", None)  # `warptd` alone serves
    commands = (
        ("serve", serve),
        ("list", listing),
        ("sample", sample),
        ("stress", stress),
        ("profile", profile),
        ("report", report),
        ("workload", workload),
        ("doctor", doctor),
        ("capture", capture),
    )
    for name, command in commands:
        _add_flags(command, name, argparse.SUPPRESS)
    return parser
