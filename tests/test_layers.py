"""The house's floors (docs/architecture.md): each package imports only packages on its floor or below.

Read from the source, lazy and TYPE_CHECKING imports included, so a cycle cannot hide in a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "warptd"

#: The floor of each top-level module or package, as docs/architecture.md draws them (0 = the ground).
FLOORS = {
    **dict.fromkeys(
        ("metrics", "models", "config", "errors", "files", "sysfs", "targets", "install", "logs", "systemd"),
        0,
    ),
    "backends": 1,
    "power": 2,
    "registry": 3,
    "events": 3,
    "sampling": 4,
    **dict.fromkeys(("exporter", "processes", "recording", "client"), 5),
    **dict.fromkeys(("k8s", "stress", "workloads"), 6),
    "http": 7,
    **dict.fromkeys(("daemon", "arguments", "doctor", "capture"), 8),
    **dict.fromkeys(("cli", "__main__"), 9),
}


def _top(module: str) -> str | None:
    """``warptd.backends.nvidia.gpu`` -> ``backends``; None for the package itself and for others."""
    parts = module.split(".")
    return parts[1] if parts[0] == "warptd" and len(parts) > 1 and parts[1] != "__version__" else None


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "warptd":  # from warptd import registry
                found += [(node.lineno, f"warptd.{alias.name}") for alias in node.names]
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def test_every_module_has_a_floor():
    tops = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in _modules()}
    assert tops <= set(FLOORS), f"give these a floor here and in docs/architecture.md: {tops - set(FLOORS)}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_up_a_floor(path):
    here = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    upward = [
        f"line {line}: {module} (floor {FLOORS[top]}) from {here} (floor {FLOORS[here]})"
        for line, module in _imports(path)
        if (top := _top(module)) is not None and top != here and FLOORS.get(top, 0) > FLOORS[here]
    ]
    assert not upward, "imports that run back up a floor:\n" + "\n".join(upward)


def test_the_floors_catch_an_import_that_runs_up(tmp_path):
    """The check itself: a backend importing the sampler is caught."""
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from warptd.sampling.counters import EnergyTracker\n")
    assert [_top(m) for _, m in _imports(module)] == ["sampling"]
    assert FLOORS["sampling"] > FLOORS["backends"]
