"""A stress job manager wired to the loaded backends, the snapshot and the sampler: the daemon's
``POST /stress`` and the foreground ``warptd stress`` build theirs here, the same way."""

from __future__ import annotations

from warptd.backends.capabilities import StressTarget
from warptd.config import Settings
from warptd.recording.recorder import with_carbon_and_cost
from warptd.registry import Loaded
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot
from warptd.stress.base import DeviceRef
from warptd.stress.jobs import JobManager


def make_job_manager(
    settings: Settings,
    loaded: Loaded,
    snapshot: Snapshot,
    sampler: Sampler | None = None,
    in_daemon: bool = True,
) -> JobManager:
    """A stress job manager over every device of every loaded accelerator backend; with ``sampler``,
    a running job's device is sampled at ``--window-interval``; ``in_daemon``: the daemon's (else
    ``warptd stress``'s)."""

    def devices() -> list[DeviceRef]:
        """From the snapshot's current identities, so a re-discovered GPU is stressed by its UUID."""
        refs = []
        for backend in loaded.accelerators:
            if not isinstance(backend, StressTarget):
                continue  # its devices run no stress workload
            state = snapshot.get(backend.name)
            for info in state.devices_info if state else []:
                torch_device, environment = backend.worker_device(info)
                refs.append(
                    DeviceRef(
                        backend=backend.name,
                        index=info.index,
                        torch_device=torch_device,
                        is_accelerator=backend.is_accelerator,
                        compute_capability=info.compute_capability,
                        backend_target=f"{type(backend).__module__}:{type(backend).__qualname__}",
                        environment=environment,
                    )
                )
        return refs

    companions: dict[str, list[str]] = {}
    for power in loaded.power:
        if power.companion:
            companions.setdefault(power.companion, []).append(power.name)

    def free_memory(device: DeviceRef) -> int | None:
        state = snapshot.get(device.backend)
        for sample in state.devices if state else []:
            if sample.reading.index == device.index and sample.reading.memory is not None:
                return sample.reading.memory.free
        return None

    return JobManager(
        devices(),
        companions,
        refresh=devices,
        max_duration_s=settings.stress_max_duration,
        history=settings.stress_history,
        on_change=snapshot.touch,
        free_memory=free_memory,
        watch=sampler.watch if sampler is not None else None,
        unwatch=sampler.unwatch if sampler is not None else None,
        edge=sampler.read_edges if sampler is not None else None,
        carbon=lambda r: with_carbon_and_cost(r, settings.carbon_intensity, settings.energy_price),
        in_daemon=in_daemon,
    )
