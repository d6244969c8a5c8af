"""Who owns a process's workload: each kind only where its owner's manager puts it, the outermost owner
owning everything below it. Every name a local user can give their own delegated cgroups
(``user@UID.service``'s subtree) is tried as an attacker would, in cgroup v1 and v2 lines."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests import hostile
from tests.e2e.test_workloads import CID, DOCKER, SERVICE, SLURM_V1, SLURM_V2, USER
from tests.helpers import http
from tests.hostile import READERS, bounded
from tests.processes.test_nvml import JOB_TASK
from tests.test_cli import deep_toml
from tests.workloads.test_energy import JUPYTER, JUPYTER_UNIT, USER_1000, USER_SERVICE, V1_JOB, V2_JOB
from warptd.config import SettingsError, load_settings
from warptd.workloads.placement import (
    MAX_ID_CHARS,
    CpuCgroup,
    Placement,
    WorkloadKey,
    place,
    read_placement,
    slurm_roots,
    user_name,
)

node_root = hostile.node_root  # a node's files with a process 7, a fixture

ROOTS = "a" * 64  # root's container, whose id every user can read in /proc/PID/cgroup
OTHER = "b" * 64
POD_UID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
POD_SLICE = f"kubepods-pod{POD_UID.replace('-', '_')}.slice"
BESTEFFORT_QOS = "kubepods-besteffort.slice"
BESTEFFORT = f"kubepods-besteffort-pod{POD_UID.replace('-', '_')}.slice"
USER_SLICE = "/user.slice/user-1000.slice"
MANAGER = f"{USER_SLICE}/user@1000.service"
ALICE = ("user", user_name(1000))
ALICES = "user@1000.service/"  # her own units' and containers' ids start so


def placed(cgroup: str, uid: int | None = 1000, **options) -> tuple[str, str]:
    return tuple(vars(place(cgroup, uid, **options).key).values())  # type: ignore[return-value]


# -- where each manager puts what it runs: these are theirs -----------------------------------------
@pytest.mark.parametrize(
    ("path", "uid", "workload", "cpu"),
    [
        # container runtimes, systemd drivers: their scopes past the top's slices
        (f"/system.slice/docker-{ROOTS}.scope", 0, ("container", ROOTS), None),
        (f"/system.slice/nerdctl-{ROOTS}.scope", 0, ("container", ROOTS), None),
        (f"/gpu.slice/docker-{ROOTS}.scope", 0, ("container", ROOTS), None),  # a --cgroup-parent slice
        (  # rootful Podman, its processes one level down
            f"/machine.slice/libpod-{ROOTS}.scope/container", 0, ("container", ROOTS),
            f"/machine.slice/libpod-{ROOTS}.scope",
        ),
        (f"/machine.slice/machine-libpod_pod_0123.slice/libpod-{ROOTS}.scope", 0, ("container", ROOTS), None),
        # the kubelet's QoS and pod slices (systemd driver); guaranteed pods have no QoS slice
        (f"/kubepods.slice/{BESTEFFORT_QOS}/{BESTEFFORT}/crio-{ROOTS}.scope", 0, ("container", ROOTS), None),
        (f"/kubepods.slice/{POD_SLICE}/cri-containerd-{ROOTS}.scope", 0, ("container", ROOTS), None),
        # cgroupfs drivers, from the top
        (f"/docker/{ROOTS}", 0, ("container", ROOTS), None),
        (f"/k8s.io/{ROOTS}", 0, ("container", ROOTS), None),  # containerd's namespace
        (f"/libpod_parent/libpod-{ROOTS}", 0, ("container", ROOTS), None),
        (f"/kubepods/burstable/pod{POD_UID}/{ROOTS}", 0, ("container", ROOTS), None),
        (f"/kubepods/pod{POD_UID}/{ROOTS}", 0, ("container", ROOTS), None),
        # system units past the top's slices, a template's instance in its own slice
        ("/system.slice/ollama.service", 998, ("systemd_unit", "ollama.service"), None),
        ("/system.slice/system-ollama.slice/ollama@0.service", 9, ("systemd_unit", "ollama@0.service"), None),
        # a user's own: rootless Podman and Docker, and user units, under the user's manager
        (
            f"{MANAGER}/user.slice/libpod-{ROOTS}.scope/container", 1000, ("container", ALICES + ROOTS),
            f"{MANAGER}/user.slice/libpod-{ROOTS}.scope",
        ),
        (f"{MANAGER}/user.slice/docker-{ROOTS}.scope", 1000, ("container", ALICES + ROOTS), None),
        (f"{MANAGER}/app.slice/jupyter.service", 1000, ("systemd_unit", ALICES + "jupyter.service"), None),
        # the user: sessions, the manager itself, a unit's own scopes
        (f"{USER_SLICE}/session-3.scope", 1000, ALICE, USER_SLICE),
        (f"{MANAGER}/init.scope", 1000, ALICE, USER_SLICE),
        (f"{MANAGER}/app.slice/app-firefox-42.scope", 1000, ALICE, USER_SLICE),
    ],
)  # fmt: skip
def test_each_manager_s_place(path, uid, workload, cpu):
    expected = Placement(WorkloadKey(*workload), uid, None, CpuCgroup(cpu or path))
    assert place(f"0::{path}\n", uid) == expected


# -- names a user gives their own cgroups: never anyone else's ---------------------------------------
@pytest.mark.parametrize(
    ("below_manager", "workload"),
    [
        # root's container id (every user can read it) as a runtime's scope, or a bare directory
        (f"app.slice/docker-{ROOTS}.scope", ("container", ALICES + ROOTS)),
        (f"app.slice/{ROOTS}", ("container", ALICES + ROOTS)),  # issue 39's case
        (f"app.slice/foo.scope/docker-{ROOTS}.scope", ALICE),
        # the system's slices and units, and the kubelet's, by name
        ("system.slice/ollama.service", ("systemd_unit", ALICES + "ollama.service")),
        ("app.slice/ollama.service/system.slice/sshd.service", ("systemd_unit", ALICES + "ollama.service")),
        (f"kubepods.slice/{POD_SLICE}/cri-containerd-{ROOTS}.scope", ("container", ALICES + ROOTS)),
        (f"kubepods/besteffort/pod{POD_UID}/{ROOTS}", ALICE),
        (f"docker/{ROOTS}", ALICE),
        ("slurm/uid_0/job_7", ALICE),
        ("system.slice/slurmstepd.scope/job_7/step_0", ALICE),
        # another user's slice and manager, root's manager
        ("user.slice/user-1001.slice/user@1001.service/app.slice/jupyter.service", ALICE),
        ("app.slice/user@0.service/app.slice/x.service", ALICE),
        # names systemd never gives a unit: look-alikes, controls, spaces, too long for an id
        ("app.slice/\uff4aupyter.service", ALICE),  # fullwidth j
        ("app.slice/jupyter\u200b.service", ALICE),  # zero-width space
        ("app.slice/a b.service", ALICE),
        ("app.slice/\x1b[31mred.service", ALICE),
        (f"app.slice/{'x' * 240}.service", ALICE),  # 248 characters: 273 with user@1000.service/
        # deep nesting: only the first non-slice element counts
        ("/".join(["a.slice"] * 200) + "/deep.service", ("systemd_unit", ALICES + "deep.service")),
    ],
)  # fmt: skip
def test_a_user_s_own_names_stay_theirs(below_manager, workload):
    for uid in (1000, 0):  # the manager's owner, or a root process moved into its tree
        assert placed(f"0::{MANAGER}/{below_manager}\n", uid) == workload
        v1 = f"4:cpu,cpuacct:/user.slice\n1:name=systemd:{MANAGER}/{below_manager}\n"
        assert placed(v1, uid) == workload  # cgroup v1: the names in systemd's own hierarchy
        delegated = f"4:cpu,cpuacct:{MANAGER}/{below_manager}\n"  # or in cpuacct's, delegated too
        assert placed(delegated, uid) == workload


def test_the_user_s_own_unit_and_container_are_charged_to_the_user():
    unit = place(f"0::{MANAGER}/app.slice/ollama.service\n", 0)  # even a root process in the user's tree
    assert unit.uid == 1000 and unit.key == WorkloadKey("systemd_unit", "user@1000.service/ollama.service")
    assert len(f"user@{2**32 - 1}.service/{'x' * 224}.service") == MAX_ID_CHARS
    longest = place(f"0::/user.slice/user-4294967295.slice/user@4294967295.service/{'x' * 224}.service\n", 7)
    assert longest.key.kind == "systemd_unit" and longest.uid == 2**32 - 1


@pytest.mark.parametrize(
    ("path", "uid", "workload"),
    [
        # the outermost owner owns what its delegate makes below: a container in a container
        (f"/system.slice/docker-{OTHER}.scope/system.slice/docker-{ROOTS}.scope", 0, ("container", OTHER)),
        (f"/system.slice/docker-{OTHER}.scope/docker/{ROOTS}", 0, ("container", OTHER)),
        # a unit delegated to a user (Delegate=yes, User=): the unit, whatever the user made in it
        (f"/system.slice/ci.service/docker-{ROOTS}.scope", 1000, ("systemd_unit", "ci.service")),
        ("/system.slice/ci.service/sshd.service", 1000, ("systemd_unit", "ci.service")),
        # an unprivileged LXC container's own systemd tree, under LXC's top-level cgroup
        (f"/lxc.payload.c1/system.slice/docker-{ROOTS}.scope", 100000, ("user", user_name(100000))),
        # a cgroupfs driver's id only right under a top-level directory
        (f"/docker/x/{ROOTS}", 5, ("user", user_name(5))),
        (f"/system.slice/foo.scope/{ROOTS}", 5, ("user", user_name(5))),
        # user@U.service only in user-U.slice, and only U's
        ("/system.slice/user@0.service/app.slice/x.service", 5, ("user", user_name(5))),
        (f"{USER_SLICE}/user@0.service/app.slice/x.service", 5, ALICE),
        # a uid in a slice's name is ASCII digits, ten at most
        ("/user.slice/user-\u0661.slice/user@\u0661.service/app.slice/x.service", 5, ("user", user_name(5))),
        (f"/user.slice/user-{'1' * 11}.slice/session-1.scope", 5, ("user", user_name(5))),
    ],
)  # fmt: skip
def test_the_outermost_owner_owns_everything_below(path, uid, workload):
    assert placed(f"0::{path}\n", uid) == workload


@pytest.mark.parametrize(
    "path",
    [
        f"{MANAGER}/app.slice/../../../../system.slice/docker-{ROOTS}.scope",
        f"{MANAGER}/app.slice/./../../../../system.slice/ollama.service",
        f"/system.slice/../system.slice/docker-{ROOTS}.scope",
    ],
)
def test_a_path_the_kernel_never_writes_names_nothing(path):
    """The kernel writes ``..`` only as a leading run (a private namespace's climb) and no cgroup can be
    named ``..`` or ``.``: such a line is no one's, and the process counts as its uid's user."""
    assert place(f"0::{path}\n", 1000) == Placement(WorkloadKey("user", user_name(1000)), 1000)


def test_a_process_in_a_user_s_slice_is_the_user_s_whatever_its_uid():
    """``sudo`` in alice's session: a root process in her slice is hers, as the slice's CPU time is."""
    assert place(f"0::{USER_SLICE}/session-3.scope\n", 0) == Placement(
        WorkloadKey(*ALICE), 1000, None, CpuCgroup(USER_SLICE)
    )


# -- seen through a private cgroup namespace (warptd in a pod) ---------------------------------------
POD = "/kubepods.slice/kubepods-pod0a.slice/cri-containerd-" + "c" * 64 + ".scope"  # warptd's, depth 3


@pytest.mark.parametrize("root", [POD, "/../../.."])  # the root found, or only its depth
def test_a_user_s_names_seen_from_a_pod_stay_theirs(root):
    user = f"0::/../../..{MANAGER}/app.slice/docker-{ROOTS}.scope\n"
    assert place(user, 1000, root=root) == Placement(
        WorkloadKey("container", ALICES + ROOTS),
        1000,
        None,
        CpuCgroup(f"{MANAGER}/app.slice/docker-{ROOTS}.scope"),
    )
    unit = (
        f"0::/../../..{MANAGER}/app.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/crio-{ROOTS}.scope\n"
    )
    assert placed(unit, 1000, root=root) == ("container", f"user@1000.service/{ROOTS}")


def test_a_path_under_an_unknown_root_is_placed_by_the_rules_that_hold_partway():
    """Where warptd's namespace root was not found, a neighbour pod's path hangs under one of its
    ancestors: its container is named, without a CPU cgroup; a path inside warptd's own root names
    nothing (what is above it is not known), and neither does one climbing in the host's namespace."""
    neighbour = f"0::/../../{POD_SLICE}/cri-containerd-{ROOTS}.scope\n"
    assert place(neighbour, 0, root="/../../..") == Placement(WorkloadKey("container", ROOTS), 0)
    assert place(f"0::/../pod{POD_UID}/{ROOTS}\n", 0, root="/../../..").key == WorkloadKey("container", ROOTS)
    assert placed(f"0::/docker-{ROOTS}.scope\n", 0, root="/../../..") == ("user", user_name(0))
    assert placed(f"0::/../../../docker/{ROOTS}\n", 0, root=POD) == (
        "container",
        ROOTS,
    )  # known: from the top
    assert placed(f"0::/../docker/{ROOTS}\n", 0, root="/../../..") == (
        "user",
        user_name(0),
    )  # not from the top
    slurm = "0::/../system.slice/slurmstepd.scope/job_7/step_0\n"  # a job's roots hold only from the top
    assert placed(slurm, 0, root="/../../..") == ("user", user_name(0))
    assert placed(slurm.replace("/..", "/../../.."), 0, root="/../../..") == ("slurm_job", "7")


# -- a name holding a newline: a line the kernel did not write ---------------------------------------
#: A cgroup v1 host's hierarchies, as host init lists them.
V1_HOST = "4:cpu,cpuacct:/\n3:memory:/\n1:name=systemd:/init.scope\n"
#: Alice's process in a cgroup of her manager (name=systemd is delegated to her) that she renamed to
#: ``x\n<a line>``, as kernels before June 2021 allowed.
GENUINE = f"4:cpu,cpuacct:/user.slice\n3:memory:/user.slice\n1:name=systemd:{MANAGER}/x\n"
ADDED = [
    f"0::/system.slice/docker-{ROOTS}.scope\n",  # a unified line, which goes before systemd's
    f"9:cpuacct:/system.slice/docker-{ROOTS}.scope\n",  # a second cpuacct line, which goes first
]


@pytest.mark.parametrize("added", ADDED)
def test_a_line_added_by_a_newline_in_a_name_names_nothing(tmp_path, added):
    proc = tmp_path / "proc"
    for pid, text in ((1, V1_HOST), (7, GENUINE + added)):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(text)
    (proc / "7" / "status").write_text("Uid:\t1000\t1000\t1000\t1000\n")
    assert read_placement(proc, 7) == Placement(WorkloadKey(*ALICE), 1000)
    assert place(GENUINE, 1000) == Placement(WorkloadKey(*ALICE), 1000)  # the kernel's own: the same


def test_each_hierarchy_and_controller_once_even_where_init_s_file_is_unread():
    assert place(GENUINE + ADDED[1], 1000) == Placement(WorkloadKey(*ALICE), 1000)  # cpuacct twice
    twice = f"0::{MANAGER}/x\n0::/system.slice/docker-{ROOTS}.scope\n"
    assert place(twice, 1000) == Placement(WorkloadKey(*ALICE), 1000)


@pytest.mark.parametrize(
    ("cgroup", "uid", "expected"),
    [
        # a user's own systemd tree can hold any name, slurmstepd.scope and job_N included
        (
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/slurmstepd.scope/job_4242/step_0\n",
            1000,
            Placement(WorkloadKey("user", user_name(1000)), 1000, None, CpuCgroup(USER_SLICE)),
        ),
        # a v1 tree under the user's slice: not slurmd's root, so not root's job 7777
        (
            "4:cpu,cpuacct:/user.slice/user-1000.slice/slurm/uid_0/job_7777\n",
            1000,
            Placement(WorkloadKey("user", user_name(1000)), 1000, None, CpuCgroup(USER_SLICE, "cpu,cpuacct")),
        ),
        ("0::/system.slice/docker-x.scope/system.slice/slurmstepd.scope/job_1\n", 0, None),
        ("0::/machine.slice/slurmstepd.scope/job_5\n", 7, None),
    ],
)  # fmt: skip
def test_slurm_jobs_are_matched_only_under_slurmds_roots(cgroup, uid, expected):
    placement = place(cgroup, uid)
    assert placement.key.kind != "slurm_job"
    if expected is not None:
        assert placement == expected


def test_a_configured_root_holds_jobs_and_the_default_roots_then_do_not():
    cgroup = "0::/kubepods.slice/slurmd.slice/slurmstepd.scope/job_31/step_batch/user/task_0\n"
    assert place(cgroup, 5).key.kind != "slurm_job"
    roots = slurm_roots(["/kubepods.slice/slurmd.slice/slurmstepd.scope"])
    assert place(cgroup, 5, slurm=roots) == Placement(
        WorkloadKey("slurm_job", "31"),
        5,
        "batch",
        CpuCgroup("/kubepods.slice/slurmd.slice/slurmstepd.scope/job_31"),
    )
    assert place("0::/system.slice/slurmstepd.scope/job_4/step_0\n", 5, slurm=roots).key.kind == "user"
    assert load_settings(workload_slurm_roots="/a.slice/*_x.scope, /slurm").workload_slurm_roots == [
        "/a.slice/*_x.scope",
        "/slurm",
    ]
    for bad in ("relative/path", "/a/../b", "/a b"):
        with pytest.raises(SettingsError, match="workload_slurm_roots"):
            load_settings(workload_slurm_roots=bad)


@pytest.mark.parametrize(
    "cgroup",
    [
        "4:cpuacct:/slurm/uid_\u00b2/job_6\n",  # int("²") raised ValueError: every workload poll failed
        "0::/system.slice/slurmstepd.scope/job_\u0664\u0662/step_0\n",  # Arabic-Indic 42
        f"0::/system.slice/slurmstepd.scope/job_{'9' * 5000}\n",
        "0::/system.slice/slurmstepd.scope/job_42\u00b9\n",
        "0::/user.slice/user-\u0661\u0660\u0660\u0660.slice/session-1.scope\n",
    ],
)
def test_ids_that_are_not_ascii_digits_name_no_job_nor_user(cgroup):
    assert place(cgroup, 4321) == Placement(WorkloadKey("user", user_name(4321)), 4321)


def _fifo_at(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_fifo_is_refused_at_once_by_every_reader(reader, node_root):
    where, read, unreadable = READERS[reader]
    target = node_root / where
    target.unlink(missing_ok=True)
    fifo = _fifo_at(target)
    expected = unreadable.format(root=node_root) if isinstance(unreadable, str) else unreadable
    assert bounded(lambda: read(node_root), fifo) == expected


@pytest.mark.slow
def test_a_reload_of_a_file_nested_too_deep_fails_in_one_log_line_and_keeps_the_config(tmp_path):
    from tests.e2e.test_e2e import _events, start_daemon

    config = tmp_path / "warptd.toml"
    config.write_text("interval = 0.5\n")
    proc, port = start_daemon("--backend", "cpu", "--config", str(config), "--sysfs", str(tmp_path))
    try:
        deep_toml(config)
        proc.send_signal(signal.SIGHUP)
        failed = _events(proc, "config_reload_failed")[-1]  # each line JSON: no traceback in between
        assert failed["error"] == f"invalid config file {config}: nested too deep"
        config.write_text("interval = 0.2\n")
        proc.send_signal(signal.SIGHUP)
        reloaded = _events(proc, "config_reloaded")[-1]
        assert reloaded["changed"] == ["interval"]  # from the config kept: 0.5
        assert http(port, "GET", "/healthz")[0] == 200
    finally:
        proc.kill()
        proc.wait(timeout=10)


# -- paths seen from a private cgroup namespace (a Kubernetes pod on cgroup v2) --------------------
#: warptd's own container: its cgroup namespace root, three levels under the host's root.
NAMESPACE_ROOT = "/kubepods.slice/kubepods-pod0a.slice/cri-containerd-" + "a" * 64 + ".scope"
#: A Slurm job's task as a process in that pod reads it: up to the host root, then down.
#: A neighbour pod's container: the common ancestor is kubepods.slice, one level below the root.
NEIGHBOUR_ID = "b" * 64
NEIGHBOUR = f"0::/../../kubepods-pod0b.slice/cri-containerd-{NEIGHBOUR_ID}.scope\n"


def test_paths_seen_from_the_pod_place_their_workload_and_its_host_cgroup():
    job = place(JOB_TASK, 1000, root=NAMESPACE_ROOT)
    assert job.key == WorkloadKey("slurm_job", "77") and job.step == "0"
    assert job.cpu == CpuCgroup("/system.slice/slurmstepd.scope/job_77")
    neighbour = place(NEIGHBOUR, 0, root=NAMESPACE_ROOT)
    assert neighbour.key == WorkloadKey("container", NEIGHBOUR_ID)
    assert neighbour.cpu == CpuCgroup(
        f"/kubepods.slice/kubepods-pod0b.slice/cri-containerd-{NEIGHBOUR_ID}.scope"
    )
    # the root was not found, its depth was: a path that climbs all of it is the host's, CPU file and all
    unknown_root = place(JOB_TASK, 1000, root="/../../..")
    assert unknown_root.key == WorkloadKey("slurm_job", "77") and unknown_root.cpu == job.cpu
    # one that climbs less hangs under an unknown ancestor: named, but no CPU file
    neighbour = place(NEIGHBOUR, 0, root="/../../..")
    assert neighbour.key == WorkloadKey("container", NEIGHBOUR_ID) and neighbour.cpu is None


# -- each layout, as /proc/<pid>/cgroup shows it ---------------------------------------------------
@pytest.mark.parametrize(
    ("cgroup", "uid", "workload", "step", "cpu"),
    [
        (SLURM_V1, 1000, ("slurm_job", "4242"), "0", CpuCgroup(V1_JOB, "cpu,cpuacct")),  # uid_1000 wins
        (SLURM_V2, 1001, ("slurm_job", "4243"), "1", CpuCgroup(V2_JOB)),
        (
            "0::/system.slice/node7_slurmstepd.scope/job_9/step_batch\n", 5, ("slurm_job", "9"), "batch",
            CpuCgroup("/system.slice/node7_slurmstepd.scope/job_9"),
        ),  # several slurmd on one host
        (
            "4:cpuacct:/slurm_node7/uid_7/job_12/step_extern\n", 7, ("slurm_job", "12"), "extern",
            CpuCgroup("/slurm_node7/uid_7/job_12", "cpuacct"),
        ),
        (SERVICE, 0, ("systemd_unit", "ollama.service"), None, CpuCgroup("/system.slice/ollama.service")),
        (DOCKER, 0, ("container", CID), None, CpuCgroup(f"/system.slice/docker-{CID}.scope")),
        (
            f"0::/machine.slice/libpod-{CID}.scope/container\n", 0, ("container", CID), None,
            CpuCgroup(f"/machine.slice/libpod-{CID}.scope"),
        ),  # Podman
        (f"0::/default/{CID}\n", 0, ("container", CID), None, CpuCgroup(f"/default/{CID}")),  # containerd
        (
            f"0::/system.slice/nerdctl-{CID}.scope\n", 0, ("container", CID), None,
            CpuCgroup(f"/system.slice/nerdctl-{CID}.scope"),
        ),
        (f"0::/docker/{CID}\n", 0, ("container", CID), None, CpuCgroup(f"/docker/{CID}")),  # cgroupfs driver
        (USER_SERVICE, 1000, JUPYTER_UNIT, None, CpuCgroup(JUPYTER)),
        (USER, 1000, USER_1000, None, CpuCgroup("/user.slice/user-1000.slice")),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/init.scope\n", 1000, USER_1000, None,
            CpuCgroup("/user.slice/user-1000.slice"),
        ),
        ("0::/\n", 4321, ("user", user_name(4321)), None, None),
        ("0::/system.slice/job_5/step_0\n", 3, ("user", user_name(3)), None, None),  # not Slurm's
    ],
)  # fmt: skip
def test_placement_of_each_layout(cgroup, uid, workload, step, cpu):
    given_uid = 0 if cgroup == SLURM_V1 else uid  # Slurm v1: the uid its path names, not the process's
    assert place(cgroup, given_uid) == Placement(WorkloadKey(*workload), uid, step, cpu)
