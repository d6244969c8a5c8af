"""Deployment artefacts: Helm chart (real helm, Kubernetes schemas), systemd unit, Dockerfile, copies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_tool

ROOT = Path(__file__).parents[2]


CHART = ROOT / "helm" / "warptd"


ALL_ON = {
    "serviceMonitor.enabled": "true",
    "podMonitor.enabled": "true",
    "prometheusRule.enabled": "true",
    "grafanaDashboard.enabled": "true",
    "stress.enabled": "true",
    "stress.token": "t0ken",
    "runAsRoot": "true",
    "podAttribution.enabled": "false",
    "processes.enabled": "true",
    "workloads.enabled": "true",
    "runtimeClassName": "nvidia",
    "priorityClassName": "system-node-critical",
    "backends[0]": "nvidia",
    "backends[1]": "cpu",
}


OPTIONS = [
    {},
    *({k: v} for k, v in ALL_ON.items() if not k.startswith(("stress.token", "backends[1]"))),
    ALL_ON,
]


def helm() -> str:
    return os.environ.get("WARPTD_HELM") or require_tool("helm")


IMAGE = {"image.repository": "registry.example.com/warptd"}


def render(values: dict[str, str], expect_ok: bool = True, image: dict[str, str] = IMAGE) -> list[dict]:
    args = [helm(), "template", "rel", str(CHART), "--namespace", "monitoring", "--kube-version", "1.30.0"]
    for key, value in {**image, **values}.items():
        args += ["--set", f"{key}={value}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False, env=_helm_env())
    if not expect_ok:
        assert result.returncode != 0
        return [{"stderr": result.stderr}]
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _helm_env() -> dict[str, str]:
    home = Path(os.environ.get("TMPDIR", "/tmp")) / "warptd-helm-home"
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }


def by_kind(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


@pytest.mark.slow
def test_helm_lint_strict():
    for values in ({}, ALL_ON):
        args = [helm(), "lint", "--strict", str(CHART), "--kube-version", "1.30.0"]
        for key, value in {**IMAGE, **values}.items():
            args += ["--set", f"{key}={value}"]
        result = subprocess.run(
            args, capture_output=True, text=True, timeout=60, check=False, env=_helm_env()
        )
        assert result.returncode == 0 and "0 chart(s) failed" in result.stdout, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("values", OPTIONS, ids=lambda v: ",".join(v) or "defaults")
def test_rendered_manifests_validate_against_kubernetes_schemas(values):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for doc in render(values):
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            _check_prometheus_operator(doc)
            continue
        kubernetes_validate.validate(doc, "1.30.0", strict=True)


def _check_prometheus_operator(doc: dict) -> None:
    """No schema ships for these CRDs here: check their structure by hand."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["metadata"]["name"]
    spec = doc["spec"]
    if doc["kind"] in ("ServiceMonitor", "PodMonitor"):
        endpoints = spec["endpoints" if doc["kind"] == "ServiceMonitor" else "podMetricsEndpoints"]
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/name"] == "warptd"
        assert endpoints[0]["port"] == "metrics" and endpoints[0]["path"] == "/metrics"
        assert {
            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": "kubernetes_node",
        } in endpoints[0]["relabelings"]
    elif doc["kind"] == "PrometheusRule":
        shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
        assert spec == shipped  # the very rules promtool tests
    else:
        raise AssertionError(f"unexpected {doc['kind']}")


@pytest.mark.slow
def test_defaults_least_privilege_and_node_wiring():
    docs = render({})
    # NetworkPolicy: on by default since issue 23
    assert {d["kind"] for d in docs} == {"ServiceAccount", "Service", "DaemonSet", "Pod", "NetworkPolicy"}
    pod = by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65534
    assert pod["automountServiceAccountToken"] is False
    assert "hostPID" not in pod and "--processes" not in container["args"]
    sc = container["securityContext"]
    assert (
        sc["readOnlyRootFilesystem"]
        and not sc["allowPrivilegeEscalation"]
        and sc["capabilities"]["drop"] == ["ALL"]
    )
    assert {"name": "sys", "mountPath": "/host/sys", "readOnly": True} in container["volumeMounts"]
    socket_dir = "/var/lib/kubelet/pod-resources"  # pod attribution on by default, read-only
    assert {"name": "pod-resources", "mountPath": socket_dir, "readOnly": True} in container["volumeMounts"]
    assert {"name": "pod-resources", "hostPath": {"path": socket_dir, "type": "DirectoryOrCreate"}} in pod[
        "volumes"
    ]
    assert f"--kubelet-socket={socket_dir}/kubelet.sock" in container["args"]
    assert "--sysfs=/host/sys" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["WARPTD_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["WARPTD_STRESS"]["value"] == "false"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility,compute"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert container["resources"]["requests"] == {"cpu": "20m", "memory": "64Mi"}
    service = by_kind(docs, "Service")
    assert service["spec"]["clusterIP"] == "None"
    test_pod = by_kind(docs, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert test_pod["spec"]["containers"][0]["args"][-1] == "http://rel-warptd.monitoring.svc:9465/readyz"


@pytest.mark.slow
def test_all_options_on():
    docs = render(ALL_ON)
    pod = by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsUser"] == 0 and pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "system-node-critical"
    assert "--backend=nvidia" in container["args"] and "--backend=cpu" in container["args"]
    assert "--no-pod-attribution" in container["args"]
    assert pod["hostPID"] is True and "--processes" in container["args"]  # NVML lists only its namespace
    assert "pod-resources" not in json.dumps(pod["volumes"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WARPTD_STRESS"] == "true" and env["WARPTD_STRESS_TOKEN_FILE"] == "/etc/warptd/stress/token"
    secret = by_kind(docs, "Secret")
    assert secret["data"]["token"] == "dDBrZW4="  # base64 of t0ken, never in the pod spec
    assert "t0ken" not in json.dumps(by_kind(docs, "DaemonSet"))
    dashboard = by_kind(docs, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((ROOT / "deploy" / "grafana" / "warptd.json").read_text())
    assert json.loads(dashboard["data"]["warptd.json"]) == shipped


@pytest.mark.slow
def test_workloads_see_the_host_s_processes_and_cgroups_and_warptd_accepts_the_arguments(tmp_path):
    """workloads.enabled: the host pid namespace, --workloads over the host's cgroupfs under the /sys
    already mounted read-only, and arguments that warptd's own parser turns into these settings."""
    from warptd.arguments import build_parser
    from warptd.cli import _settings

    values = {
        "workloads.enabled": "true",
        "workloads.kinds[0]": "slurm_job",
        "workloads.kinds[1]": "user",
        "workloads.retentionSeconds": "120",
        "workloads.max": "50",
    }
    pod = by_kind(render(values), "DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["hostPID"] is True and "--processes" not in container["args"]
    assert {"name": "sys", "mountPath": "/host/sys", "readOnly": True} in container["volumeMounts"]
    settings = _settings(build_parser().parse_args(container["args"]))
    assert settings.workloads and settings.cgroupfs == Path("/host/sys/fs/cgroup")
    assert settings.workload_kinds == ["slurm_job", "user"]
    assert (settings.workload_retention, settings.workload_max) == (120.0, 50)
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # NVIDIA, AMD: no capability
    device_files = {**values, "workloads.deviceFiles": "true", "runAsRoot": "true"}
    capabilities = by_kind(render(device_files), "DaemonSet")["spec"]["template"]["spec"]["containers"][0][
        "securityContext"
    ]["capabilities"]
    assert capabilities == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}  # the one capability, nothing else
    defaults = by_kind(render({"workloads.enabled": "true"}), "DaemonSet")["spec"]["template"]["spec"]
    assert _settings(build_parser().parse_args(defaults["containers"][0]["args"])).workload_kinds == [
        "slurm_job", "systemd_unit", "container", "user"
    ]  # fmt: skip


@pytest.mark.slow
def test_network_policy_lets_only_the_prometheus_namespace_and_the_helm_test_in():
    docs = render({})
    policy = by_kind(docs, "NetworkPolicy")["spec"]
    daemonset = by_kind(docs, "DaemonSet")["spec"]
    assert policy["podSelector"] == daemonset["selector"]  # exactly warptd's pods
    assert policy["policyTypes"] == ["Ingress"]  # all other ingress denied; egress untouched
    monitoring, helm_test = policy["ingress"]
    assert monitoring == {
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"port": 9465, "protocol": "TCP"}],
    }
    test_labels = by_kind(docs, "Pod")["metadata"]["labels"]
    selected = helm_test["from"][0]["podSelector"]["matchLabels"]
    assert selected.items() <= test_labels.items() and "warptd.io/helm-test" in selected
    assert not selected.items() <= daemonset["template"]["metadata"]["labels"].items()  # not warptd itself


@pytest.mark.slow
def test_network_policy_takes_the_peers_and_port_the_user_names_or_is_off():
    key = r"networkPolicy.from[0]"
    docs = render(
        {
            "port": "9500",
            rf"{key}.namespaceSelector.matchLabels.kubernetes\.io/metadata\.name": "prom",
            rf"{key}.podSelector.matchLabels.app\.kubernetes\.io/name": "prometheus",
            "networkPolicy.allowHelmTest": "false",
        }
    )
    (rule,) = by_kind(docs, "NetworkPolicy")["spec"]["ingress"]
    assert rule == {
        "from": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prom"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
            }
        ],
        "ports": [{"port": 9500, "protocol": "TCP"}],
    }
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(by_kind(docs, "NetworkPolicy"), "1.30.0", strict=True)
    assert not [d for d in render({"networkPolicy.enabled": "false"}) if d["kind"] == "NetworkPolicy"]


@pytest.mark.slow
def test_network_policy_without_peers_is_refused_never_open_to_all():
    stderr = render({"networkPolicy.from": "null"}, expect_ok=False)[0]["stderr"]
    assert "networkPolicy.from names no peer" in stderr
    stderr = render({"networkPolicy.from[0].everyone": "true"}, expect_ok=False)[0]["stderr"]
    assert "everyone" in stderr and "values don't meet the specifications of the schema" in stderr


@pytest.mark.slow
def test_existing_secret_is_used_and_no_secret_created():
    docs = render({"stress.enabled": "true", "stress.existingSecret": "my-token"})
    assert not [d for d in docs if d["kind"] == "Secret"]
    volumes = by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "stress-token", "secret": {"secretName": "my-token", "defaultMode": 0o440}} in volumes


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("port", "abc", "port"),
        ("port", "70000", "port"),
        ("logLevel", "loud", "logLevel"),
        ("interval", "-1", "interval"),
        ("backends[0]", "NVIDIA GPU", "backends"),
        ("serviceMonitor.interval", "15", "interval"),
        ("bogus", "1", "bogus"),
        ("image.pullPolicy", "Sometimes", "pullPolicy"),
        ("workloads.kinds[0]", "pod", "kinds"),
        ("workloads.max", "0", "max"),
    ],
)
def test_values_schema_rejects_bad_values(key, value, message):
    stderr = render({key: value}, expect_ok=False)[0]["stderr"]
    assert message in stderr and "values don't meet the specifications of the schema" in stderr


def _image(docs: list[dict]) -> str:
    return by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"]


@pytest.mark.slow
def test_the_chart_assumes_no_published_image():
    """No image is published: without image.repository the chart stops with what to do, instead of
    deploying pods that pull a registry path that does not exist."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == ""
    stderr = render({}, expect_ok=False, image={})[0]["stderr"]
    assert "image.repository is required: no warptd image is published" in stderr, stderr
    assert "--set image.repository=REGISTRY/warptd --set image.tag=TAG (docs/deploy.md)" in stderr


@pytest.mark.slow
def test_the_image_is_the_one_built():
    assert _image(render({})) == "registry.example.com/warptd:0.1.0"  # the chart's appVersion
    tagged = render({"image.repository": "localhost:5000/team/warptd", "image.tag": "0.1.0-stress"})
    assert _image(tagged) == "localhost:5000/team/warptd:0.1.0-stress"


@pytest.mark.slow
def test_the_documented_build_and_install_render():
    """docs/deploy.md's commands: the image its docker build tags is the one its helm install runs."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    block = text.split("## Kubernetes (Helm)", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    command = block.replace("\\\n", " ")
    built = command.split("docker build -t ", 1)[1].split()[0]
    install = next(line for line in command.splitlines() if line.startswith("helm install "))
    values = dict(pair.split("=", 1) for pair in install.split("--set ")[1:] for pair in [pair.strip()])
    assert _image(render(values, image={})) == built


@pytest.mark.slow
def test_alert_and_fleet_rules_and_configs_pass_promtool():
    promtool = require_tool("promtool")
    rules = ROOT / "deploy" / "prometheus"
    for args in (
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
        ["check", "rules", "fleet-rules.yml"],
        ["test", "rules", "fleet-rules.test.yml"],
        ["check", "config", "prometheus.yml"],
        ["check", "config", "agent.yml"],
    ):
        result = subprocess.run(
            [promtool, *args], cwd=rules, capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_systemd_unit_verifies_clean_and_is_hardened(tmp_path):
    analyze = require_tool("systemd-analyze")
    executable = shutil.which("warptd") or str(Path(sys.executable).parent / "warptd")
    unit = tmp_path / "warptd.service"
    # The one substitution: the installed path of the daemon on this machine.
    unit.write_text(
        (ROOT / "systemd" / "warptd.service").read_text().replace("/opt/warptd/bin/warptd", executable)
    )
    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", (
        result.stdout + result.stderr
    )
    result = subprocess.run(
        [analyze, "security", "--offline=true", "--threshold=25", str(unit)],  # exposure <= 2.5 of 10
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:]
    text = unit.read_text()
    for directive in (
        "Type=notify",
        "WatchdogSec=",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "DevicePolicy=closed",
        "DeviceAllow=/dev/nvidiactl rw",
        "EnvironmentFile=-/etc/default/warptd",
    ):
        assert directive in text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("drop_ins", "exposure", "lifted"),
    [
        (["workloads.conf"], "--threshold=20", "full access to process tree"),
        (["workloads.conf", "workloads-device-files.conf"], "--threshold=25", "Service has ptrace()"),
    ],
)
def test_the_workloads_drop_ins_verify_and_lift_only_what_they_name(tmp_path, drop_ins, exposure, lifted):
    """systemd/workloads.conf (ProtectProc) and, for device-file backends, workloads-device-files.conf
    (CAP_SYS_PTRACE) over the unit: verified clean, still hardened, each lifting what it says."""
    analyze = require_tool("systemd-analyze")
    executable = shutil.which("warptd") or str(Path(sys.executable).parent / "warptd")
    unit = tmp_path / "warptd.service"
    unit.write_text(
        (ROOT / "systemd" / "warptd.service").read_text().replace("/opt/warptd/bin/warptd", executable)
    )
    (tmp_path / "warptd.service.d").mkdir()
    for name in drop_ins:
        shutil.copy(ROOT / "systemd" / name, tmp_path / "warptd.service.d" / name)
    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", (
        result.stdout + result.stderr
    )
    result = subprocess.run(
        [analyze, "security", "--offline=true", exposure, str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:]
    assert lifted in result.stdout  # the drop-ins were read
    ptrace = any(line.startswith("✗") and "CAP_SYS_PTRACE" in line for line in result.stdout.splitlines())
    assert ptrace == ("workloads-device-files.conf" in drop_ins)  # the capability only where asked
    drop_in = (ROOT / "systemd" / "workloads.conf").read_text()
    assert "ProtectProc=default" in drop_in and "WARPTD_WORKLOADS=true" in drop_in


@pytest.mark.slow
def test_dockerfile_lints_clean():
    hadolint = require_tool("hadolint")
    result = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stdout == "", result.stdout


@pytest.mark.slow
def test_dockerfile_stage_commands_work_in_a_fresh_venv(tmp_path):
    """The build stage's commands, run here in a fresh venv (no container engine on this machine)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    wheel_cmd = "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ."
    extras = "warptd[nvidia,amd,gaudi,tenstorrent,tpu,kubernetes]"  # one image for every vendor
    install_cmd = f'/opt/warptd/bin/pip install --no-cache-dir --find-links /wheels "{extras}"'
    assert (
        wheel_cmd in dockerfile and "python -m venv /opt/warptd" in dockerfile and install_cmd in dockerfile
    )
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    run = lambda *a, **k: subprocess.run(a, check=True, capture_output=True, text=True, timeout=600, **k)  # noqa: E731
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-cache-dir",
        "--no-deps",
        "--wheel-dir",
        str(wheels),
        ".",
        cwd=ROOT,
    )
    run(sys.executable, "-m", "venv", str(venv))
    run(str(venv / "bin" / "pip"), "install", "--find-links", str(wheels), extras)
    assert run(str(venv / "bin" / "warptd"), "--version").stdout.strip() == "warptd 0.1.0"
    listed = json.loads(
        run(str(venv / "bin" / "warptd"), "--backend", "cpu", "--log-level", "error", "list", "--json").stdout
    )
    assert listed[0]["backend"] == "cpu"
    torch_free = run(
        str(venv / "bin" / "python"), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"
    )
    assert torch_free.stdout.strip() == "True"  # the default image target carries no torch
    # the chart turns pod attribution on: the image can speak to the kubelet
    run(str(venv / "bin" / "python"), "-c", "import warptd.k8s.podresources_pb2_grpc")


@pytest.mark.slow
def test_the_metric_families_values_become_flags_warptd_accepts():
    from warptd.arguments import build_parser
    from warptd.cli import _settings

    values = {
        "metrics.exclude[0]": "warptd_device_pcie_*",
        "metrics.exclude[1]": "warptd_device_[!p]*_bytes_total",
        "metrics.include[0]": "warptd_device_engine_active_ratio",
    }
    args = by_kind(render(values), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"]
    settings = _settings(build_parser().parse_args(args))
    assert settings.metrics_exclude == ["warptd_device_pcie_*", "warptd_device_[!p]*_bytes_total"]
    assert settings.metrics_include == ["warptd_device_engine_active_ratio"]
    assert not settings.metric_selection.wants("warptd_device_pcie_bytes_total")
    plain = by_kind(render({}), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(arg.startswith("--metrics-") for arg in plain)
    refused = render({"metrics.exclude[0]": "warptd device"}, expect_ok=False)[0]["stderr"]
    assert "metrics" in refused and "pattern" in refused


OTEL_KEYS = {
    "prometheus": {"api_server", "config", "target_allocator", "trim_metric_suffixes"},
    "memory_limiter": {
        "check_interval", "limit_mib", "spike_limit_mib", "limit_percentage", "spike_limit_percentage"
    },
    "batch": {
        "timeout", "send_batch_size", "send_batch_max_size", "metadata_keys", "metadata_cardinality_limit"
    },
    "prometheusremotewrite": {
        "add_metric_suffixes", "disable_scope_info", "external_labels", "http",
        "max_batch_request_parallelism", "max_batch_size_bytes", "namespace", "protobuf_message",
        "remote_write_queue",
        "resource_to_telemetry_conversion", "send_metadata", "target_info", "translation_strategy", "wal",
        "timeout", "retry_on_failure", "endpoint", "headers", "tls", "auth", "compression", "proxy_url",
    },
}  # fmt: skip


@pytest.mark.slow
def test_the_opentelemetry_collector_config_is_well_formed_and_scrapes_as_prometheus_would(tmp_path):
    config = yaml.safe_load((ROOT / "deploy" / "otel" / "collector.yml").read_text())
    assert set(config) <= {"receivers", "processors", "exporters", "extensions", "connectors", "service"}
    for section in ("receivers", "processors", "exporters"):
        for component, settings in config[section].items():
            kind = component.split("/", 1)[0]
            assert set(settings or {}) <= OTEL_KEYS[kind], (component, set(settings) - OTEL_KEYS[kind])
    pipelines = config["service"]["pipelines"]
    assert list(pipelines) == ["metrics"]
    for section in ("receivers", "processors", "exporters"):
        assert set(pipelines["metrics"][section]) <= set(config[section]), section
    assert pipelines["metrics"]["processors"][0] == "memory_limiter"  # first, as its docs ask
    scrape = config["receivers"]["prometheus/warptd"]["config"]
    assert [job["job_name"] for job in scrape["scrape_configs"]] == ["warptd"]  # the rules join on it
    prometheus_config = tmp_path / "prometheus.yml"  # in the collector's file, $$ is a literal $
    prometheus_config.write_text(yaml.safe_dump(scrape).replace("$$", "$"))
    result = subprocess.run(
        [require_tool("promtool"), "check", "config", str(prometheus_config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_helm_mounts_the_runtime_bundles_read_only_with_processes_and_pods():
    bundles = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
    pod = by_kind(render({"processes.enabled": "true"}), "DaemonSet")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts[bundles]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts[bundles]["name"]]["hostPath"]["path"] == bundles
    for off in ({}, {"processes.enabled": "true", "podAttribution.enabled": "false"}):
        pod = by_kind(render(off), "DaemonSet")["spec"]["template"]["spec"]
        assert bundles not in json.dumps(pod)
