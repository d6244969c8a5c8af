"""A client of the kubelet's PodResources API: ``List`` over the unix socket, bounded by a timeout."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ErrorKindName = Literal["unavailable", "permission", "timeout", "error"]


class PodResourcesError(Exception):
    """A failed List call, classified for ``warptd_podresources_errors_total{kind}``."""

    def __init__(self, kind: ErrorKindName, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Owner:
    """A container that the kubelet allocated a device to."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class Allocation:
    """One device ID (as its device plugin names it) of one extended resource, allocated to ``owner``."""

    owner: Owner
    resource: str
    device_id: str


class PodResourcesClient:
    """Calls ``v1.PodResourcesLister/List``; the channel is rebuilt after a failure (kubelet restarts)."""

    def __init__(self, socket: Path, timeout: float = 2.0) -> None:
        import grpc  # the kubernetes extra; the caller turns an ImportError into "attribution off"

        from warptd.k8s import podresources_pb2, podresources_pb2_grpc

        self._grpc, self._pb2, self._stubs = grpc, podresources_pb2, podresources_pb2_grpc
        self.socket = socket
        self.timeout = timeout
        self._channel: Any = None

    def list(self) -> list[Allocation]:
        """Every allocated device of every container on the node; raises :class:`PodResourcesError`."""
        if not self.socket.exists():
            self.close()
            raise PodResourcesError("unavailable", f"{self.socket} does not exist")
        if not os.access(self.socket, os.W_OK):  # connecting to a unix socket needs write permission
            raise PodResourcesError("permission", f"{self.socket} is not writable: run as root to read it")
        if self._channel is None:
            self._channel = self._grpc.insecure_channel(f"unix://{self.socket}")
        stub = self._stubs.PodResourcesListerStub(self._channel)
        try:
            response = stub.List(self._pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except self._grpc.RpcError as exc:
            self.close()
            code = exc.code() if hasattr(exc, "code") else None
            kind: ErrorKindName = "error"
            if code == self._grpc.StatusCode.UNAVAILABLE:
                kind = "unavailable"
            elif code == self._grpc.StatusCode.DEADLINE_EXCEEDED:
                kind = "timeout"
            raise PodResourcesError(kind, f"List failed: {code}") from exc
        return [
            Allocation(Owner(pod.namespace, pod.name, container.name), devices.resource_name, device_id)
            for pod in response.pod_resources
            for container in pod.containers
            for devices in container.devices
            for device_id in devices.device_ids
        ]

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
