"""Finds every backend (built-in and entry-point plugins) and loads all that are available.

Not first-wins: a node with NVIDIA GPUs and a CPU gets both. Vendor SDKs are imported only
when their backend is constructed, so a missing SDK is one log line, never an ImportError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Literal

import structlog

from warptd.backends.base import AcceleratorBackend
from warptd.config import SettingsError
from warptd.models import device_kind, pci_address
from warptd.power.base import PowerBackend
from warptd.targets import resolve_target

if TYPE_CHECKING:
    from warptd.config import Settings

log = structlog.get_logger("warptd.registry")

Kind = Literal["accelerator", "power"]
GROUPS: dict[Kind, str] = {"accelerator": "warptd.backends", "power": "warptd.power_backends"}
BUILTIN: dict[Kind, dict[str, str]] = {
    "accelerator": {
        "nvidia": "warptd.backends.nvidia.backend:NvidiaBackend",
        "nvidia_mig": "warptd.backends.nvidia.mig:NvidiaMigBackend",
        "amd": "warptd.backends.amd.backend:AmdBackend",
        "gaudi": "warptd.backends.gaudi:GaudiBackend",
        "tenstorrent": "warptd.backends.tenstorrent:TenstorrentBackend",
        "tpu": "warptd.backends.tpu:TpuBackend",
        "hwmon": "warptd.backends.hwmon:HwmonBackend",
        "cpu": "warptd.backends.cpu:CpuBackend",  # last: the accelerators come first in lists
    },
    "power": {
        "nvml": "warptd.power.nvml:NvmlPowerBackend",
        "amdsmi": "warptd.power.amdsmi:AmdsmiPowerBackend",
        "hlml": "warptd.power.hlml:HlmlPowerBackend",
        "rapl": "warptd.power.rapl:RaplPowerBackend",
    },
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A backend that could be loaded: its name, kind and ``module:Class`` target."""

    name: str
    kind: Kind
    target: str
    origin: str = "builtin"


@dataclass(slots=True)
class Loaded:
    """The backends that came up, and why the others did not."""

    accelerators: list[AcceleratorBackend] = field(default_factory=list)
    power: list[PowerBackend] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)

    def shutdown(self) -> None:
        for backend in [*self.accelerators, *self.power]:
            backend.shutdown()


def discover() -> list[Candidate]:
    """Built-ins first, then plugins from the ``warptd.backends`` / ``warptd.power_backends`` groups."""
    found: dict[str, Candidate] = {}
    for kind, builtins in BUILTIN.items():
        for name, target in builtins.items():
            found[name] = Candidate(name, kind, target)
    for kind, group in GROUPS.items():
        for ep in entry_points(group=group):
            name = ep.name.lower()
            if name in found:
                if found[name].target != ep.value:
                    log.warning("backend_name_taken", backend=name, ignored=ep.value, kept=found[name].target)
                continue
            found[name] = Candidate(name, kind, ep.value, origin=ep.dist.name if ep.dist else "unknown")
    return list(found.values())


def check_selection(candidates: list[Candidate], names: list[str] | None) -> None:
    """Unknown names in a ``--backend`` selection are a start-up error, not a silent no-op."""
    known = {c.name for c in candidates}
    unknown = sorted(set(names or ()) - known)
    if unknown:
        names_text, known_text = ", ".join(unknown), ", ".join(sorted(known))
        raise SettingsError(f"invalid setting backends: unknown backend(s) {names_text}; known: {known_text}")


def _wanted(candidate: Candidate, cls: type, names: list[str] | None) -> bool:
    """Selected by name, or a power backend whose companion accelerator backend is selected."""
    return not names or candidate.name in names or getattr(cls, "companion", None) in names


class BackendLoadError(SettingsError):
    """A backend the user named (``--backend``, ``WARPTD_BACKENDS``) cannot load: the start stops."""


def load_backends(settings: Settings, *, strict: bool = False) -> Loaded:
    """Construct every selected backend; each failure is logged with its reason and skipped.

    ``strict`` (the CLI): a failure of a backend named in ``settings.backends`` raises
    :class:`BackendLoadError` instead, after releasing what did load. Backends loaded by default
    and companions loaded with a named backend (``nvidia`` -> ``nvml``) are still skipped.
    """
    loaded = Loaded()
    named_failures: list[str] = []
    origins: dict[str, str] = {}
    candidates = discover()
    check_selection(candidates, settings.backends)
    for candidate in candidates:
        if settings.backends and candidate.kind == "accelerator" and candidate.name not in settings.backends:
            continue  # not selected; skip before importing anything
        base: type = AcceleratorBackend if candidate.kind == "accelerator" else PowerBackend
        try:
            cls = resolve_target(candidate.target)
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"{candidate.target} is not a {base.__name__}")
            if not _wanted(candidate, cls, settings.backends):
                continue
            backend = cls(settings)
            if not backend.is_available():
                backend.shutdown()
                raise LookupError("no devices found")
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
            loaded.unavailable[candidate.name] = reason
            named = candidate.name in (settings.backends or ())
            # Only a backend the user asked for is news; the others are every node's normal state.
            (log.info if named else log.debug)(
                "backend_unavailable", backend=candidate.name, kind=candidate.kind, reason=reason
            )
            if strict and named:
                named_failures.append(f"backend {candidate.name} cannot load: {' '.join(reason.split())}")
            continue
        backend.name = candidate.name
        (loaded.accelerators if candidate.kind == "accelerator" else loaded.power).append(backend)
        origins[backend.name] = candidate.origin
    if named_failures:
        loaded.shutdown()
        raise BackendLoadError("; ".join(named_failures))
    deduplicate(loaded)
    _log_loaded(loaded, origins)
    return loaded


def _log_loaded(loaded: Loaded, origins: dict[str, str]) -> None:
    """One line per backend that came up: accelerators with their device count (after deduplication)."""
    for backend in [*loaded.accelerators, *loaded.power]:
        fields: dict[str, object] = {"kind": "power"}
        if isinstance(backend, AcceleratorBackend):
            fields = {"kind": device_kind(backend.is_accelerator), "devices": backend.get_device_count()}
        if origins[backend.name] != "builtin":
            fields["origin"] = origins[backend.name]
        log.info("backend_loaded", backend=backend.name, **fields)


def deduplicate(loaded: Loaded) -> None:
    """One physical device, one exporter: a fallback (sysfs) backend releases what an SDK backend serves."""
    fallbacks = [b for b in loaded.accelerators if b.fallback]
    if not fallbacks:
        return  # nothing to release: no device listing at start
    served = {
        address: backend.name
        for backend in loaded.accelerators
        if not backend.fallback
        for info in backend.list_devices()
        if (address := pci_address(info.pci_bus_id))
    }
    for backend in fallbacks:
        released = backend.release_devices(set(served))
        for address in sorted(released):
            log.debug(
                "device_deduplicated", pci_bus_id=address, kept_by=served[address], released_by=backend.name
            )
        if backend.get_device_count() == 0:
            backend.shutdown()
            loaded.accelerators.remove(backend)
            loaded.unavailable[backend.name] = "every device is served by an SDK backend"
            log.debug("backend_unavailable", backend=backend.name, reason=loaded.unavailable[backend.name])
