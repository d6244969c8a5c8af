"""Finds every vendor package (built-in and plugins) and loads every backend of theirs that is available.

A built-in vendor is a package under ``warptd/backends/`` whose ``__init__`` declares ``VENDOR``
(:class:`~warptd.backends.vendor.Vendor`); a plugin declares its own under the ``warptd.vendors``
entry-point group (or a single backend class under ``warptd.backends`` / ``warptd.power_backends``).
Not first-wins: a node with NVIDIA GPUs and a CPU gets both. Vendor SDKs are imported only when their
backend is constructed, so a missing SDK is one log line, never an ImportError.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal

import structlog

from warptd import backends as backends_package
from warptd.backends.base import AcceleratorBackend
from warptd.backends.capabilities import ReleasesDevices
from warptd.backends.vendor import Accelerator, NodeRule, Vendor
from warptd.config import SettingsError
from warptd.models import device_kind, pci_address
from warptd.power.base import PowerBackend
from warptd.power.devices import companion_power
from warptd.targets import resolve_target

if TYPE_CHECKING:
    from warptd.config import Settings

log = structlog.get_logger("warptd.registry")

Kind = Literal["accelerator", "power"]
#: The plugins' vendor declarations (an entry point naming a :class:`Vendor`).
VENDORS = "warptd.vendors"
#: A plugin's single backend class, of either kind.
GROUPS: dict[Kind, str] = {"accelerator": "warptd.backends", "power": "warptd.power_backends"}
#: What capability a vendor's accelerator may declare, by the :class:`Accelerator` field naming it.
Capability = Literal["processes", "events"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A backend that could be loaded: its name, kind and ``module:Class`` target (None: a power backend
    over its companion's devices), where it was declared, and what was declared with it."""

    name: str
    kind: Kind
    target: str | None
    origin: str = "builtin"
    companion: str | None = None
    declared: Accelerator | None = None


@dataclass(slots=True)
class Loaded:
    """The backends that came up, why the others did not, and what their vendors declared."""

    accelerators: list[AcceleratorBackend] = field(default_factory=list)
    power: list[PowerBackend] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    #: Each loaded accelerator backend's declaration, by name.
    declared: dict[str, Accelerator] = field(default_factory=dict)

    def shutdown(self) -> None:
        for backend in [*self.accelerators, *self.power]:
            backend.shutdown()

    def wired(self, capability: Capability) -> Iterator[tuple[AcceleratorBackend, Callable[..., Any]]]:
        """Each loaded accelerator backend whose vendor declares ``capability``, with its function."""
        for backend in self.accelerators:
            declared = self.declared.get(backend.name)
            target = getattr(declared, capability) if declared is not None else None
            if target is not None:
                yield backend, resolve_target(target)  # type: ignore[misc]

    def node_rules(self) -> dict[str, NodeRule]:
        """The device-node rule of each loaded accelerator backend that declares one, by name."""
        return {
            backend.name: rule
            for backend in self.accelerators
            if (declared := self.declared.get(backend.name)) and (rule := declared.device_nodes)
        }


def builtin_vendors() -> list[Vendor]:
    """The ``VENDOR`` of every package under ``warptd/backends/``, by rank, then package name."""
    found = []
    for module in sorted(pkgutil.iter_modules(backends_package.__path__), key=lambda m: m.name):
        if module.ispkg:
            vendor = getattr(importlib.import_module(f"warptd.backends.{module.name}"), "VENDOR", None)
            if isinstance(vendor, Vendor):
                found.append(vendor)
    return sorted(found, key=lambda vendor: vendor.rank)


def node_rules() -> dict[str, NodeRule]:
    """The device-node rule each built-in vendor declares, by backend name."""
    vendors = builtin_vendors()
    return {a.name: a.device_nodes for v in vendors for a in v.accelerators if a.device_nodes is not None}


def _candidates(vendor: Vendor, origin: str) -> Iterator[Candidate]:
    for accelerator in vendor.accelerators:
        yield Candidate(accelerator.name, "accelerator", accelerator.target, origin, declared=accelerator)
    for power in vendor.power:
        yield Candidate(power.name, "power", power.target, origin, companion=power.companion)


def discover() -> list[Candidate]:
    """Built-ins first, then plugins: vendors (``warptd.vendors``), then single backend classes."""
    found: dict[str, Candidate] = {}

    def add(candidate: Candidate) -> None:
        kept = found.get(candidate.name)
        if kept is None:
            found[candidate.name] = candidate
        elif kept.target != candidate.target:
            log.warning(
                "backend_name_taken", backend=candidate.name, ignored=candidate.target, kept=kept.target
            )

    for vendor in builtin_vendors():
        for candidate in _candidates(vendor, "builtin"):
            add(candidate)
    for ep in entry_points(group=VENDORS):
        origin = ep.dist.name if ep.dist else "unknown"
        try:
            vendor = ep.load()
            if not isinstance(vendor, Vendor):
                raise TypeError(f"{ep.value} is not a Vendor")
        except Exception as exc:
            log.warning("vendor_unavailable", vendor=ep.name, target=ep.value, reason=str(exc) or repr(exc))
            continue
        for candidate in _candidates(vendor, origin):
            add(candidate)
    for kind, group in GROUPS.items():
        for ep in entry_points(group=group):
            name = ep.name.lower()
            add(Candidate(name, kind, ep.value, origin=ep.dist.name if ep.dist else "unknown"))
    return list(found.values())


def check_selection(candidates: list[Candidate], names: list[str] | None) -> None:
    """Unknown names in a ``--backend`` selection are a start-up error, not a silent no-op."""
    known = {c.name for c in candidates}
    unknown = sorted(set(names or ()) - known)
    if unknown:
        names_text, known_text = ", ".join(unknown), ", ".join(sorted(known))
        raise SettingsError(f"invalid setting backends: unknown backend(s) {names_text}; known: {known_text}")


def _wanted(candidate: Candidate, companion: str | None, names: list[str] | None) -> bool:
    """Selected by name, or a power backend whose companion accelerator backend is selected."""
    return not names or candidate.name in names or companion in names


class BackendLoadError(SettingsError):
    """A backend the user named (``--backend``, ``WARPTD_BACKENDS``) cannot load: the start stops."""


def _backend_class(candidate: Candidate, candidates: dict[str, Candidate]) -> type:
    """The class of ``candidate``: its target's, or a power backend over its companion's devices."""
    if candidate.target is None:
        companion = candidates.get(candidate.companion or "")
        if companion is None or companion.target is None:
            raise LookupError(f"no accelerator backend {candidate.companion} to measure")
        return companion_power(candidate.name, resolve_target(companion.target))  # type: ignore[arg-type]
    base: type = AcceleratorBackend if candidate.kind == "accelerator" else PowerBackend
    cls = resolve_target(candidate.target)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{candidate.target} is not a {base.__name__}")
    return cls


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
    by_name = {candidate.name: candidate for candidate in candidates}
    for candidate in candidates:
        if settings.backends and candidate.kind == "accelerator" and candidate.name not in settings.backends:
            continue  # not selected; skip before importing anything
        if candidate.companion and not _wanted(candidate, candidate.companion, settings.backends):
            continue
        try:
            cls = _backend_class(candidate, by_name)
            companion = candidate.companion or getattr(cls, "companion", None)
            if not _wanted(candidate, companion, settings.backends):
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
        if isinstance(backend, AcceleratorBackend):
            loaded.accelerators.append(backend)
            if candidate.declared is not None:
                loaded.declared[backend.name] = candidate.declared
        else:
            if candidate.companion:
                backend.companion = candidate.companion
            loaded.power.append(backend)
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
    fallbacks = [b for b in loaded.accelerators if isinstance(b, ReleasesDevices)]
    if not fallbacks:
        return  # nothing to release: no device listing at start
    served = {
        address: backend.name
        for backend in loaded.accelerators
        if not isinstance(backend, ReleasesDevices)
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
