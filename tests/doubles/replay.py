"""Run a command over the NVML double, by hand: ``python -m tests.doubles.replay [options] -- CMD [ARGS…]``.

Builds the stand-in ``libnvidia-ml.so.1`` (gcc, cached by source hash), writes a simulated driver's
state with the GPUs asked for, and runs CMD with the two variables its pynvml needs to load that
library and find that state (``LD_LIBRARY_PATH``, ``WARPTD_NVML_DOUBLE_STATE``). The GPUs draw their
power live, so energy counters advance with wall time. CMD's exit code is this command's; the state
file is removed when CMD ends. docs/development.md shows it in use.

Everything before ``--`` is this runner's; everything after it is CMD's, untouched.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.doubles.nvml import FakeGpu, FakeNvml

#: The GPU models the double knows, by the name ``--model`` takes.
MODELS: dict[str, Callable[[int], FakeGpu]] = {
    "h100": lambda index: FakeGpu(index, live=True),
    "h200": lambda index: FakeGpu.h200(index, live=True),
}
#: What the double's driver says it is without ``--driver-version`` (the real H200's: shared/notes).
DRIVER_VERSION = "580.159.04"


class ReplayError(Exception):
    """Arguments this runner cannot run; the message is one line."""


@dataclass(frozen=True)
class Replay:
    """What to run, over which simulated GPUs."""

    command: tuple[str, ...]
    models: tuple[str, ...]  # one per GPU, in NVML's order
    driver_version: str = DRIVER_VERSION


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.doubles.replay",
        usage="python -m tests.doubles.replay [--gpus N] [--model NAME ...] [--driver-version V] -- CMD ...",
        description="Run CMD over the NVML double: simulated GPUs that NVIDIA's own pynvml reads through "
        "a stand-in libnvidia-ml.so.1.",
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
    models = tuple(args.models or ("h100",))
    count = args.gpus if args.gpus is not None else (len(models) if args.models else 2)
    if not 1 <= count <= 64:
        raise ReplayError(f"--gpus must be 1 to 64 (the double's slots): {count}")
    return Replay(
        command=tuple(command),
        models=tuple(models[i % len(models)] for i in range(count)),
        driver_version=args.driver_version,
    )


def run(replay: Replay) -> int:
    """Run CMD over a fresh double of ``replay``'s GPUs; its exit code (128+N when a signal N ended it)."""
    gpus = [MODELS[model](index) for index, model in enumerate(replay.models)]
    fake = FakeNvml(gpus, replay.driver_version)
    try:
        environment = {**os.environ, **fake.environment()}
        try:
            child = subprocess.Popen(replay.command, env=environment)
        except OSError as exc:
            raise ReplayError(f"cannot run {replay.command[0]}: {exc.strerror or exc}") from None
        # Ctrl-C reaches CMD through the terminal's process group: wait for it to end on its own.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            code = child.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
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
