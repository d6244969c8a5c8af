"""The libtpu runtime metrics service as a real gRPC server on loopback, and TPU chips in a sysfs tree.

The server implements tpu-info's generated ``RuntimeMetricServiceServicer`` and answers with
tpu-info's own message types, in the shape ``tpu_info.metrics.get_chip_usage`` parses: one
``Metric`` per core (HBM bytes in ``Gauge.as_int``), duty cycle per chip (per core on chips whose
runtime reports it so, as 7x does; ``Gauge.as_double`` percent), the device id in
``attribute.value.int_attr``. Written from tpu-info's source and its own test double
(``metrics_test.py``: attribute key ``device-id``, local server credentials); not checked against
a live libtpu. An unknown metric name is answered ``NOT_FOUND``, as tpu-info's CLI expects of an
older libtpu; a stopped server gives the client ``UNAVAILABLE`` exactly as an idle TPU host does.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from tpu_info import device
from tpu_info.metrics import MetricName
from tpu_info.proto import tpu_metric_service_pb2 as pb
from tpu_info.proto import tpu_metric_service_pb2_grpc as pb_grpc

from tests.sysfs_tree import SysfsTree

GIB = 2**30
#: What a v5e core reports as its HBM total (tpu-info's metrics_test.py uses the same figure).
V5E_HBM = 17_044_078_592
#: Longest a stalled handler holds its thread, so a forgotten release cannot hang the test run.
STALL_LIMIT_S = 5.0


@dataclass
class FakeCore:
    """One TensorCore's HBM, in bytes, and its duty cycle where the runtime reports it per core."""

    used: int
    total: int = V5E_HBM
    duty_pct: float | None = None


@dataclass
class FakeChip:
    """One chip as libtpu sees it: its cores, duty cycle (%) and HBM bandwidth utilization (%)."""

    cores: list[FakeCore]
    duty_pct: float = 0.0
    hbm_bw_pct: float = 0.0


@dataclass
class FakeLibtpu(pb_grpc.RuntimeMetricServiceServicer):
    """State in libtpu's units; knobs: ``fail`` (a status code for every call), ``unknown`` (metric
    names this libtpu does not have), ``stall`` (hold each call until ``release`` is set)."""

    chips: list[FakeChip]
    duty_per_core: bool = False
    fail: grpc.StatusCode | None = None
    unknown: set[str] = field(default_factory=set)
    stall: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    requests: Counter[str] = field(default_factory=Counter)

    def values(self, name: MetricName) -> list[int] | list[float]:
        cores = [core for chip in self.chips for core in chip.cores]
        if name is MetricName.TOTAL_MEMORY:
            return [core.total for core in cores]
        if name is MetricName.MEMORY_USAGE:
            return [core.used for core in cores]
        if name is MetricName.DUTY_CYCLE_PCT and self.duty_per_core:
            return [core.duty_pct or 0.0 for core in cores]
        if name is MetricName.DUTY_CYCLE_PCT:
            return [chip.duty_pct for chip in self.chips]
        if name is MetricName.HBM_BW_UTIL:
            return [chip.hbm_bw_pct for chip in self.chips for _ in chip.cores]
        raise KeyError(name)

    def GetRuntimeMetric(self, request: pb.MetricRequest, context: grpc.ServicerContext) -> pb.MetricResponse:
        self.requests[request.metric_name] += 1
        if self.stall:
            self.release.wait(STALL_LIMIT_S)
        if self.fail is not None:
            context.abort(self.fail, "injected by the test")
        try:
            name = MetricName(request.metric_name)
            values = self.values(name)
        except (ValueError, KeyError):
            name, values = None, []
        if name is None or request.metric_name in self.unknown:
            context.abort(grpc.StatusCode.NOT_FOUND, f"metric {request.metric_name} not found")
        return pb.MetricResponse(
            metric=pb.TPUMetric(
                name=request.metric_name,
                metrics=[
                    pb.Metric(
                        attribute=pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=i)),
                        gauge=pb.Gauge(as_int=v) if isinstance(v, int) else pb.Gauge(as_double=v),
                    )
                    for i, v in enumerate(values)
                ],
            )
        )


class RuntimeServer:
    """``FakeLibtpu`` served on 127.0.0.1; stop() and start() again on the same port (a new workload)."""

    def __init__(self, fake: FakeLibtpu, port: int = 0) -> None:
        self.fake = fake
        self.port = port
        self._server: grpc.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RuntimeServer:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RuntimeMetricServiceServicer_to_server(self.fake, server)
        # tpu-info dials with local channel credentials; its own test double serves with these.
        credentials = grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        self.port = server.add_secure_port(f"127.0.0.1:{self.port}", credentials)
        assert self.port, "could not bind a loopback port"
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.fake.release.set()  # let stalled handlers return before the server goes
            assert self._server.stop(0).wait(STALL_LIMIT_S)
            self._server = None
            self.fake.release.clear()


def free_port() -> int:
    """A loopback port that nothing listens on now (bound, then released)."""
    server = RuntimeServer(FakeLibtpu(chips=[])).start()
    port = server.port
    server.stop()
    return port


def tpu_pci_device(  # noqa: PLR0917 - a fixture builder
    tree: SysfsTree,
    address: str,
    device_id: str,
    subsystem: str = "0x0000",
    iommu_group: int | None = None,
    accel: int | None = None,
    driver: str | None = "vfio-pci",
    vendor: str = device.GOOGLE_PCI_VENDOR_ID,
) -> Path:
    """``bus/pci/devices/<address>`` linking to its ``devices/pci0000:00/<address>`` directory, with the
    attributes tpu-info reads, an ``iommu_group`` link (the vfio node), an ``accel/accelN`` class
    device (the accel node) and a ``driver`` link, as the kernel lays them out."""
    path = tree.root / "devices" / "pci0000:00" / address
    path.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device_id), ("subsystem_device", subsystem)):
        (path / name).write_text(f"{value}\n")
    if iommu_group is not None:
        group = tree.root / "kernel" / "iommu_groups" / str(iommu_group)
        group.mkdir(parents=True, exist_ok=True)
        (path / "iommu_group").symlink_to(group)
    if accel is not None:
        (path / "accel" / f"accel{accel}").mkdir(parents=True)
    if driver is not None:
        drivers = tree.root / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        (path / "driver").symlink_to(drivers)
    link = tree.root / "bus" / "pci" / "devices" / address
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(path)
    return path
