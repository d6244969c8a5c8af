"""A hostile node: what one process, one cgroup name or one file can do to warptd's reads.

Each case is a fixture /proc or cgroup tree, or a file, shaped by someone on the node, and what it
may change: its own process's attribution at most, never anyone else's, never a poll, a start or a
reload. A case that would block (a FIFO) runs on a thread bounded in time and is unblocked after.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import http, value
from tests.test_processes import GIB, METRIC, SYSTEMD_V2, UID, Proc
from tests.test_processes import scrape as scrape_processes
from tests.test_workloads import ENERGY, SLURM_V2, Node, Rig
from warptd import files
from warptd.config import Settings, SettingsError, load_settings
from warptd.http.webconfig import load_web_config
from warptd.k8s.containers import read_owner
from warptd.processes.cgroup import UNRESOLVED, Attribution, CgroupResolver, read_attribution
from warptd.processes.device_nodes import _devname
from warptd.processes.nvml import ProcessMonitor
from warptd.sampling.state import CounterState, _boot_id
from warptd.workloads.cgroupns import namespace_root
from warptd.workloads.cpu import cgroup_usage_us, node_cpu_us
from warptd.workloads.placement import (
    CpuCgroup,
    Placement,
    WorkloadKey,
    place,
    read_placement,
    slurm_roots,
    user_name,
)
from warptd.workloads.slurm_tree import slurm_jobs

#: A unit name that is not UTF-8, in a user's delegated subtree (where the user may create it).
NOT_UTF8 = b"0::/user.slice/user-1000.slice/user@1000.service/app.slice/\xff\xfe.service\n"
USER_SLICE = "/user.slice/user-1000.slice"
#: The longest a bounded read may take on a loaded 2-core machine, against forever.
PROMPT_S = 5.0


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


def test_a_cgroup_name_that_is_not_utf8_leaves_the_jobs_their_energy(fake_nvml, tmp_path):
    node = Node(tmp_path)
    node.add(1001, SLURM_V2, uid=1001)
    node.add(1002, "")
    (node.proc.root / "1002" / "cgroup").write_bytes(NOT_UTF8)
    fake_nvml.gpus[0].processes = [(1001, GIB), (1002, GIB)]
    monitor = ProcessMonitor(node.proc.root)
    try:
        rig = Rig(node, monitor, fake_nvml.gpus)
        rig.device_joules(0.0, 0.0)
        rig.poll()
        rig.device_joules(100.0, 0.0)
        rig.poll()
        rig.device_joules(100.0, 0.0)
    finally:
        monitor.stop()
    job = rig.workload("slurm_job", "4243")
    assert job is not None and job.accelerator_joules == pytest.approx(100.0)  # half of each 100 J
    assert value(rig.scrape(), ENERGY, kind="slurm_job", workload="4243", source="accelerator") > 0


# -- Slurm jobs only where slurmd puts them --------------------------------------------------------
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


def test_the_cgroup_tree_holds_jobs_only_under_slurmds_roots(tmp_path):
    cgroupfs = tmp_path / "cgroup"
    for path in (
        "system.slice/slurmstepd.scope/job_1",
        "system.slice/node7_slurmstepd.scope/job_2",
        "cpu,cpuacct/slurm/uid_1000/job_3",
        "user.slice/user-1000.slice/user@1000.service/app.slice/slurmstepd.scope/job_66",
        "cpu,cpuacct/user.slice/slurm/uid_0/job_67",
    ):
        (cgroupfs / path).mkdir(parents=True)
    found = {(job.key.id, job.uid) for job in slurm_jobs(cgroupfs)}
    assert found == {("1", None), ("2", None), ("3", 1000)}


# -- ids are ASCII digits, of a 32-bit number's length at most -------------------------------------
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


def test_directories_with_such_ids_are_no_jobs_and_the_poll_goes_on(fake_nvml, tmp_path):
    node = Node(tmp_path)
    for path in (
        "cpu,cpuacct/slurm/uid_\u00b2/job_6",
        "cpu,cpuacct/slurm/uid_5/job_\u0664\u0662",
        f"system.slice/slurmstepd.scope/job_{'9' * 200}",
        "system.slice/slurmstepd.scope/job_7",
    ):
        (node.cgroupfs / path).mkdir(parents=True)
    assert [job.key.id for job in slurm_jobs(node.cgroupfs)] == ["7"]
    monitor = ProcessMonitor(node.proc.root)
    try:
        rig = Rig(node, monitor, fake_nvml.gpus)
        rig.poll()  # raised ValueError
    finally:
        monitor.stop()
    assert rig.workload("slurm_job", "7") is not None


# -- reads: regular files only, never blocking, bounded in size ------------------------------------
def _fifo_at(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _unblock(fifo: Path) -> None:
    """End a read still waiting on ``fifo`` (the check failed): a writer opens it and closes."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _settings_error(call: Callable[[], object]) -> str:
    try:
        call()
    except SettingsError as exc:
        return str(exc)
    return "no error"


#: Each reader of a file a node can shape: where it reads, how to read it, what an unreadable file gives.
READERS: dict[str, tuple[str, Callable[[Path], object], object]] = {
    "process cgroup": ("proc/7/cgroup", lambda root: read_attribution(root / "proc", 7), None),
    "process stat": ("proc/7/stat", lambda root: CgroupResolver(root / "proc").resolve(7), UNRESOLVED),
    "workload placement": ("proc/7/cgroup", lambda root: read_placement(root / "proc", 7), None),
    "cgroup cpu.stat": (
        "cgroup/a.service/cpu.stat",
        lambda root: cgroup_usage_us(root / "cgroup", CpuCgroup("/a.service")),
        None,
    ),
    "node /proc/stat": ("proc/stat", lambda root: node_cpu_us(root / "proc"), None),
    "namespace root": ("proc/1/cgroup", lambda root: namespace_root(root / "proc", root / "cgroup"), "/"),
    "token file": (
        "token",
        lambda root: _settings_error(lambda: Settings(stress_token_file=root / "token").stress_token_value()),
        "invalid setting stress_token_file: not a regular file",
    ),
    "config file": (
        "warptd.toml",
        lambda root: _settings_error(lambda: load_settings(config=root / "warptd.toml")),
        "invalid setting config: not a regular file {root}/warptd.toml",
    ),
    "web config file": (
        "web.yml",
        lambda root: _settings_error(lambda: load_web_config(root / "web.yml")),
        "invalid setting web_config_file: not a regular file: {root}/web.yml",
    ),
    "TLS certificate": (
        "tls.crt",
        lambda root: _settings_error(lambda: load_web_config(_tls_config(root))),
        "invalid setting web_config_file: TLS: [Errno 22] not a regular file: '{root}/tls.crt'",
    ),
    "state file": ("state/counters.json", lambda root: CounterState(root / "state").saved, {}),
    "boot id": ("proc/sys/kernel/random/boot_id", lambda root: _boot_id(root / "proc"), ""),
    "container bundle": (
        f"run/containerd/io.containerd.runtime.v2.task/k8s.io/{'c' * 64}/config.json",
        lambda root: read_owner((root,), Attribution(UID, "c" * 64)),
        None,
    ),
    "device uevent": (
        "sys/class/accel/accel0/uevent",
        lambda root: _devname(root / "sys/class/accel/accel0/uevent"),
        None,
    ),
}


def _tls_config(root: Path) -> Path:
    """A web config naming ``root``'s tls.crt and tls.key (a key that is there)."""
    (root / "tls.key").write_text("not a key\n")
    web = root / "tls.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {root}/tls.crt\n  key_file: {root}/tls.key\n")
    return web


def _bounded(call: Callable[[], object], fifo: Path | None = None) -> object:
    """``call()``'s result, which must come within PROMPT_S (a read blocked on a FIFO never does)."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(PROMPT_S)
    if thread.is_alive() and fifo is not None:
        _unblock(fifo)
        thread.join(PROMPT_S)
        pytest.fail(f"blocked on the FIFO {fifo.name} for {PROMPT_S} s")
    assert result, "the read raised (see the thread's traceback above)"
    return result[0]


@pytest.fixture
def node_root(tmp_path) -> Iterator[Path]:
    """A node's files: a process 7 whose /proc entries are readable until a case replaces one."""
    proc = Proc(tmp_path / "proc")
    proc.add(7, SYSTEMD_V2)
    yield tmp_path


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_fifo_is_refused_at_once_by_every_reader(reader, node_root):
    where, read, unreadable = READERS[reader]
    target = node_root / where
    target.unlink(missing_ok=True)
    fifo = _fifo_at(target)
    expected = unreadable.format(root=node_root) if isinstance(unreadable, str) else unreadable
    assert _bounded(lambda: read(node_root), fifo) == expected


@pytest.mark.parametrize("reader", ["process cgroup", "workload placement", "token file"])
def test_a_file_over_the_limit_is_refused_unread(reader, node_root):
    where, read, unreadable = READERS[reader]
    target = node_root / where
    target.parent.mkdir(parents=True, exist_ok=True)
    # The cgroup of a process in a pod, repeated past the limit (a 200 MB one took RSS to 355 MiB).
    target.write_text("token\n" if reader == "token file" else SYSTEMD_V2)
    with target.open("a") as grown:
        grown.truncate(files.MAX_BYTES + 1)
    result = _bounded(lambda: read(node_root))
    if reader == "token file":
        assert result == "invalid setting stress_token_file: over 65536 bytes"
    else:
        assert result == unreadable


def test_a_device_as_the_token_file_is_refused_without_reading_it():
    """/dev/zero took RSS to 3.4 GiB and the daemon never started; /dev/null reads as empty."""
    settings = Settings(stress_token_file=Path("/dev/null"))
    assert (
        _settings_error(settings.stress_token_value)
        == "invalid setting stress_token_file: not a regular file"
    )


def test_the_reader_itself(tmp_path):
    plain = tmp_path / "plain"
    plain.write_bytes(b"x" * 100)
    assert files.read_bytes(plain, limit=100) == b"x" * 100
    with pytest.raises(files.RefusedFile, match="over 99 bytes"):
        files.read_bytes(plain, limit=99)
    plain.write_bytes(b"caf\xc3\xa9 \xff")
    with pytest.raises(files.RefusedFile, match="not UTF-8") as refused:
        files.read_text(plain)
    assert isinstance(refused.value, OSError)
    with pytest.raises(files.RefusedFile, match="not a regular file"):
        files.read_bytes("/dev/zero")
    with pytest.raises(FileNotFoundError):
        files.read_bytes(tmp_path / "absent")


# -- config files: one line and exit 2, or config_reload_failed with the old config kept ----------
NESTED = 5000


def _deep_toml(path: Path) -> Path:
    path.write_text(f"backends = {'[' * NESTED}{']' * NESTED}\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "content", "error"),
    [
        ("deep.yml", f"basic_auth_users: {'[' * NESTED}{']' * NESTED}\n".encode(), "is nested too deep"),
        ("latin1.yml", b"basic_auth_users:\n  caf\xe9: x\n", "not UTF-8 (byte 23)"),
        ("bad.yml", b"basic_auth_users:\n  a: [\n  - b: {\n", "at line 3, column 3"),
    ],
)
def test_a_bad_web_config_file_is_one_line_and_exit_2(name, content, error, tmp_path, capsys):
    from warptd.cli import main

    web = tmp_path / name
    web.write_bytes(content)
    argv = [
        "--backend",
        "cpu",
        "--sysfs",
        str(tmp_path),
        "--listen",
        "127.0.0.1:0",
        "--web-config-file",
        str(web),
    ]
    assert main(argv) == 2
    printed = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("{")]  # logs
    assert len(printed) == 1 and printed[0].startswith("warptd: invalid setting web_config_file: ")
    assert error in printed[0]


def test_a_config_file_nested_too_deep_is_one_line_and_exit_2(tmp_path, capsys):
    from warptd.cli import main

    assert (
        main(["list", "--config", str(_deep_toml(tmp_path / "warptd.toml"))]) == 2
    )  # RecursionError, exit 1
    assert capsys.readouterr().err == f"warptd: invalid config file {tmp_path}/warptd.toml: nested too deep\n"


@pytest.mark.slow
def test_a_reload_of_a_file_nested_too_deep_fails_in_one_log_line_and_keeps_the_config(tmp_path):
    from tests.test_e2e import _events, start_daemon

    config = tmp_path / "warptd.toml"
    config.write_text("interval = 0.5\n")
    proc, port = start_daemon("--backend", "cpu", "--config", str(config), "--sysfs", str(tmp_path))
    try:
        _deep_toml(config)
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
