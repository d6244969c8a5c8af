"""Installed as a newcomer does, the wheel alone serves NVIDIA GPUs; install hints fit the install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.doubles.nvml import FakeNvml
from warptd import install
from warptd.backends.tpu.backend import TpuBackend
from warptd.errors import BackendUnavailableError
from warptd.install import client_install_command, install_command, requirement

ROOT = Path(__file__).parents[1]
#: Not part of a source distribution; a stale build/ would leak removed modules into the wheel.
UNSHIPPED = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*cache*")


class _Dist:
    def __init__(self, direct_url: dict | None) -> None:
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return None if self.direct_url is None else json.dumps(self.direct_url)


@pytest.fixture
def installed_as(monkeypatch):
    """Pretend warptd was installed (not imported from a checkout) with this PEP 610 direct_url."""

    def pretend(direct_url: dict | None) -> None:
        monkeypatch.setattr(install, "_checkout", lambda: None)
        monkeypatch.setattr(metadata, "distribution", lambda name: _Dist(direct_url))

    return pretend


def test_running_from_a_checkout_names_the_checkout():
    assert requirement("amd") == f"{ROOT.resolve()}[amd]"


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        (None, "warptd[amd]"),  # from an index
        ({"url": "file:///home/me/warptd", "dir_info": {}}, "/home/me/warptd[amd]"),  # pip install .
        (
            {"url": "file:///tmp/w/warptd-0.1.0-py3-none-any.whl", "archive_info": {}},
            "/tmp/w/warptd-0.1.0-py3-none-any.whl[amd]",
        ),
        (
            {"url": "https://example.com/warptd-0.1.0.tar.gz", "archive_info": {}},
            "warptd[amd] @ https://example.com/warptd-0.1.0.tar.gz",
        ),
        (
            {"url": "https://github.com/acme/warptd", "vcs_info": {"vcs": "git", "commit_id": "ab12"}},
            "warptd[amd] @ git+https://github.com/acme/warptd",
        ),
        ({"url": "file:///srv/my%20warptd", "dir_info": {"editable": True}}, "/srv/my warptd[amd]"),
    ],
)
def test_requirement_follows_pep_610(installed_as, direct_url, expected):
    installed_as(direct_url)
    assert requirement("amd") == expected


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        (None, "pip install 'warptd[stress]'"),
        ({"url": "file:///home/me/warptd", "dir_info": {}}, "pip install '<wheel or directory>[stress]'"),
        (
            {"url": "https://user:t0ken@example.com/warptd-0.1.0.tar.gz", "archive_info": {}},
            "pip install 'warptd[stress] @ <url>'",
        ),
        (
            {"url": "https://github.com/acme/warptd", "vcs_info": {"vcs": "git", "commit_id": "ab12"}},
            "pip install 'warptd[stress] @ <url>'",
        ),
    ],
)
def test_a_clients_command_names_the_extra_and_nothing_of_this_host(installed_as, direct_url, expected):
    """What an API client is told (POST /stress without torch): plain pip, no path or URL of ours."""
    installed_as(direct_url)
    assert client_install_command("stress") == expected


def test_not_installed_at_all_names_the_package(monkeypatch):
    def missing(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(install, "_checkout", lambda: None)
    monkeypatch.setattr(metadata, "distribution", missing)
    assert requirement("tpu") == "warptd[tpu]"


def test_the_command_uses_this_interpreters_pip(monkeypatch, tmp_path):
    """Not whichever pip is on PATH: the README's venv is never activated."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    monkeypatch.setattr(sys, "executable", str(python))
    (python.parent / "pip").touch()
    assert install_command("web") == f"{python.parent / 'pip'} install '{ROOT.resolve()}[web]'"
    (python.parent / "pip").unlink()
    assert install_command("web").startswith(f"{python} -m pip install '")


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    assert result.returncode == 0, f"{command}: {result.stderr[-2000:]}"
    return result


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh venv with the wheel built from this tree, no extras; dependencies from the index."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=UNSHIPPED)
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(source)],
        timeout=180,
    )
    (wheel,) = (work / "dist").glob("warptd-*.whl")
    _run([sys.executable, "-m", "venv", str(work / "venv")], timeout=120)
    pip = [str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, str(wheel)], timeout=420)
    return work / "venv"


def _clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH into this checkout: the venv's own warptd runs."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"), **extra}


@pytest.mark.slow
def test_the_wheel_without_extras_lists_nvidia_gpus(wheel_venv, tmp_path):
    """The README's first command on an NVIDIA node: the GPUs are served, not just the CPU."""
    fake = FakeNvml(gpus=2, keep=True)
    try:
        result = _run(
            [str(wheel_venv / "bin" / "warptd"), "list", "--sysfs", str(tmp_path)],
            env=_clean_env(**fake.environment()),
            cwd=tmp_path,
            timeout=60,
        )
    finally:
        fake.close()
        Path(fake.path).unlink(missing_ok=True)
    devices = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert devices[:2] == ["nvidia:0", "nvidia:1"], result.stdout + result.stderr


@pytest.mark.slow
def test_a_hint_from_a_wheel_install_names_the_wheel(wheel_venv, tmp_path):
    """A named vendor backend without its extra stops the start with a pip command that works here."""
    result = subprocess.run(
        [str(wheel_venv / "bin" / "warptd"), "list", "--backend", "amd", "--sysfs", str(tmp_path)],
        env=_clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2
    (wheel,) = (wheel_venv.parent / "dist").glob("warptd-*.whl")
    pip = wheel_venv / "bin" / "pip"
    assert result.stderr.strip().endswith(f"amdsmi is not installed: {pip} install '{wheel}[amd]'"), (
        result.stderr
    )


@pytest.mark.rig("tpu", doubles=["three_chips", "runtime"])
@pytest.mark.parametrize("missing", ["grpcio", "tpu-info"])
def test_a_missing_sdk_or_a_missing_dependency_of_it_is_named_as_it_is(settings, monkeypatch, missing):
    """tpu-info installed without grpcio is not "tpu-info is not installed": the note names the
    dependency that is missing and the command that adds it."""
    from importlib import metadata

    from warptd.install import install_command

    monkeypatch.setitem(sys.modules, "grpc" if missing == "grpcio" else "tpu_info", None)
    installed = metadata.distribution

    def distribution(name: str) -> metadata.Distribution:
        if name == missing:
            raise metadata.PackageNotFoundError(name)
        return installed(name)

    monkeypatch.setattr(metadata, "distribution", distribution)
    with pytest.raises(BackendUnavailableError) as unavailable:
        TpuBackend(settings)
    if missing == "tpu-info":
        assert str(unavailable.value) == f"tpu-info is not installed: {install_command('tpu')}"
        return
    grpcio = next(r for r in metadata.requires("tpu-info") if r.startswith("grpcio"))
    pip = install_command("tpu").partition(" install ")[0]
    assert str(unavailable.value) == (
        f"tpu-info is installed, but not its dependency grpcio (no module grpc): {pip} install '{grpcio}'"
    )
