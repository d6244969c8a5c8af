"""The stress job manager's refusals, as an API client and ``warptd stress`` read them (issue 39,
finding 19): a node without an accelerator has no default device, and a missing torch is named."""

from __future__ import annotations

import json

import pytest

from warptd.http.app import HttpError, Request, Router
from warptd.http.stress_routes import StressApi
from warptd.install import client_install_command, install_command
from warptd.stress import jobs
from warptd.stress.base import DeviceRef
from warptd.stress.job import StressError
from warptd.stress.jobs import JobManager

CPU = DeviceRef(backend="cpu", index=0, torch_device="cpu", is_accelerator=False)
GPU = DeviceRef(backend="nvidia", index=0, torch_device="cuda:0", is_accelerator=True)
NO_ACCELERATOR = "no accelerator on this node (warptd list --verbose says why each backend did not load)"


def test_without_an_accelerator_the_cpu_must_be_named():
    with pytest.raises(StressError) as refused:
        JobManager([CPU], {}).parameters(None, None, 1.0, None, None)
    assert refused.value.status == 422
    assert str(refused.value) == f'{NO_ACCELERATOR}; to stress the CPU, name it: "device": "cpu:0"'
    with pytest.raises(StressError) as refused:
        JobManager([CPU], {}, in_daemon=False).parameters(None, None, 1.0, None, None)
    assert str(refused.value) == f"{NO_ACCELERATOR}; to stress the CPU, name it: --device cpu:0"
    assert JobManager([CPU], {}).parameters("matmul", "cpu:0", 1.0, None, None).device == "cpu:0"  # named
    assert JobManager([CPU, GPU], {}).parameters(None, None, 1.0, None, None).device == "nvidia:0"


def test_an_empty_post_stress_on_a_node_without_an_accelerator_is_422_saying_so():
    router = Router()
    StressApi.add(router, JobManager([CPU], {}), token=lambda: None)
    request = Request("POST", "/stress", {}, {"host": "localhost"}, b"", client="127.0.0.1")
    with pytest.raises(HttpError) as refused:
        router.dispatch(request)
    assert refused.value.status == 422
    assert NO_ACCELERATOR in str(refused.value) and '"device": "cpu:0"' in str(refused.value)


def test_without_torch_warptd_stress_gives_the_command_and_no_daemons_log(monkeypatch):
    monkeypatch.setattr(jobs, "torch_installed", lambda: False)
    here = JobManager([CPU], {}, in_daemon=False)
    with pytest.raises(StressError) as refused:
        here.start(here.parameters("matmul", "cpu:0", 1.0, None, None))
    assert refused.value.status == 503
    assert (
        str(refused.value) == f"torch is not installed: install the stress extra: {install_command('stress')}"
    )
    assert "daemon" not in str(refused.value)
    daemon = JobManager([CPU], {})
    with pytest.raises(StressError) as refused:
        daemon.start(daemon.parameters("matmul", "cpu:0", 1.0, None, None))
    assert f"({client_install_command('stress')}); the daemon's log has the exact command" in str(
        refused.value
    )
    assert json.dumps(str(refused.value))  # what the API answers: no path of the server's


def test_a_node_with_no_device_at_all_is_told_so_without_a_device_to_name():
    with pytest.raises(StressError) as refused:
        JobManager([], {}).parameters(None, None, 1.0, None, None)
    assert str(refused.value) == NO_ACCELERATOR
