"""Install hints that work for how this warptd was installed: from a checkout, a wheel file or an index."""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import warptd

_NAME = "warptd"


def install_command(extra: str) -> str:
    """The command adding ``extra`` here, e.g. ``.venv/bin/pip install '/src/warptd[amd]'``."""
    return f"{_pip()} install '{requirement(extra)}'"


def import_failure(package: str, module: str, extra: str, error: ImportError) -> str:
    """Why an SDK did not import, and the fix: ``package`` (importing as ``module``) not installed
    (install ``extra``), or installed without one of its own dependencies (install that one)."""
    failed = (error.name or "").partition(".")[0]
    if failed == module or not _installed(package):
        return f"{package} is not installed: {install_command(extra)}"
    missing = [r for r in _requirements(package) if not _installed(_distribution(r))]
    if not missing:
        return f"{package} is installed, but importing {failed} failed ({error}): {install_command(extra)}"
    names = ", ".join(_distribution(r) for r in missing)
    fix = f"{_pip()} install " + " ".join(f"'{r}'" for r in missing)
    return f"{package} is installed, but not its dependency {names} (no module {failed}): {fix}"


#: The distribution name a requirement starts with (PEP 508).
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _distribution(requirement: str) -> str:
    match = _REQUIREMENT_NAME.match(requirement)
    return match.group(0) if match else requirement


def _installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def _requirements(package: str) -> list[str]:
    """The requirements ``package`` declares without a condition (not an extra's, not a platform's)."""
    return [r.strip() for r in metadata.requires(package) or () if ";" not in r]


def client_install_command(extra: str) -> str:
    """The command adding ``extra``, for someone elsewhere (an API client): plain ``pip`` and the
    requirement with no path or URL of this host in it, e.g. ``pip install 'warptd[stress]'``."""
    return f"pip install '{requirement(extra, private=False)}'"


def requirement(extra: str, *, private: bool = True) -> str:
    """What pip must be given: the checkout or wheel this copy came from, else the package name.
    ``private=False`` names where it came from (``<checkout>``, ``<wheel or directory>``, ``<url>``)
    instead of this host's paths and URLs, which may hold credentials."""
    tree = _checkout()
    if tree is not None:
        return f"{tree if private else '<checkout>'}[{extra}]"
    origin = _direct_url(private)
    if origin is not None:
        return origin.replace("{extra}", extra)
    return f"{_NAME}[{extra}]"


def _pip() -> str:
    """The pip of the running interpreter (a venv's ``bin/pip``), never whichever ``pip`` is on PATH."""
    beside = Path(sys.executable).with_name("pip")
    return str(beside) if beside.is_file() else f"{sys.executable} -m pip"


def _checkout() -> Path | None:
    """The source tree the running package is imported from (an editable install, or ``python -m``)."""
    root = Path(warptd.__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    try:
        declared = f'name = "{_NAME}"' in pyproject.read_text()
    except OSError:
        return None
    return root if declared else None


def _direct_url(private: bool = True) -> str | None:
    """PEP 610: where pip installed this distribution from, when not from an index ({extra} left
    open); ``private=False``: which kind of place, not the place."""
    try:
        text = metadata.distribution(_NAME).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        origin = json.loads(text)
        url = str(origin["url"])
    except (ValueError, KeyError, TypeError):
        return None
    parsed = urlparse(url)
    if parsed.scheme == "file":  # a local directory or wheel file
        return f"{unquote(parsed.path) if private else '<wheel or directory>'}[{{extra}}]"
    if isinstance(origin.get("vcs_info"), dict):
        url = f"{origin['vcs_info'].get('vcs', 'git')}+{url}"
    return f"{_NAME}[{{extra}}] @ {url if private else '<url>'}"
