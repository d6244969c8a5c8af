"""One GPU's field batches (``nvmlDeviceGetFieldValues``): which fields it is asked, what it lacks,
this read's values and what its health batch decoded into; the driver's time on them in total."""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from warptd.backends.costs import ReadKind
from warptd.backends.nvidia import fields
from warptd.backends.nvidia.api import GpuHandle
from warptd.backends.nvidia.fields import Decoded, FieldKey, FieldPlan, FieldRequest, FieldSet
from warptd.errors import ErrorKind
from warptd.metrics import nvidia
from warptd.models import LabelledValues

log = structlog.get_logger("warptd.nvidia")
_NO_SERIES: dict[str, LabelledValues] = {}


@dataclass(slots=True)
class FieldTotals:
    """One GPU's running totals of its field reads, kept across NVML reopens (they are warptd's own)."""

    latency_us: int = 0  # nvmlFieldValue_t.latencyUsec, summed over every answer of every batch
    #: ``latency_us`` as of the last health batch: exported at the health cadence, so that the counters
    #: a steady sample hands over equal the last ones (the sampler keeps their totals whole).
    published_us: int = 0


class FieldBatch:
    """The field batches of one GPU, through its guard, numbered by ``field_set``."""

    def __init__(self, gpu: GpuHandle, field_set: FieldSet, totals: FieldTotals | None) -> None:
        self._gpu, self.field_set = gpu, field_set
        self._api, self._guard, self._handle = gpu.api, gpu.guard, gpu.handle
        #: Kept across NVML reopens (handed to the next device object); None before the first answer.
        self.totals = totals
        self.values: dict[FieldKey, float] = {}  # this read's values
        #: When this read's batch was sent (monotonic): its powers are as of the driver's refresh before.
        self.read_at: float | None = None
        self.unsupported: set[FieldKey] = set()  # fields this GPU lacks: not asked again
        self.plan: FieldPlan | None = None  # the health batch (its NVLinks known)
        self._requests: dict[ReadKind, FieldRequest] = {}  # the last batch by kind of read
        #: This read's request and values by position, where every field answered as last time.
        self.steady: tuple[FieldRequest, list[float]] | None = None
        #: The gauges and raw counters of the last health batch (and the calls standing in).
        self.decoded: Decoded | None = None

    def health_plan(self) -> FieldPlan | None:
        """The health read's field batch (every field), built once the GPU's NVLink count is known (field
        91; where it is not supported, the links whose ``nvmlDeviceGetNvLinkState`` answers: none on a
        GPU without NVLink)."""
        if self.plan is None:
            answers = self._gpu.get("nvlink_count", "nvmlDeviceGetFieldValues", [fields.LINK_COUNT])
            if answers is None and "nvlink_count" not in self._guard.unsupported:
                return None  # failing now: this read asks the fields without the links
            links = None
            for _, code, value_type, value in self._api.unpack(answers or ()):
                if code == self._api.nvml.NVML_SUCCESS and value_type in fields.INTEGERS:
                    links = int(value)  # type: ignore[arg-type]
            if links is None:
                links = self._answering_links()
            field_set = self.field_set
            self.plan = FieldPlan.build((*field_set.device, *field_set.other), links, field_set.reads)
        return self.plan

    def _answering_links(self) -> int:
        """The links before the first whose state NVML does not answer (NOT_SUPPORTED at link 0: no
        NVLink), at most :data:`~warptd.metrics.nvidia.MAX_LINKS`."""
        for link in range(nvidia.MAX_LINKS):
            what = f"nvlink_state_{link}"
            if self._gpu.get(what, "nvmlDeviceGetNvLinkState", link) is None:
                return link
        return nvidia.MAX_LINKS

    def read(self, kind: ReadKind, plan: FieldPlan | None = None) -> bool:
        """One field batch of ``kind`` (:attr:`FieldSet.kinds`, or ``HEALTH``: ``plan``'s, which decodes
        into gauges and counters). Each value carries its own return code: a field answered "not
        supported" once is not asked again for this GPU. False when the batch, or some field in it,
        failed now."""
        self.values = values = {}
        self.steady = None
        self.read_at = None
        field_ids = plan.keys if plan is not None else self.field_set.kinds[kind]
        request = self._request(kind, plan, field_ids)
        if request is None:
            return True
        guard, nvml = self._guard, self._api.nvml
        self.read_at = time.monotonic()
        answers = guard.call("fields", request.send, self._handle)
        if answers is None:
            if "fields" in guard.unsupported:  # a driver without field values
                self.unsupported.update(field_ids)
                return True
            return False
        totals = self.totals
        if totals is None:
            totals = self.totals = FieldTotals()
        totals.latency_us += request.latency_us(answers)
        if plan is not None:
            totals.published_us = totals.latency_us
        numbers = request.steady(answers)
        if numbers is not None:  # every field answered as in the last clean read
            self.values = request.looked_up(numbers)
            self.steady = (request, numbers)
            return True
        success, types, answered, failed = nvml.NVML_SUCCESS, self.field_set.types, [], False
        for field_id, code, value_type, value in self._api.unpack(answers):
            answered.append(value_type)
            if code == success and value_type in types.get(field_id[0], fields.INTEGERS):
                values[field_id] = float(value)  # type: ignore[arg-type]  # an integer type: never None
                continue
            error = nvml.NVMLError(code)
            # An id this driver does not know answers INVALID_ARGUMENT; one that it numbers as another
            # field answers a value of the wrong type: neither is this field, now or later.
            if code in (nvml.NVML_SUCCESS, nvml.NVML_ERROR_INVALID_ARGUMENT):
                self.unsupported.add(field_id)
                log.debug("nvml_field_unsupported", device=guard.index, field=field_id, type=value_type)
            elif self._api.classify(error) is ErrorKind.NOT_SUPPORTED:
                self.unsupported.add(field_id)
            else:
                guard.failed("field_{}_{}".format(*field_id), error)
                failed = True
        if len(values) == len(answered):
            request.mark_clean(tuple(answered))
        return not failed

    def request(self, kind: ReadKind) -> FieldRequest | None:
        """The batch a read of ``kind`` sends now (``HEALTH``: the health plan's, once built); None where
        nothing is left to ask."""
        plan = self.plan if kind is ReadKind.HEALTH else None
        if kind is ReadKind.HEALTH and plan is None:
            return None
        return self._request(kind, plan, plan.keys if plan is not None else self.field_set.kinds[kind])

    def _request(
        self, kind: ReadKind, plan: FieldPlan | None, field_ids: tuple[FieldKey, ...]
    ) -> FieldRequest | None:
        """The batch to send: the last one of its kind while neither the plan nor what this GPU lacks
        changed (that set only grows); None when nothing is left to ask."""
        unsupported = self.unsupported
        request = self._requests.get(kind)
        if request is not None and request.made_from == (field_ids, len(unsupported)):
            return request
        wanted = tuple(field for field in field_ids if field not in unsupported)
        if not wanted:
            return None
        if request is None or request.keys != wanted:
            request = self._requests[kind] = FieldRequest(self._api.nvml, wanted, self.field_set.looked_up)
            if plan is not None:
                request.decode_with(plan)
        request.made_from = (field_ids, len(unsupported))
        return request

    def decode(self) -> Decoded:
        """Gauges and raw counters from this read's health batch (health, PCIe and NVLink bytes)."""
        plan = self.plan
        if plan is None:
            return {}, {}
        if self.steady is not None:
            return self.steady[0].decode(self.steady[1], self.values)
        return plan.decode(self.values)

    def field(self, field_id: int) -> float | None:
        """This read's value of a device-scoped field."""
        return self.values.get((field_id, 0))

    def lacks(self, field_id: int) -> bool:
        """Whether the GPU does not have a device-scoped field (a call may stand in)."""
        return (field_id, 0) in self.unsupported

    def gauges(self) -> dict[str, LabelledValues]:
        """The gauges of the last health batch."""
        return self.decoded[0] if self.decoded is not None else _NO_SERIES

    def counters(self) -> dict[str, LabelledValues]:
        """The raw counters of the last health batch: health and traffic (PCIe, NVLink bytes)."""
        return self.decoded[1] if self.decoded is not None else _NO_SERIES
