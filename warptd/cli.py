"""The ``warptd`` command: serve (default), list, sample, stress, profile, report, workload, doctor,
capture."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence

from warptd.arguments import build_parser
from warptd.config import Settings, SettingsError, load_settings
from warptd.logs import configure_logging, get_logger  # imports structlog first: without rich (logs.py)
from warptd.registry import Loaded, load_backends

log = get_logger("warptd")


def _settings(args: argparse.Namespace) -> Settings:
    """Every setting a flag was given for (flags are named after the settings they set)."""
    return load_settings(**{name: getattr(args, name, None) for name in Settings.model_fields})


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = args.command or "serve"
    if command == "report":  # a file in, a file out: no settings, no backends
        from warptd.recording.cli import run_report

        return run_report(args.recording, args.output, args.carbon_intensity, args.energy_price)
    if command == "workload":  # asks the daemon: no settings, no backends
        from warptd.workloads.command import run_workload

        return run_workload(args.kind, args.workload_id, args.url, args.json, args.report)
    return _with_settings(command, args)


def _with_settings(command: str, args: argparse.Namespace) -> int:
    """Every command but ``report``: settings first, then backends unless a daemon records for it."""
    try:
        settings = _settings(args)
        configure_logging(_log_level(settings, command), settings.log_format)
        if command == "profile":  # loads backends only when no daemon records for it
            from warptd.recording.profile import run_profile

            return run_profile(settings, args)
        if command == "capture":  # loads the NVML backends itself, with its recorder in place
            from warptd.capture.command import run_capture

            return run_capture(settings, args)
        loaded = load_backends(settings, strict=True)  # a backend named with --backend must load
    except SettingsError as exc:
        print(f"warptd: {exc}", file=sys.stderr)
        return 2
    return _with_backends(command, args, settings, loaded)


def _with_backends(command: str, args: argparse.Namespace, settings: Settings, loaded: Loaded) -> int:
    """The commands that run over the loaded backends."""
    if command == "list":
        return _list(loaded, args.json, args.verbose)
    if command == "sample":
        return _sample(settings, loaded, args.json)
    if command == "doctor":
        from warptd.doctor.examine import run_doctor

        return run_doctor(settings, loaded, args.json, args.quick)
    if command == "stress":
        from warptd.stress.cli import run_stress

        return run_stress(settings, loaded, args)
    return _serve(settings, loaded, lambda: _settings(args))


def _log_level(settings: Settings, command: str) -> str:
    """The daemon logs at info; a one-shot command prints its result alone unless asked for logs."""
    if command == "serve" or "log_level" in settings.model_fields_set:
        return settings.log_level
    return "warning"


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


def _list(loaded: Loaded, as_json: bool, verbose: bool) -> int:
    """Every device of every loaded backend, one vendor after another; with ``verbose``, why the
    other backends did not load (on stderr)."""
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
    sys.stdout.flush()  # the table, whole, before the notes: a pipe's buffer would put them first
    for names, reason in unavailable_lines(loaded.unavailable) if verbose else ():
        print(f"# {names}: {reason}", file=sys.stderr)
    return 0


def unavailable_lines(unavailable: dict[str, str]) -> list[tuple[str, str]]:
    """Why backends did not load, one line per reason: backends over one SDK (``nvidia``,
    ``nvidia_mig`` and ``nvml``) say theirs once, together."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in sorted(unavailable.items()):
        by_reason.setdefault(reason, []).append(name)
    return [(", ".join(names), reason) for reason, names in by_reason.items()]


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
    else:  # the devices and backends; this one-second process's own process_* would mean nothing
        exposition = Exposition(snapshot, node=settings.node, process_metrics=False)
        sys.stdout.write(exposition.render(None, None)[0].decode())
    sampler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
