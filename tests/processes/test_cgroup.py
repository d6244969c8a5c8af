"""A pod only where the kubelet puts it: a user who names their own cgroups after a pod (its UID and
container id are readable by everyone in /proc/PID/cgroup) gets no pod label and no part of its energy."""

from __future__ import annotations

import pytest

from tests.e2e import test_processes as e2e_processes
from tests.e2e.test_processes import CID, GIB, HOST, SYSTEMD_V2, UID, Proc
from tests.helpers import value
from tests.processes.test_collector import CGROUPFS_V1, CID2, METRIC, UID2
from tests.processes.test_collector import scrape as scrape_processes
from warptd.processes.cgroup import (
    NONE,
    UNRESOLVED,
    Attribution,
    CgroupPath,
    CgroupResolver,
    kube_pod,
    parse_cgroup,
    read_attribution,
    split_path,
    start_time,
)
from warptd.processes.nvml import ProcessMonitor

proc = e2e_processes.proc  # an empty procfs to add processes to, a fixture

SLICE_UID = UID.replace("-", "_")
MANAGER = "/user.slice/user-1000.slice/user@1000.service"
POD_SLICE = f"kubepods-burstable-pod{SLICE_UID}.slice"
KUBELET_SYSTEMD = f"kubepods.slice/kubepods-burstable.slice/{POD_SLICE}/cri-containerd-{CID}.scope"


@pytest.mark.parametrize(
    "path",
    [
        f"{MANAGER}/app.slice/{KUBELET_SYSTEMD}",
        f"{MANAGER}/{KUBELET_SYSTEMD}",
        f"{MANAGER}/app.slice/kubepods/burstable/pod{UID}/{CID}",
        f"{MANAGER}/app.slice/pod{UID}/{CID}",
        f"/system.slice/docker-{'b' * 64}.scope/{KUBELET_SYSTEMD}",  # a kubelet inside a container (kind)
        f"/system.slice/ci.service/kubepods/pod{UID}/{CID}",
        f"/../../..{MANAGER}/app.slice/{KUBELET_SYSTEMD}",  # the same, seen from warptd's pod
        f"/../../..{MANAGER}/app.slice/kubepods/pod{UID}/{CID}",
        f"/pod{UID}/{CID}",  # the cgroupfs driver's chain starts at /kubepods
        f"/burstable/pod{UID}/{CID}",
        f"/kubepods.slice/../kubepods.slice/{POD_SLICE}/crio-{CID}.scope",  # never written
    ],
)
def test_a_pod_named_anywhere_else_is_no_pod(path):
    for text in (f"0::{path}\n", f"4:memory:{path}\n1:name=systemd:/user.slice\n"):
        assert parse_cgroup(text) == NONE, text


@pytest.mark.parametrize(
    ("path", "pod"),
    [
        (f"/{KUBELET_SYSTEMD}", (UID, 2)),
        (f"/kubelet.slice/kubelet-kubepods.slice/kubelet-{POD_SLICE}/x", (UID, 2)),  # --cgroup-root
        (f"/kubepods/pod{UID}/{CID}", (UID, 1)),
        (f"/kubepods/besteffort/pod{UID}", (UID, 2)),
        (f"/../../{POD_SLICE}/crio-{CID}.scope", (UID, 0)),  # partway down
        (f"/../besteffort/pod{UID}/{CID}", (UID, 1)),
        (f"/../pod{UID}/{CID}", (UID, 0)),
        (f"/kubepods/besteffort/guaranteed/pod{UID}", None),  # no such QoS class
        (f"/kubepods.slice/{POD_SLICE}/extra.slice/crio-{CID}.scope", None),  # not the last slice
    ],
)  # fmt: skip
def test_where_the_kubelet_puts_pods(path, pod):
    parsed = split_path(path)
    assert parsed is not None and kube_pod(parsed) == pod


def test_split_path_keeps_only_a_leading_climb():
    assert split_path("/../../a.slice/b") == CgroupPath(2, ("a.slice", "b"))
    assert split_path("/a.slice/../b") is None and split_path("/a/./b") is None
    assert split_path("/") == CgroupPath(0, ())


def test_the_kubelet_s_own_still_count():
    assert parse_cgroup(f"0::/{KUBELET_SYSTEMD}\n") == Attribution(UID, CID)


def test_a_line_added_by_a_newline_in_a_name_names_no_pod(tmp_path):
    """On cgroup v1, kernels before June 2021 let a cgroup be renamed to a name holding a newline, and
    its processes' /proc/PID/cgroup then held whatever line followed it."""
    proc = tmp_path / "proc"
    host = "3:memory:/\n1:name=systemd:/init.scope\n"
    added = f"9:name=x:/kubepods/pod{UID}/{CID}\n"  # a fresh hierarchy, so that nothing is listed twice
    for pid, text in ((1, host), (7, f"3:memory:/user.slice\n1:name=systemd:{MANAGER}/y\n{added}")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(text)
    assert read_attribution(proc, 7) == NONE
    assert read_attribution(proc, 1) == NONE
    assert parse_cgroup(f"3:memory:/kubepods/pod{UID}/{CID}\n3:memory:/x\n") == NONE  # a hierarchy twice
    assert parse_cgroup(f"3:memory:/x\n4:memory:/kubepods/pod{UID}/{CID}\n") == NONE  # a controller twice


@pytest.mark.parametrize(
    ("cgroup", "expected"),
    [
        (SYSTEMD_V2, (UID, CID)),
        (CGROUPFS_V1, (UID2, CID2)),
        (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n", (UID, CID)),
        (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID2}.slice/docker-{CID}.scope",
            (UID2, CID),
        ),
        (
            f"0::/../kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
            (UID, CID),
        ),
        (f"0::/../pod{UID}/{CID}\n", (UID, CID)),  # cgroupfs driver seen from a private cgroup namespace
        (f"0::/kubepods/burstable/pod{'c' * 32}/{CID}\n", ("c" * 32, CID)),  # a static pod's config hash
        (f"0::/kubepods/burstable/pod{UID}\n", (UID, "")),  # in the pod's cgroup, not a container's
        (f"12:memory:/kubepods/pod{UID}/{CID}\n0::/\n", (UID, CID)),  # hybrid v1 + v2
        (f"0::/system.slice/docker-{CID}.scope\n", ("", "")),  # a container outside Kubernetes
        (f"0::/machine.slice/libpod-pod-{CID}.slice\n", ("", "")),
        (HOST, ("", "")),
        ("", ("", "")),
    ],
)
def test_parse_cgroup(cgroup, expected):
    assert parse_cgroup(cgroup) == Attribution(*expected)


def test_start_time_survives_a_comm_with_spaces_and_parentheses(proc):
    proc.add(7, HOST, started=987654, comm="a) b (c")
    assert start_time(proc.root, 7) == 987654
    assert start_time(proc.root, 8) is None


#: A unit name that is not UTF-8, in a user's delegated subtree (where the user may create it).
NOT_UTF8 = b"0::/user.slice/user-1000.slice/user@1000.service/app.slice/\xff\xfe.service\n"


# -- one cgroup name that is not UTF-8 ------------------------------------------------------------
def test_a_cgroup_name_that_is_not_utf8_leaves_the_other_processes_attributed(fake_nvml, tmp_path):
    proc = Proc(tmp_path / "proc")
    proc.add(1001, SYSTEMD_V2)
    proc.add(1002, "")
    (proc.root / "1002" / "cgroup").write_bytes(NOT_UTF8)
    fake_nvml.gpus[0].processes = [(1001, 2 * GIB), (1002, GIB)]
    monitor = ProcessMonitor(proc.root)
    try:
        monitor.poll()  # raised UnicodeDecodeError at every poll: no process series for any GPU
        samples = scrape_processes(monitor)
    finally:
        monitor.stop()
    assert value(samples, METRIC, pid="1001", pod_uid=UID) == 2 * GIB
    assert value(samples, METRIC, pid="1002", pod_uid="") == GIB  # its own pod: unknown
    assert read_attribution(proc.root, 1002) is None  # unreadable, as a process gone
    assert CgroupResolver(proc.root).resolve(1002) == UNRESOLVED


def test_the_resolver_tells_outside_any_pod_from_unresolved(proc):
    """A readable cgroup naming no pod is outside any pod; a gone or unreadable process is unresolved."""
    proc.add(1003, HOST)
    proc.add(1001, SYSTEMD_V2)
    resolver = CgroupResolver(proc.root)
    assert resolver.resolve(1003) == NONE and resolver.resolve(1003).resolved
    assert resolver.resolve(1001) == Attribution(UID, CID)
    assert resolver.resolve(1009) == UNRESOLVED and not resolver.resolve(1009).resolved
    proc.add(1003, HOST, started=5000)  # the pid reused by a new process whose cgroup is unreadable
    (proc.root / "1003" / "cgroup").unlink()
    assert resolver.resolve(1003) == UNRESOLVED
