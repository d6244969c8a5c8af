"""Discovers every non-abstract StressTest: ``warptd/stress/*.py`` plus ``warptd.stress_tests`` plugins."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from importlib.metadata import entry_points

import structlog

import warptd.stress
from warptd.stress.base import StressTest
from warptd.targets import resolve_target

log = structlog.get_logger("warptd.stress")
GROUP = "warptd.stress_tests"


def _target(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def discover_tests() -> dict[str, str]:
    """Test name -> ``module:Class`` target. Importing these modules never imports torch."""
    found: dict[str, str] = {}
    for module_info in pkgutil.iter_modules(warptd.stress.__path__):
        module = importlib.import_module(f"warptd.stress.{module_info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, StressTest)
                and not inspect.isabstract(cls)
                and cls.__module__ == module.__name__
            ):
                found[cls.name] = _target(cls)
    for ep in entry_points(group=GROUP):
        if ep.name in found:
            log.warning("stress_test_name_taken", test=ep.name, ignored=ep.value)
            continue
        found[ep.name] = ep.value
    return found


def resolve_test(target: str) -> type[StressTest]:
    cls = resolve_target(target)
    if not (isinstance(cls, type) and issubclass(cls, StressTest)):
        raise TypeError(f"{target} is not a StressTest")
    return cls
