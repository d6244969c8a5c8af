"""``warptd capture [-o FILE] [--no-mask] [--load]``: record what this node's NVML answers warptd into one
file (docs/captures.md), for the corpus that checks warptd on GPUs its developers never touched."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from warptd.capture.build import build
from warptd.capture.mask import mask
from warptd.capture.recorder import Recorder
from warptd.capture.run import BACKENDS, CaptureError, nvml_module, record
from warptd.config import Settings
from warptd.install import install_command
from warptd.stress.jobs import torch_installed

#: Plain words for what was masked.
_KINDS = {
    "gpu_uuid": "GPU UUID",
    "mig_uuid": "MIG UUID",
    "serial": "serial",
    "board_part_number": "board part number",
    "hostname": "hostname",
    "process_name": "process name",
    "process_cmdline": "command-line word",
}


def default_output(driver: str | None, model: str | None) -> Path:
    """``capture-<model>-<driver>.json`` in the working directory."""
    words = [part for part in (model or "nvidia").lower().replace("nvidia", "").split() if part]
    return Path(f"capture-{'-'.join(words) or 'gpu'}-{driver or 'unknown'}.json")


def run_capture(settings: Settings, args: argparse.Namespace) -> int:
    """Capture this node; 0 when every state asked for was captured, 1 where the load could not
    run (the idle capture is written all the same), 2 where nothing could be captured."""
    if args.load and not torch_installed():
        return _refuse(f"--load runs the stress child, which needs torch: {install_command('stress')}")
    outside = sorted(set(settings.backends or ()) - set(BACKENDS))
    if outside:
        return _refuse(f"a capture reads NVML alone ({', '.join(BACKENDS)}), not {', '.join(outside)}")
    output: Path | None = args.output
    if output is not None and output.is_dir():
        return _refuse(f"{output} is a directory: name the file to write")
    started = time.monotonic()
    try:
        recorder = Recorder(nvml_module())
        with recorder.installed():
            measured = record(settings, recorder, load=args.load, say=_say)
    except CaptureError as exc:
        return _refuse(str(exc))
    capture = build(recorder, measured, settings.procfs)
    masked: dict[str, int] = {}
    if args.mask:
        capture, masked = mask(capture)
    first = capture.gpus[0].identity.name if capture.gpus else None
    path = output or default_output(capture.node.driver_version, first)
    text = capture.dumps()
    path.write_text(text)
    print(
        f"wrote {path} ({len(text.encode()) / 1024:.0f} KiB): {len(capture.gpus)} GPU(s), "
        f"{' and '.join(capture.states)}, driver {capture.node.driver_version}, "
        f"in {time.monotonic() - started:.0f} s"
    )
    _report_masked(masked, args.mask)
    if measured.load_failed:
        print(f"warptd: no loaded state: {measured.load_failed}", file=sys.stderr)
        return 1
    return 0


def _refuse(why: str) -> int:
    print(f"warptd: {why}", file=sys.stderr)
    return 2


def _say(line: str) -> None:
    print(f"capture: {line}", file=sys.stderr, flush=True)


def _report_masked(masked: dict[str, int], asked: bool) -> None:
    if masked:
        said = ", ".join(f"{n} {_KINDS[kind]}{'s' if n > 1 else ''}" for kind, n in masked.items())
        print(f"masked, keeping their shape: {said} (--no-mask keeps them)")
    elif asked:
        print("nothing to mask")
    else:
        print("not masked (--no-mask): UUIDs, the hostname and process names are as the node gave them")
    print("Attach it to an issue to add this GPU and driver to warptd's corpus (docs/captures.md).")
