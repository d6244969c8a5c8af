"""A real gRPC server serving fake PodResources ``List`` answers on a unix socket, as the kubelet does."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

from warptd.k8s import podresources_pb2 as pb
from warptd.k8s import podresources_pb2_grpc as pb_grpc

#: (namespace, pod, container) -> {resource name: [device ids]}
Pods = dict[tuple[str, str, str], dict[str, list[str]]]


def replica(gpu_uuid: str, n: int) -> str:
    """The ID NVIDIA's device plugin gives replica ``n`` of a time-sliced GPU."""
    return f"{gpu_uuid}::{n}"


def mig_device(mig_uuid: str) -> str:
    """A MIG device as the plugin names it with current drivers: its own UUID, not naming its GPU."""
    return f"MIG-{mig_uuid}"


def legacy_mig_device(gpu_uuid: str, gpu_instance: int, compute_instance: int) -> str:
    """A MIG device as older drivers name it: ``MIG-GPU-<uuid>/<gi>/<ci>``."""
    return f"MIG-{gpu_uuid}/{gpu_instance}/{compute_instance}"


class FakeKubelet(pb_grpc.PodResourcesListerServicer):
    """Answers ``List`` from :attr:`pods`; :attr:`delay` makes it slow (a kubelet under load)."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pods: Pods = {}
        self.delay = 0.0
        self.calls = 0
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None

    def List(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext):
        with self._lock:
            self.calls += 1
            pods = dict(self.pods)
        time.sleep(self.delay)
        response = pb.ListPodResourcesResponse()
        by_pod: dict[tuple[str, str], pb.PodResources] = {}
        for (namespace, pod, container), resources in sorted(pods.items()):
            entry = by_pod.get((namespace, pod))
            if entry is None:
                entry = by_pod[(namespace, pod)] = response.pod_resources.add(name=pod, namespace=namespace)
            devices = [pb.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in resources.items()]
            entry.containers.add(name=container, devices=devices)
        return response

    def start(self) -> FakeKubelet:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_PodResourcesListerServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket, as a restarting kubelet does."""
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        self.socket.unlink(missing_ok=True)
