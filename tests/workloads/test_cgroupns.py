"""warptd in a private cgroup namespace (a Kubernetes pod on cgroup v2): other processes' cgroup paths
climb above its root (``0::/../../..``), and their workloads' CPU time is found under the host's tree
once the namespace root is known. Fixture trees as the kernel shows them from inside such a pod."""

from __future__ import annotations

import os

from tests.e2e.test_workloads import Node
from warptd.workloads.cgroupns import absolute, climb, namespace_root

POD = "/kubepods.slice/kubepods-pod0a.slice/cri-containerd-" + "a" * 64 + ".scope"


def in_a_pod(node: Node, pid: int = os.getpid()) -> None:
    """The fixture node seen from inside warptd's pod: host init climbs three levels, and the pod's
    cgroup (one of several at that depth) lists warptd's host pid."""
    init = node.proc.root / "1"
    init.mkdir(parents=True, exist_ok=True)
    (init / "cgroup").write_text("0::/../../..\n")
    for name in (POD, POD.replace("0a", "0c").replace("a" * 64, "c" * 64)):
        (node.cgroupfs / name.lstrip("/")).mkdir(parents=True)
        (node.cgroupfs / name.lstrip("/") / "cgroup.procs").write_text("1\n12\n")
    (node.cgroupfs / POD.lstrip("/") / "cgroup.procs").write_text(f"1\n{pid}\n")
    (node.cgroupfs / "system.slice/cron.service").mkdir(parents=True)


def test_climb_and_absolute():
    assert climb("/../../..") == 3 and climb("/system.slice/x.service") == 0 and climb("/") == 0
    assert (
        absolute("/../../kubepods-pod0b.slice/c.scope", POD) == "/kubepods.slice/kubepods-pod0b.slice/c.scope"
    )
    assert absolute("/../../../system.slice/x.service", POD) == "/system.slice/x.service"
    assert absolute("/../../../../x", POD) is None  # above the host's root: the root is not this one
    assert absolute("/../system.slice/../../x", POD) is None  # ".." past the leading run: no guess


def test_the_namespace_root_is_the_cgroup_at_init_s_depth_that_lists_warptd(tmp_path):
    node = Node(tmp_path)
    assert namespace_root(node.proc.root, node.cgroupfs) == "/"  # host namespace: no /proc/1/cgroup climb
    in_a_pod(node)
    assert namespace_root(node.proc.root, node.cgroupfs) == POD
    # listed nowhere: where it is is unknown, how deep it is is not
    assert namespace_root(node.proc.root, node.cgroupfs, pid=999_999) == "/../../.."
