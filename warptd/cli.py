"""The ``warptd`` command: serve (default), list, sample."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog

from warptd import __version__
from warptd.backends.registry import Loaded, load_backends
from warptd.config import Settings, SettingsError, load_settings
from warptd.logs import configure_logging
from warptd.stress.torch_device import DTYPES

log = structlog.get_logger("warptd")


def _common(for_subcommand: bool) -> argparse.ArgumentParser:
    """Options valid before and after the subcommand; after it they must not reset what came before."""
    default = argparse.SUPPRESS if for_subcommand else None
    common = argparse.ArgumentParser(add_help=False, argument_default=default)
    common.add_argument("--config", type=Path, help="TOML config file (env WARPTD_CONFIG)")
    common.add_argument(
        "--backend",
        dest="backends",
        action="append",
        metavar="NAME",
        help="load only this backend (repeatable; env WARPTD_BACKENDS=nvidia,cpu); default all",
    )
    common.add_argument("--sysfs", type=Path, help="sysfs root (default /sys)")
    common.add_argument("--state-dir", type=Path, help="keep energy totals here across restarts")
    common.add_argument(
        "--web-config-file", type=Path, help="TLS/basic auth config (exporter-toolkit format)"
    )
    common.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    common.add_argument("--log-format", choices=["auto", "json", "console"])
    common.add_argument("--interval", type=float, help="seconds between samples (default 1)")
    common.add_argument("--sample-timeout", type=float, help="seconds a sample may take (default 2)")
    common.add_argument("--listen", help="HOST:PORT to serve on (default :9465)")
    common.add_argument(
        "--no-stress", dest="stress", action="store_const", const=False, help="turn the /stress endpoints off"
    )
    common.add_argument(
        "--stress-token", help="bearer token for POST/DELETE /stress (visible in ps: prefer the file or env)"
    )
    common.add_argument("--stress-token-file", type=Path, help="file holding the stress token")
    common.add_argument("--procfs", type=Path, help="procfs root (default /proc)")
    common.add_argument("--tpu-runtime-address", help="libtpu metrics HOST:PORT (default localhost:8431)")
    common.add_argument("--kubelet-socket", type=Path, help="kubelet PodResources socket")
    common.add_argument(
        "--no-pod-attribution",
        dest="pod_attribution",
        action="store_const",
        const=False,
        help="do not map devices to pods",
    )
    common.add_argument(
        "--pod-labels",
        action="store_const",
        const=True,
        help="add namespace/pod/container labels to the device series of allocated devices",
    )
    common.add_argument(
        "--processes", action="store_const", const=True, help="export per-process device memory (NVIDIA)"
    )
    common.add_argument(
        "--no-xid-events", dest="xid_events", action="store_const", const=False, help="ignore XID events"
    )
    return common


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="warptd",
        description="Accelerator telemetry daemon for Prometheus.",
        parents=[_common(for_subcommand=False)],
    )
    parser.add_argument("--version", action="version", version=f"warptd {__version__}")
    sub = parser.add_subparsers(dest="command")
    common = _common(for_subcommand=True)
    sub.add_parser("serve", parents=[common], help="run the daemon (default)")
    for name, text in (("list", "list the devices of every backend"), ("sample", "print one snapshot")):
        command = sub.add_parser(name, parents=[common], help=text)
        command.add_argument("--json", action="store_true", help="print JSON")
    stress = sub.add_parser("stress", parents=[common], help="run a stress test here and print its result")
    stress.add_argument(
        "--test", help="matmul, memory or tt_matmul (default matmul, tt_matmul on Tenstorrent chips)"
    )
    stress.add_argument("--device", help="BACKEND:INDEX (default: first accelerator, else cpu:0)")
    stress.add_argument("--duration", type=float, default=10.0, help="seconds (default 10)")
    stress.add_argument("--dtype", choices=DTYPES)
    stress.add_argument("--size", type=int, help="matmul: matrix side; memory: MiB per buffer")
    stress.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    """Every setting a flag was given for (flags are named after the settings they set)."""
    return load_settings(**{name: getattr(args, name, None) for name in Settings.model_fields})


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = _settings(args)
        configure_logging(settings.log_level, settings.log_format)
        loaded = load_backends(settings, strict=True)  # a backend named with --backend must load
    except SettingsError as exc:
        print(f"warptd: {exc}", file=sys.stderr)
        return 2
    command = args.command or "serve"
    if command == "list":
        return _list(loaded, args.json)
    if command == "sample":
        return _sample(settings, loaded, args.json)
    if command == "stress":
        from warptd.stress.cli import run_stress

        return run_stress(settings, loaded, args)
    return _serve(settings, loaded, lambda: _settings(args))


def _serve(settings: Settings, loaded: Loaded, reload: Callable[[], Settings]) -> int:
    from warptd.daemon import Daemon

    try:
        daemon = Daemon(settings, loaded, reload)
    except SettingsError as exc:
        print(f"warptd: {exc}", file=sys.stderr)
        loaded.shutdown()
        return 2
    except OSError as exc:
        print(f"warptd: cannot listen on {settings.listen}: {exc.strerror or exc}", file=sys.stderr)
        loaded.shutdown()
        return 1
    return daemon.run()


def _list(loaded: Loaded, as_json: bool) -> int:
    """Every device of every loaded backend, one vendor after another; skipped backends on stderr."""
    rows = [(b, info) for b in loaded.accelerators for info in b.list_devices()]
    loaded.shutdown()
    if as_json:
        devices = [
            {"backend": b.name, "source": getattr(b, "source", b.name), **info.model_dump(mode="json")}
            for b, info in rows
        ]
        print(json.dumps(devices, indent=2))
        return 0
    table = [("DEVICE", "SOURCE", "MODEL", "MEMORY", "PCI", "UUID")]
    for backend, info in rows:
        memory = f"{info.memory_total_bytes / 2**30:.1f} GiB" if info.memory_total_bytes else "-"
        table.append(
            (
                f"{backend.name}:{info.index}",
                getattr(backend, "source", backend.name),
                info.model[:44],
                memory,
                info.pci_bus_id or "-",
                info.uuid or "-",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    for name, reason in sorted(loaded.unavailable.items()):
        print(f"# {name}: {reason}", file=sys.stderr)
    return 0


def _sample(settings: Settings, loaded: Loaded, as_json: bool) -> int:
    from warptd.exporter.exposition import Exposition
    from warptd.sampling.sampler import Sampler
    from warptd.sampling.snapshot import Snapshot

    snapshot = Snapshot(stale_after=float("inf"))
    sampler = Sampler(settings, snapshot, loaded.accelerators, loaded.power)
    # Two passes: rates (utilization, power derived from energy counters) need a baseline.
    sampler.sample_all()
    time.sleep(min(settings.interval, 1.0))
    sampler.sample_all()
    if as_json:
        from warptd.sampling.export import snapshot_json

        print(json.dumps(snapshot_json(snapshot), indent=2))
    else:
        sys.stdout.write(Exposition(snapshot, node=settings.node).render(None, None)[0].decode())
    sampler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
