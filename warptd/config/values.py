"""The forms a setting's value takes beyond pydantic's own, each checked once: lists (one comma-separated
string in the environment), sizes in bytes, ``HOST:PORT``, cgroup roots, window names, metric globs."""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BeforeValidator
from pydantic_settings import NoDecode

from warptd.metrics import dcgm
from warptd.metrics.selection import check_glob

#: A window name: also a label value of warptd_window_energy_joules_total.
WINDOW_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
#: What a workload can be (docs/workloads.md): the ``kind`` label of warptd_workload_energy_joules_total.
WorkloadKind = Literal["slurm_job", "systemd_unit", "container", "user"]
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = get_args(WorkloadKind)
#: Where slurmd puts jobs in the cgroup tree (docs/workloads.md): cgroup v2's scope (one per slurmd,
#: ``<node>_`` with several on a host) and cgroup v1's root in each hierarchy; ``*`` within an element.
SLURM_ROOTS = ("/system.slice/slurmstepd.scope", "/system.slice/*_slurmstepd.scope", "/slurm", "/slurm_*")
_CGROUP_ROOT = re.compile(r"(/[A-Za-z0-9_.:@*-]{1,255}){1,16}")


def _split(value: object) -> object:
    """One comma-separated string (how the environment gives a list) as its stripped, non-blank parts."""
    return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value


def _names(value: object) -> object:
    """Names, as a list or one comma-separated string: each stripped, blanks dropped; none is None."""
    value = value.split(",") if isinstance(value, str) else value
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()] or None
    return value


def _lowered(names: list[str] | None) -> list[str] | None:
    return [name.lower() for name in names] if names else names


def _globs(globs: list[str]) -> list[str]:
    return [check_glob(glob) for glob in globs]


def _window_names(names: list[str] | None) -> list[str] | None:
    if names is not None:
        if len(names) > 1000:
            raise ValueError("at most 1000 names")
        bad = [n for n in names if not WINDOW_NAME.fullmatch(n)]
        if bad:
            raise ValueError(f"not a window name: {bad[0]!r} (letters, digits, . _ : - ; 1-64)")
    return names


def _cgroup_roots(roots: list[str]) -> list[str]:
    for root in roots:
        elements = root.rstrip("/").split("/")
        if not _CGROUP_ROOT.fullmatch(root.rstrip("/")) or {".", ".."} & set(elements):
            raise ValueError(
                f"not a cgroup path: {root[:80]!r} (absolute, elements of letters, digits, _ . : @ * -)"
            )
    return roots


def _size(value: object) -> object:
    """``16MiB``, ``512KiB``, ``1GiB`` (binary units; ``M`` and ``MB`` read as ``MiB``) or bytes."""
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*", value, re.IGNORECASE)
        if match is None:
            raise ValueError(f"not a size: {value[:40]!r} (bytes, or a number with KiB, MiB or GiB)")
        number, unit = float(match[1]), match[2].upper()
        return int(number * 2 ** {"": 0, "K": 10, "M": 20, "G": 30}[unit])
    return value


def _host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError("expected HOST:PORT, e.g. ':9465' or '127.0.0.1:9465'")
    if not 0 <= int(port) <= 65535:  # 0: any free port, as the tests use
        raise ValueError(f"port out of range: {int(port)} (1-65535)")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError("an IPv6 host must be bracketed, e.g. '[::1]:9465'")
    return value


#: Bytes: ``16MiB``, ``512KiB``, ``1GiB`` or a number of bytes.
Size = Annotated[int, BeforeValidator(_size)]
#: Where to listen: ``HOST:PORT``, an empty host for every address, an IPv6 one bracketed.
HostPort = Annotated[str, AfterValidator(_host_port)]
#: Backends by name, lower-cased; none named is None (every available one).
BackendNames = Annotated[list[str] | None, NoDecode, BeforeValidator(_names), AfterValidator(_lowered)]
#: Window names whose energy gets a labelled series; none is None.
WindowNames = Annotated[list[str] | None, NoDecode, BeforeValidator(_names), AfterValidator(_window_names)]
#: Globs over metric family names, each matching at least one (metrics/selection.py).
Globs = Annotated[list[str], NoDecode, BeforeValidator(_split), AfterValidator(_globs)]
WorkloadKinds = Annotated[list[WorkloadKind], NoDecode, BeforeValidator(_split)]
#: Absolute cgroup paths, ``*`` within an element.
CgroupRoots = Annotated[list[str], NoDecode, BeforeValidator(_split), AfterValidator(_cgroup_roots)]
#: A dcgm-exporter release, or ``latest``.
Release = Annotated[str, AfterValidator(dcgm.check_release)]
