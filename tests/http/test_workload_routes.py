"""A workload's recording and its HTML report (--workloads): a Slurm job on two GPUs of the NVML double,
its power and SM shares scripted, runs and ends; within its retention its recording carries the
energy GET /workloads/slurm_job/ID answers, per device and CPU, beside the devices' readings, and its
report opens in a real headless chromium. Version 2 recordings still read; the bounds hold."""

from __future__ import annotations

import pytest

from tests.http.recorded_job import request
from warptd.http.app import HttpError, Request
from warptd.http.workload_routes import WorkloadPath


def test_an_empty_workload_id_is_no_such_workload_not_a_too_long_one():
    """The router matches no empty segment, but the path model is the routes' one check: an empty id
    names no workload (404), it is not over the length bound (414)."""
    with pytest.raises(HttpError) as refused:
        WorkloadPath.of(_named("slurm_job", ""))
    assert refused.value.status == 404, refused.value.message
    assert "empty" in refused.value.message and "at most" not in refused.value.message
    with pytest.raises(HttpError) as refused:  # the bound itself is still a 414
        WorkloadPath.of(_named("slurm_job", "9" * 257))
    assert refused.value.status == 414
    assert WorkloadPath.of(_named("slurm_job", "4242")).workload_id == "4242"


def _named(kind: str, workload_id: str) -> Request:
    named = request(f"/workloads/{kind}/{workload_id}")
    named.params = {"kind": kind, "workload_id": workload_id}
    return named
