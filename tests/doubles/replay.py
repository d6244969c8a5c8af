"""Run a command over the NVML double, by hand: ``python -m tests.doubles.replay [options] -- CMD [ARGS…]``,
or over a capture: ``python -m tests.doubles.replay CAPTURE [--state S] [--report FILE] -- CMD [ARGS…]``.

Builds the stand-in ``libnvidia-ml.so.1`` (gcc, cached by source hash; without the functions a
captured driver did not export), writes a simulated driver's state with the GPUs asked for, or those
of the capture answering as it recorded them (``tests/doubles/capture_double.py``), and runs CMD with
the two variables its pynvml needs to load that library and find that state (``LD_LIBRARY_PATH``,
``WARPTD_NVML_DOUBLE_STATE``). The GPUs draw their power live, so energy counters advance with wall
time. CMD's exit code is this command's; the state file is removed when it ends. Over a capture, what
the double's model answered instead of the capture is said on stderr (and written to ``--report``).
docs/development.md shows it in use.

Everything before ``--`` is this runner's; everything after it is CMD's, untouched.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from tests.doubles.capture_double import Replayed, fake_nvml, modelled
from tests.doubles.nvml import FakeGpu, FakeNvml
from warptd.capture import schema

#: The GPU models the double knows, by the name ``--model`` takes.
MODELS: dict[str, Callable[[int], FakeGpu]] = {
    "h100": lambda index: FakeGpu(index, live=True),
    "h200": lambda index: FakeGpu.h200(index, live=True),
}
#: What the double's driver says it is without ``--driver-version`` (the real H200's: shared/notes).
DRIVER_VERSION = "580.159.04"
#: Signals this runner passes on to CMD (SIGINT reaches it through the terminal's process group).
_FORWARDED = (signal.SIGTERM, signal.SIGHUP)
#: Items of each kind said on stderr; ``--report`` has them all.
_SHOWN = 8


class ReplayError(Exception):
    """Arguments this runner cannot run; the message is one line."""


@dataclass(frozen=True)
class Replay:
    """What to run, over which simulated GPUs: models, or a capture's."""

    command: tuple[str, ...]
    models: tuple[str, ...]  # one per GPU, in NVML's order (none with a capture)
    driver_version: str = DRIVER_VERSION
    capture: Path | None = None  # answer from this capture, not from the models
    state: str = schema.IDLE  # the capture's state to answer from
    report: Path | None = None  # where to write what the model answered instead of the capture


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.doubles.replay",
        usage="python -m tests.doubles.replay [--gpus N] [--model NAME ...] [--driver-version V] -- CMD ...\n"
        "       python -m tests.doubles.replay CAPTURE [--state S] [--report FILE] -- CMD ...",
        description="Run CMD over the NVML double: simulated GPUs that NVIDIA's own pynvml reads through "
        "a stand-in libnvidia-ml.so.1, answering as its models do, or as a capture (warptd capture, "
        "docs/captures.md) recorded.",
    )
    parser.add_argument("capture", nargs="?", type=Path, metavar="CAPTURE", help="a capture to answer from")
    parser.add_argument(
        "--state", default=schema.IDLE, metavar="S", help="the capture's state to answer from (default idle)"
    )
    parser.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="write there (JSON) what the double's model answered instead of the capture",
    )
    parser.add_argument(
        "--gpus", type=int, metavar="N", help="how many GPUs (default: 2, or one per --model)"
    )
    parser.add_argument(
        "--model",
        dest="models",
        nargs="+",
        choices=sorted(MODELS),
        metavar="NAME",
        help=f"each GPU's model in turn, repeated over --gpus ({', '.join(sorted(MODELS))}; default h100)",
    )
    parser.add_argument(
        "--driver-version",
        default=DRIVER_VERSION,
        metavar="V",
        help=f"the driver version NVML reports; it picks the field numbering (default {DRIVER_VERSION})",
    )
    return parser


def parse(argv: Sequence[str]) -> Replay:
    """The runner's options (before ``--``) and CMD (after it). The split comes first, so CMD's own
    arguments never reach this parser, whatever it later takes before ``--``."""
    argv = list(argv)
    if "--" not in argv:
        raise ReplayError("give the command after --, e.g. python -m tests.doubles.replay -- warptd list")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    if not command:
        raise ReplayError("no command after --")
    args = _parser().parse_args(options)
    if args.capture is not None:
        if args.gpus is not None or args.models or args.driver_version != DRIVER_VERSION:
            raise ReplayError("a capture says its GPUs and driver: drop --gpus, --model and --driver-version")
        if not args.capture.is_file():
            raise ReplayError(f"no capture file {args.capture}")
        return Replay(tuple(command), (), capture=args.capture, state=args.state, report=args.report)
    if args.report is not None or args.state != schema.IDLE:
        raise ReplayError("--state and --report go with a capture")
    models = tuple(args.models or ("h100",))
    count = args.gpus if args.gpus is not None else (len(models) if args.models else 2)
    if not 1 <= count <= 64:
        raise ReplayError(f"--gpus must be 1 to 64 (the double's slots): {count}")
    return Replay(
        command=tuple(command),
        models=tuple(models[i % len(models)] for i in range(count)),
        driver_version=args.driver_version,
    )


def double(replay: Replay) -> tuple[FakeNvml, schema.Capture | None, Replayed | None]:
    """The double of ``replay``: its models' GPUs, or its capture's (with what it cannot answer)."""
    if replay.capture is None:
        gpus = [MODELS[model](index) for index, model in enumerate(replay.models)]
        return FakeNvml(gpus, replay.driver_version), None, None
    try:
        capture = schema.Capture.read(replay.capture)
    except (ValidationError, ValueError) as exc:
        raise ReplayError(f"{replay.capture} is not a capture: {str(exc).splitlines()[0]}") from None
    try:
        fake, replayed = fake_nvml(capture, replay.state)
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    return fake, capture, replayed


def _tell(replay: Replay, fake: FakeNvml, capture: schema.Capture, replayed: Replayed) -> None:
    """What the double's model answered instead of the capture: on stderr, and in ``--report``."""
    answered = modelled(fake, capture)
    found = {"unknown": replayed.unknown, "modelled": answered, "not_reproduced": replayed.not_reproduced}
    if replay.report is not None:
        replay.report.write_text(json.dumps(found, indent=1) + "\n")
    for title, items in (
        ("marked unknown in the capture, answered by the double's model", replayed.unknown),
        ("asked but not in the capture, answered by the double's model", answered),
        ("in the capture but not answered as captured", replayed.not_reproduced),
    ):
        if items:
            more = f"; and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
            print(f"replay: {len(items)} {title}: {'; '.join(items[:_SHOWN])}{more}", file=sys.stderr)


def run(replay: Replay) -> int:
    """Run CMD over a fresh double of ``replay``'s GPUs; its exit code (128+N when a signal N ended it)."""
    fake, capture, replayed = double(replay)
    try:
        environment = {**os.environ, **fake.environment()}
        try:
            child = subprocess.Popen(replay.command, env=environment)
        except OSError as exc:
            raise ReplayError(f"cannot run {replay.command[0]}: {exc.strerror or exc}") from None
        # Ctrl-C reaches CMD through the terminal's process group: wait for it to end on its own. A
        # SIGTERM or SIGHUP sent to this runner alone (a service manager, a test) is passed on to it.
        forwarded = {sig: signal.signal(sig, lambda sig, _: child.send_signal(sig)) for sig in _FORWARDED}
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            code = child.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
            for sig, handler in forwarded.items():
                signal.signal(sig, handler)
        if capture is not None and replayed is not None:
            _tell(replay, fake, capture, replayed)
    finally:
        fake.close()
        Path(fake.path).unlink(missing_ok=True)
    return 128 - code if code < 0 else code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(parse(sys.argv[1:] if argv is None else argv))
    except ReplayError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
