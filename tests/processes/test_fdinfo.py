"""Energy per workload on the accelerators whose SDK lists no processes (TPU, Tenstorrent, Gaudi, DRM
GPUs through sysfs): who holds each device from fixture /proc trees (fd links to the device's node,
DRM fdinfo) and sysfs class devices, each device's identity from the real backend over its double."""

from __future__ import annotations

import pytest

from tests.processes import holders
from tests.processes.holders import JOB_A, JOB_B, Rig, amdgpu
from warptd.processes.engine_time import EngineTime
from warptd.processes.fdinfo import parse_fdinfo

drm = holders.drm  # an amdgpu and an i915 card listed by hwmon, a fixture
files = holders.files  # the processes' open files, a fixture
node = holders.node  # a node running jobs A and B (processes 1001, 1002), a fixture


def test_fdinfo_units_aliases_and_the_spec_rules():
    client = parse_fdinfo(
        "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1121\n"
        "drm-driver:\txe\ndrm-client-id:\t41\ndrm-pdev:\t0000:04:00.0\n"
        "drm-memory-vram0:\t16 MiB\ndrm-total-vram0:\t64 MiB\ndrm-memory-system:\t512 KiB\n"
        "drm-memory-stolen:\t4096\ndrm-shared-vram0:\t1 MiB\ndrm-memory-gtt:\t7 GiB\n"
        "drm-cycles-rcs:\t1000\ndrm-total-cycles-rcs:\t50000\ndrm-engine-capacity-ccs:\t4\n"
        "drm-cycles-ccs:\t0\ndrm-total-cycles-ccs:\t50000\n"
    )
    assert (client.driver, client.pdev, client.client_id) == ("xe", "0000:04:00.0", "41")
    assert client.memory_bytes == 16 * 2**20  # resident (the alias), device-local; GiB is no unit
    assert client.capacity == {"ccs": 4} and client.cycles == {"rcs": 1000, "ccs": 0}
    assert parse_fdinfo("pos:\t0\nflags:\t0100002\n") is None  # not a DRM file
    busy: EngineTime[tuple[str, str]] = EngineTime(per_client=True)
    share = lambda read, ns: (busy.update(ns, {("p", "41"): read.count()}) or {}).get(("p", "41"))  # noqa: E731
    assert share(client, 0) is None  # the first read is the baseline
    later = parse_fdinfo(
        "drm-driver:\txe\ndrm-cycles-rcs:\t26000\ndrm-total-cycles-rcs:\t100000\n"
        "drm-engine-capacity-ccs:\t4\ndrm-cycles-ccs:\t20000\ndrm-total-cycles-ccs:\t100000\n"
    )
    assert share(later, 10**9) == pytest.approx(25_000 / 50_000 + 20_000 / 50_000 / 4)
    busy = EngineTime(per_client=True)
    read = lambda ns: parse_fdinfo(f"drm-driver:\tamdgpu\ndrm-engine-gfx:\t{ns} ns\n")  # noqa: E731
    assert share(read(10**9), 0) is None
    assert share(read(10**9 + 5 * 10**8), 10**9) == pytest.approx(0.5)
    assert share(read(10**9), 2 * 10**9) == 0.0  # lower: stay with the larger value
    assert share(read(10**9 + 7 * 10**8), 3 * 10**9) == pytest.approx(0.2)


def test_drm_memory_weighs_device_local_regions_only_where_the_file_reports_any(node, files, sysfs, drm):
    """Host memory (amdgpu GTT and CPU, i915 system) is not device memory, as amdsmi's ``vram_mem``
    is not: a job with little VRAM and much GTT weighs its VRAM; an integrated GPU (system memory
    only) weighs every region."""
    big_gtt = amdgpu(7, 0, vram_kib=1024).replace("drm-resident-gtt:\t2 MiB", "drm-resident-gtt:\t900 MiB")
    assert parse_fdinfo(big_gtt).memory_bytes == 2**20
    discrete = "drm-driver:\ti915\ndrm-resident-system0:\t64 MiB\ndrm-resident-local0:\t8 MiB\n"
    assert parse_fdinfo(discrete).memory_bytes == 8 * 2**20
    xe = "drm-driver:\txe\ndrm-resident-gtt:\t64 MiB\ndrm-resident-vram0:\t4 MiB\ndrm-memory-vram1:\t2 MiB\n"
    assert parse_fdinfo(xe).memory_bytes == 6 * 2**20
    integrated = "drm-driver:\ti915\ndrm-resident-system0:\t64 MiB\ndrm-resident-stolen-system0:\t1 MiB\n"
    assert parse_fdinfo(integrated).memory_bytes == 65 * 2**20
    files.open(1001, 5, "/dev/dri/renderD128", big_gtt)  # 1 MiB VRAM, 900 MiB GTT
    files.open(1002, 4, "/dev/dri/renderD128", amdgpu(9, 0, vram_kib=3 * 1024))  # 3 MiB VRAM, 2 MiB GTT
    rig = Rig(node, sysfs, {"hwmon": drm})
    rig.poll()
    rig.poll()
    rig.joules("hwmon", {0: 100.0})
    assert rig.joules_of(JOB_A) == pytest.approx(25.0, rel=0.01)
    assert rig.joules_of(JOB_B) == pytest.approx(75.0, rel=0.01)
