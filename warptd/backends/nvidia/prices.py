"""What each read of a GPU's plan costs on this node, for ``warptd doctor``: the median CPU of a few
calls of that exact read (every kind of field batch, the prepared calls of a sample, the slow values,
the energy call), and how often the plan makes it at each ``--interval`` (:func:`plan_rates`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warptd.backends.cadence import DeviceCadence
from warptd.backends.checkup import EACH_SAMPLE, ReadPrice, median_cpu
from warptd.backends.costs import ReadKind
from warptd.backends.nvidia import fields
from warptd.backends.nvidia.edges import read_kind
from warptd.backends.nvidia.fields import FieldKey
from warptd.backends.nvidia.gpm import sample_gap
from warptd.metrics.spec import Cadence

if TYPE_CHECKING:
    from warptd.backends.nvidia.api import NvmlApi
    from warptd.backends.nvidia.gpu import Gpu
    from warptd.config import Settings

#: The most reads :func:`plan_rates` simulates (an --interval of a millisecond: 200 s of them).
_MOST_TICKS = 200_000
#: The health read's field batch as the doctor's reads name it ("fields full: N ids"), as they always have.
_SHOWN = {ReadKind.HEALTH: "full"}
#: A prepared call of a sample, by what it is guarded as, in plain words.
_CALLED = {
    "memory_v2": "memory",
    "pstate": "performance state",
    "clock_graphics": "graphics clock",
    "clock_sm": "SM clock",
    "clock_memory": "memory clock",
    "clock_video": "video clock",
    "clocks_event_Current": "clock-event reasons",
    "clocks_throttle_Current": "clock-event reasons",
}


def plan_rates(settings: Settings, interval: float) -> dict[str, float]:
    """Reads a second of each kind the plan makes of one GPU at ``interval``, outside windows (``sample``:
    every read): the GPU's own cadences (:func:`~warptd.backends.nvidia.edges.read_kind`) run over a
    simulated span after the first read (which reads everything), GPM at
    :func:`~warptd.backends.nvidia.gpm.sample_gap`."""
    at = settings.model_copy(update={"interval": interval})
    health, energy = DeviceCadence(lambda: at), DeviceCadence(lambda: at, Cadence.ENERGY)
    span = min(3600.0, max(60.0, 10 * max(at.health_interval, at.energy_interval)))
    ticks = min(_MOST_TICKS, max(1, round(span / interval)))
    gap, taken = sample_gap(at), 0.0
    read_kind(health, energy, now=0.0)
    counts: Counter[str] = Counter(sample=ticks)
    for tick in range(1, ticks + 1):
        now = tick * interval
        counts[read_kind(health, energy, now=now)] += 1
        if now - taken >= gap:
            counts[ReadKind.GPM], taken = counts[ReadKind.GPM] + 1, now
    return {kind: count / (ticks * interval) for kind, count in counts.items()}


def _key_text(key: FieldKey) -> str:
    return f"{key[0]}" if not key[1] else f"{key[0]}/{key[1]}"


class Prices:
    """The reads of one GPU's plan, each priced at the median of ``calls`` calls and made as often as the
    plan's ``rates`` say (reads a second by interval, then kind); ``energy_call`` the counter's call."""

    def __init__(
        self, gpu: Gpu, api: NvmlApi, calls: int, rates: dict[str, dict[str, float]], energy_call: Any
    ) -> None:
        self.gpu, self.api, self.calls, self.rates, self.energy_call = gpu, api, calls, rates, energy_call

    def of_plan(self, settings: Settings) -> list[ReadPrice]:
        """The median CPU of each read of the plan: every kind of field batch and the full one, the
        prepared calls of a sample, the slow values, the energy call."""
        return [*self._batches(settings), *self._calls(), *self._slow(settings), *self._energy()]

    def _batches(self, settings: Settings) -> list[ReadPrice]:
        """Each kind of field batch, and the full one."""
        gpu, batch, prices = self.gpu, self.gpu.batch, []
        plainly = {  # kind: (what it reads, how often, which rate of the plan)
            ReadKind.POWER: ("power fields", "each sample that reads no energy", ReadKind.POWER),
            ReadKind.ENERGY: (
                "power fields and the energy counter",
                f"every {settings.energy_interval:g} s",
                ReadKind.ENERGY,
            ),
            ReadKind.EDGE: (
                "every counter at once",
                "at the start and end of a window, profile or stress run",
                None,
            ),
            ReadKind.HEALTH: (
                "health and link fields",
                f"every {settings.health_interval:g} s",
                ReadKind.HEALTH,
            ),
            ReadKind.SCOPES: ("module and memory power", "each sample of nvml alone", None),
        }
        for kind in (*batch.field_set.kinds, ReadKind.HEALTH):
            request = batch.request(kind)
            if request is None:
                continue
            cost = self._median(lambda request=request: request.send(gpu.handle))
            if cost is None:
                continue
            ids = (
                " ".join(map(_key_text, request.keys))
                if kind is not ReadKind.HEALTH
                else f"{len(request.keys)} ids"
            )
            what, cadence, planned = plainly.get(kind, (f"{kind} fields", "not made", None))
            price = self._price(f"fields {_SHOWN.get(kind, kind)}: {ids}", kind, cost, cadence, planned)
            prices.append(price.model_copy(update={"what": what}))
        return prices

    def _calls(self) -> list[ReadPrice]:
        """The prepared calls of a sample, each in the version the GPU answers."""
        gpu, prices = self.gpu, []
        for versions in gpu.calls.slots:
            what, call, _ = next(
                (v for v in versions if v[0] not in gpu.guard.unsupported), (None, None, None)
            )
            cost = self._median(call) if call is not None else None
            if cost is not None and call is not None and what is not None:
                name = f"{call.name} ({what})" if what.startswith("clock_") else call.name
                price = self._price(name, None, cost, EACH_SAMPLE, "sample")  # charged to none
                update = {"what": _CALLED.get(what, what.replace("_", " ")), "per_sample_call": True}
                prices.append(price.model_copy(update=update))
        return prices

    def _slow(self, settings: Settings) -> list[ReadPrice]:
        """The slow values read with the health batch."""
        gpu = self.gpu
        slow = self._median(lambda: (gpu.health.decode(gpu.batch), gpu.health.read(gpu.activity.presence())))
        if slow is None:
            return []
        read = "slow values: limit, fans, encoder, decoder, stand-ins"
        price = self._price(
            read, ReadKind.HEALTH, slow, f"every {settings.health_interval:g} s", ReadKind.HEALTH
        )
        return [price.model_copy(update={"what": "power limit, fans, media engines"})]

    def _energy(self) -> list[ReadPrice]:
        """The energy counter's own call, made only where the driver lacks field 83."""
        energy = self._median(self.energy_call)
        if energy is None:
            return []
        lacks = self.gpu.batch.lacks(fields.FI_TOTAL_ENERGY)
        cadence = "with each energy read (no field 83)" if lacks else "never (field 83 reads the counter)"
        price = self._price("nvmlDeviceGetTotalEnergyConsumption", ReadKind.ENERGY, energy, cadence, None)
        update: dict[str, object] = {"what": "the energy counter's own call"}
        if lacks:
            update["per_second"] = {
                k: r.get(ReadKind.ENERGY, 0.0) + r.get(ReadKind.HEALTH, 0.0) for k, r in self.rates.items()
            }
        return [price.model_copy(update=update)]

    def _price(
        self, read: str, charged_as: str | None, cost: float, cadence: str, planned: str | None
    ) -> ReadPrice:
        """A read's price, made by the plan as often as reads of kind ``planned`` (None: not in it)."""
        per_second = {key: rate.get(planned, 0.0) if planned else 0.0 for key, rate in self.rates.items()}
        return ReadPrice(
            read=read,
            charged_as=charged_as,
            cpu_seconds=cost,
            measured=self.calls,
            cadence=cadence,
            per_second=per_second,
        )

    def _median(self, read: Callable[[], object]) -> float | None:
        """The median CPU of ``read``; None where it fails (an NVML error)."""
        try:
            return median_cpu(read, self.calls)
        except self.api.nvml.NVMLError:
            return None
