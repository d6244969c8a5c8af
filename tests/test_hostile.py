"""A hostile node: what one process, one cgroup name or one file can do to warptd's reads.

Each case is a fixture /proc or cgroup tree, or a file, shaped by someone on the node, and what it
may change: its own process's attribution at most, never anyone else's, never a poll, a start or a
reload. A case that would block (a FIFO) runs on a thread bounded in time and is unblocked after.
"""

from __future__ import annotations

from tests.e2e.test_processes import GIB, SYSTEMD_V2, UID, Proc
from tests.helpers import value
from tests.processes.test_collector import METRIC
from tests.processes.test_collector import scrape as scrape_processes
from warptd.processes.cgroup import UNRESOLVED, CgroupResolver, read_attribution
from warptd.processes.nvml import ProcessMonitor

#: A unit name that is not UTF-8, in a user's delegated subtree (where the user may create it).
NOT_UTF8 = b"0::/user.slice/user-1000.slice/user@1000.service/app.slice/\xff\xfe.service\n"
#: The longest a bounded read may take on a loaded 2-core machine, against forever.


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


# -- Slurm jobs only where slurmd puts them --------------------------------------------------------


# -- ids are ASCII digits, of a 32-bit number's length at most -------------------------------------


# -- reads: regular files only, never blocking, bounded in size ------------------------------------


#: Each reader of a file a node can shape: where it reads, how to read it, what an unreadable file gives.


# -- config files: one line and exit 2, or config_reload_failed with the old config kept ----------
