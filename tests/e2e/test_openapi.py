"""/openapi.json describes the API, and schemathesis against the live daemon finds no 5xx and no
response that breaks the schema. Stress tests are swapped for a worker that fails at once, so the
generated POSTs exercise the whole path (validation, 409, spawn, monitor) without minutes of load."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import require_tool
from tests.e2e.test_workloads import Node
from tests.helpers import http, wait_until
from warptd.config import load_settings
from warptd.daemon import Daemon
from warptd.http import openapi
from warptd.workloads.placement import CpuCgroup

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def _schemathesis() -> str:
    pytest.importorskip("schemathesis")
    return require_tool("schemathesis")


#: A Slurm job of the fixture node (cgroup v2 layout), found in its cgroup tree for its CPU share.
JOB = CpuCgroup("/system.slice/slurmstepd.scope/job_5000")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    node = Node(tmp_path_factory.mktemp("node"))
    node.cpu(JOB, 0)
    node.add(2000, f"0::{JOB.path}/step_0/user/task_0\n", uid=1002)
    settings = load_settings(
        listen="127.0.0.1:0",
        backends=["cpu"],
        interval=0.2,
        sysfs=tmp_path_factory.mktemp("sys"),
        stress_max_duration=2,
        log_level="error",
        workloads=True,
        procfs=node.proc.root,
        cgroupfs=node.cgroupfs,
    )
    daemon = Daemon(settings)
    daemon.stress.catalog.tests.update(
        {"matmul": "tests.stress_faults:RaisingTest", "memory": "tests.stress_faults:RaisingTest"}
    )
    daemon.start()
    assert wait_until(lambda: http(daemon.port, "GET", "/readyz")[0] == 200)
    yield daemon
    daemon.stop()


@pytest.mark.slow
def test_schemathesis_finds_no_5xx_and_no_schema_violation(live, tmp_path):
    """The schemathesis CLI (its pytest plugin does not support pytest 9) against the live daemon."""
    result = subprocess.run(
        [
            _schemathesis(),
            "run",
            f"http://127.0.0.1:{live.port}/openapi.json",
            "--checks",
            CHECKS,
            "--max-examples",
            "25",
            "--seed",
            "1",
            "--generation-deterministic",
            "--request-timeout",
            "10",
            "--report",
            "junit",
            "--report-dir",
            str(tmp_path),
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "passed" in result.stdout.lower()
    assert http(live.port, "GET", "/healthz")[0] == 200


@pytest.mark.slow
def test_openapi_document_lists_every_route(live):
    """Every endpoint the daemon routes, as docs/http.md's groups declare them, and at least these."""
    status, _, body = http(live.port, "GET", "/openapi.json")
    document = json.loads(body)
    assert status == 200 and document["openapi"].startswith("3.1")
    routed, declared = live.router.endpoints, openapi.endpoints()
    assert len(routed) == len(declared) and all(endpoint in declared for endpoint in routed)
    assert set(document["paths"]) == {endpoint.path for endpoint in live.router.endpoints}
    assert set(document["paths"]) >= {
        "/metrics",
        "/healthz",
        "/readyz",
        "/devices",
        "/",
        "/openapi.json",
        "/stress",
        "/stress/{job_id}",
        "/stress/{job_id}/report",
        "/windows",
        "/windows/{window_id}",
        "/windows/{window_id}/end",
        "/windows/{window_id}/renew",
        "/windows/{window_id}/report",
        "/workloads",
        "/workloads/{kind}/{workload_id}",
        "/workloads/{kind}/{workload_id}/recording",
    }
    request = document["paths"]["/stress"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert request == {"$ref": "#/components/schemas/StressRequest"}
    assert document["components"]["schemas"]["StressRequest"]["additionalProperties"] is False
    schemas = document["components"]["schemas"]
    assert schemas["JobStatus"]["enum"] == ["starting", "running", "succeeded", "failed", "cancelled"]
    devices = document["paths"]["/devices"]["get"]["responses"]["200"]["content"]["application/json"]
    assert devices["schema"] == {"$ref": "#/components/schemas/DevicesView"}
    assert "power_watts" in schemas["LatestReading"]["properties"]
    assert schemas["WindowRequest"]["additionalProperties"] is False
    window = document["paths"]["/windows"]["post"]["responses"]["201"]["content"]["application/json"]
    assert window["schema"] == {"$ref": "#/components/schemas/Recording"}


@pytest.mark.slow
def test_workload_answers_match_the_document(live):
    """The listing and one Slurm job, as served, validate against the schemas /openapi.json names."""
    jsonschema = pytest.importorskip("jsonschema")
    document = json.loads(http(live.port, "GET", "/openapi.json")[2])

    def schema_of(path: str, code: str = "200") -> dict:
        ref = document["paths"][path]["get"]["responses"][code]["content"]["application/json"]["schema"]
        return {**ref, "components": document["components"]}

    assert wait_until(lambda: json.loads(http(live.port, "GET", "/workloads")[2])["workloads"])
    listing = json.loads(http(live.port, "GET", "/workloads")[2])
    jsonschema.validate(listing, schema_of("/workloads"))
    status, _, body = http(live.port, "GET", "/workloads/slurm_job/5000")
    assert status == 200 and json.loads(body)["id"] == "5000"
    jsonschema.validate(json.loads(body), schema_of("/workloads/{kind}/{workload_id}"))
    status, _, body = http(live.port, "GET", "/workloads/slurm_job/" + "9" * 300)
    assert status == 414
    jsonschema.validate(json.loads(body), schema_of("/workloads/{kind}/{workload_id}", "414"))
    parameters = document["paths"]["/workloads/{kind}/{workload_id}"]["parameters"]
    assert parameters[0]["schema"]["enum"] == ["slurm_job", "systemd_unit", "container", "user"]
