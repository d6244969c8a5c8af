"""Every reader of a node's file that a local user can shape, on a fixture node, and a call to one bounded
in time (a FIFO would block it for ever)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.test_processes import SYSTEMD_V2, UID, Proc
from tests.helpers import settings_error
from warptd.config import Settings, load_settings
from warptd.http.webconfig import load_web_config
from warptd.k8s.containers import read_owner
from warptd.processes.cgroup import UNRESOLVED, Attribution, CgroupResolver, read_attribution
from warptd.processes.device_nodes import _devname
from warptd.sampling.state import CounterState, _boot_id
from warptd.workloads.cgroupns import namespace_root
from warptd.workloads.cpu import cgroup_usage_us, node_cpu_us
from warptd.workloads.placement import CpuCgroup, read_placement

PROMPT_S = 5.0


def unblock(fifo: Path) -> None:
    """End a read still waiting on ``fifo`` (the check failed): a writer opens it and closes."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


READERS: dict[str, tuple[str, Callable[[Path], object], object]] = {
    "process cgroup": ("proc/7/cgroup", lambda root: read_attribution(root / "proc", 7), None),
    "process stat": ("proc/7/stat", lambda root: CgroupResolver(root / "proc").resolve(7), UNRESOLVED),
    "workload placement": ("proc/7/cgroup", lambda root: read_placement(root / "proc", 7), None),
    "cgroup cpu.stat": (
        "cgroup/a.service/cpu.stat",
        lambda root: cgroup_usage_us(root / "cgroup", CpuCgroup("/a.service")),
        None,
    ),
    "node /proc/stat": ("proc/stat", lambda root: node_cpu_us(root / "proc"), None),
    "namespace root": ("proc/1/cgroup", lambda root: namespace_root(root / "proc", root / "cgroup"), "/"),
    "token file": (
        "token",
        lambda root: settings_error(lambda: Settings(stress_token_file=root / "token").stress_token_value()),
        "invalid setting stress_token_file: not a regular file",
    ),
    "config file": (
        "warptd.toml",
        lambda root: settings_error(lambda: load_settings(config=root / "warptd.toml")),
        "invalid setting config: not a regular file {root}/warptd.toml",
    ),
    "web config file": (
        "web.yml",
        lambda root: settings_error(lambda: load_web_config(root / "web.yml")),
        "invalid setting web_config_file: not a regular file: {root}/web.yml",
    ),
    "TLS certificate": (
        "tls.crt",
        lambda root: settings_error(lambda: load_web_config(tls_config(root))),
        "invalid setting web_config_file: TLS: [Errno 22] not a regular file: '{root}/tls.crt'",
    ),
    "state file": ("state/counters.json", lambda root: CounterState(root / "state").saved, {}),
    "boot id": ("proc/sys/kernel/random/boot_id", lambda root: _boot_id(root / "proc"), ""),
    "container bundle": (
        f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{'c' * 64}/config.json",
        lambda root: read_owner((root,), Attribution(UID, "c" * 64)),
        None,
    ),
    "device uevent": (
        "sys/class/accel/accel0/uevent",
        lambda root: _devname(root / "sys/class/accel/accel0/uevent"),
        None,
    ),
}


def tls_config(root: Path) -> Path:
    """A web config naming ``root``'s tls.crt and tls.key (a key that is there)."""
    (root / "tls.key").write_text("not a key\n")
    web = root / "tls.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {root}/tls.crt\n  key_file: {root}/tls.key\n")
    return web


def bounded(call: Callable[[], object], fifo: Path | None = None) -> object:
    """``call()``'s result, which must come within PROMPT_S (a read blocked on a FIFO never does)."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(PROMPT_S)
    if thread.is_alive() and fifo is not None:
        unblock(fifo)
        thread.join(PROMPT_S)
        pytest.fail(f"blocked on the FIFO {fifo.name} for {PROMPT_S} s")
    assert result, "the read raised (see the thread's traceback above)"
    return result[0]


@pytest.fixture
def node_root(tmp_path) -> Iterator[Path]:
    """A node's files: a process 7 whose /proc entries are readable until a case replaces one."""
    proc = Proc(tmp_path / "proc")
    proc.add(7, SYSTEMD_V2)
    yield tmp_path
