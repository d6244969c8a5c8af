"""warptd in a private cgroup namespace (a Kubernetes pod on cgroup v2): other processes' cgroup paths
climb above its root (``0::/../../..``), and their workloads' CPU time is found under the host's tree
once the namespace root is known. Fixture trees as the kernel shows them from inside such a pod."""

from __future__ import annotations

from tests.e2e.test_workloads import Node
from tests.processes.test_nvml import POD, in_a_pod
from warptd.workloads.cgroupns import absolute, climb, namespace_root


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
