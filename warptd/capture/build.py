"""A capture file's content from what the recorder recorded and the capture measured apart."""

from __future__ import annotations

import datetime
import platform
import socket
import statistics
from importlib import metadata
from pathlib import Path
from typing import Any

from warptd import __version__
from warptd.capture import schema
from warptd.capture.recorder import Entry, Key, Recorder
from warptd.capture.run import Measured
from warptd.files import read_text

#: The doctor's refresh values, by what its report calls them, as the capture names them.
_REFRESHED = {
    "energy counter (field 83)": "energy",
    "instant power (field 186)": "power_instant",
    "average power (field 185)": "power_average",
}
SOURCE = "capture"


def build(recorder: Recorder, measured: Measured, procfs: Path) -> schema.Capture:
    """The capture of this node, read through the library nvidia-ml-py loaded (named in its source)."""
    idle = recorder.books[schema.IDLE]
    count = 1 + max((gpu for gpu in idle.entries if gpu is not None), default=-1)
    node = _node(recorder, measured)
    gpus = []
    for index in range(count):
        states = {}
        for state, book in recorder.books.items():
            if state in measured.seconds and index in book.entries:
                load = measured.load if state == schema.LOADED else None
                states[state] = _state(book.entries[index], measured.seconds[state], load, procfs)
        if schema.IDLE not in states:
            continue
        gpus.append(
            schema.Gpu(
                index=index,
                identity=_identity(states[schema.IDLE]),
                states=states,
                prices=_prices(recorder, measured, index),
                refresh=_refresh(measured, index, states[schema.IDLE]),
            )
        )
    models = sorted({gpu.identity.name or "NVIDIA GPU" for gpu in gpus})
    library = getattr(getattr(recorder.nvml, "nvmlLib", None), "_name", None) or "libnvidia-ml.so.1"
    detail = (
        f"warptd capture of {len(gpus)} GPU(s) ({', '.join(models)}), driver {node.driver_version}, "
        f"through {library}"
    )
    notes = []
    if measured.load_failed:
        notes.append(f"no loaded state: {measured.load_failed}")
    return schema.Capture(
        header=schema.Header(
            format=schema.FORMAT,
            version=schema.VERSION,
            created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            tool=f"warptd {__version__} capture",
            source=SOURCE,
            sources=(schema.Source(id=SOURCE, kind="capture", detail=detail),),
            notes=tuple(notes),
        ),
        node=node,
        gpus=tuple(gpus),
    )


def _node(recorder: Recorder, measured: Measured) -> schema.Node:
    """The node's versions (as NVML answered them) and its calls on no GPU, per state."""
    calls = {
        state: tuple(_call(key, entry) for key, entry in book.entries.get(None, {}).items())
        for state, book in recorder.books.items()
        if state in measured.seconds
    }
    idle = {call.function: call for call in calls.get(schema.IDLE, ())}

    def answered(function: str) -> Any:
        call = idle.get(function)
        return call.value if call is not None and call.ok else None

    cuda = answered("nvmlSystemGetCudaDriverVersion_v2")
    return schema.Node(
        hostname=socket.gethostname(),
        os=f"{platform.system()} {platform.release()}".strip(),
        driver_version=answered("nvmlSystemGetDriverVersion"),
        nvml_version=answered("nvmlSystemGetNVMLVersion"),
        cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
        nvidia_ml_py=_version("nvidia-ml-py"),
        warptd=__version__,
        absent=tuple(sorted(recorder.absent)),
        calls=calls,
    )


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _state(entries: dict[Key, Entry], seconds: float, load: str | None, procfs: Path) -> schema.GpuState:
    calls, fields, gpm = [], [], []
    for key, entry in sorted(entries.items(), key=lambda item: _order(item[0])):
        if key[0] == "call":
            calls.append(_call(key, entry))
        elif key[0] == "field":
            _, device, field_id, scope = key
            fields.append(schema.FieldValue(id=field_id, scope=scope, device=device, **_answer(entry)))
        elif key[0] == "gpm":
            _, instance, metric = key
            gpm.append(schema.GpmMetric(id=metric, instance=instance, unit=entry.unit, **_answer(entry)))
    state = schema.GpuState(
        seconds=round(seconds, 3), load=load, calls=tuple(calls), fields=tuple(fields), gpm=tuple(gpm)
    )
    return state.model_copy(update={"processes": _processes(state, procfs)})


def _order(key: Key) -> tuple[Any, ...]:
    """Calls by device, function and inputs; fields by device, id, scope; GPM by instance and id."""
    return (key[0], *(repr(part) if not isinstance(part, int) else f"{part:012d}" for part in key[1:]))


def _answer(entry: Entry) -> dict[str, Any]:
    first, rate = entry.motion()
    found: dict[str, Any] = {
        "ret": entry.ret,
        "value": entry.value,
        "type": entry.type,
        "count": entry.count,
        "at": round(entry.at, 3),
        "first": first,
        "rate": rate,
    }
    if entry.latency_us is not None:
        found["latency_us"] = entry.latency_us
    return found


def _call(key: Key, entry: Entry) -> schema.Call:
    _, device, function, inputs = key
    return schema.Call(function=function, device=device, args=tuple(inputs), **_answer(entry))


def _processes(state: schema.GpuState, procfs: Path) -> tuple[schema.Process, ...]:
    """The processes the last process list named, with their names and command lines."""
    found: dict[tuple[str, int], schema.Process] = {}
    for call in state.calls:
        if not call.function.startswith("nvmlDeviceGetComputeRunningProcesses") or not call.ok:
            continue
        for row in call.value if isinstance(call.value, list) else ():
            pid = row.get("pid") if isinstance(row, dict) else None
            if not isinstance(pid, int):
                continue
            used = row.get("usedGpuMemory")
            found[call.device, pid] = schema.Process(
                pid=pid,
                device=call.device,
                used_memory=used if isinstance(used, int) and used < 2**64 - 1 else None,
                name=_proc_text(procfs / str(pid) / "comm"),
                cmdline=_cmdline(procfs / str(pid) / "cmdline"),
            )
    return tuple(found.values())


def _proc_text(path: Path) -> str | None:
    """A /proc file of a process, None where it is gone or unreadable."""
    try:
        return read_text(path, limit=64 * 1024).strip()
    except (OSError, ValueError):
        return None


def _cmdline(path: Path) -> tuple[str, ...] | None:
    text = _proc_text(path)
    return tuple(part for part in text.split("\0") if part) if text else None


def _identity(idle: schema.GpuState) -> schema.Identity:
    def text(function: str) -> str | None:
        call = idle.call(function)
        return call.value if call is not None and call.ok and isinstance(call.value, str) else None

    pci = idle.call("nvmlDeviceGetPciInfo_v3")
    bus = pci.value.get("busId") if pci is not None and pci.ok and isinstance(pci.value, dict) else None
    return schema.Identity(
        name=text("nvmlDeviceGetName"),
        uuid=text("nvmlDeviceGetUUID"),
        pci_bus_id=bus if isinstance(bus, str) else None,
    )


def _prices(recorder: Recorder, measured: Measured, index: int) -> tuple[schema.Price, ...]:
    """Each function's median thread CPU per call in the idle state, GPM metric requests with how many
    metrics they asked; each field id asked alone."""
    prices = []
    cpu = recorder.cpu_by_function(schema.IDLE)
    idle = recorder.books[schema.IDLE].entries.get(index, {})
    asked = [e.value for key, e in idle.items() if key[0] == "gpm_request" and e.ret == schema.SUCCESS]
    for (gpu, function), spent in sorted(cpu.items(), key=lambda item: item[0][1]):
        if gpu != index or not spent:
            continue
        items = max(asked) if function == "nvmlGpmMetricsGet" and asked else None
        prices.append(
            schema.Price(
                function=function, items=items, cpu_seconds=statistics.median(spent), measured=len(spent)
            )
        )
    for field_id, spent, calls in measured.field_prices.get(index, ()):
        batch = "nvmlDeviceGetFieldValues"
        prices.append(schema.Price(function=batch, field=field_id, cpu_seconds=spent, measured=calls))
    return tuple(prices)


def _refresh(measured: Measured, index: int, idle: schema.GpuState) -> tuple[schema.Refresh, ...]:
    """The doctor's polls (of the first GPU of each model: the driver's, per model), and
    ``nvmlDeviceGetPowerUsage``'s, where the loaded state saw it change and the idle one did not."""
    found: dict[str, schema.Refresh] = {}
    name = idle.call("nvmlDeviceGetName")
    for backend in measured.report.backends if measured.report is not None else ():
        if backend.backend != "nvidia":
            continue
        models = {device.index: device.model for device in backend.devices}
        for polled in backend.refresh:
            value = _REFRESHED.get(polled.value)
            same = models.get(polled.device) == (name.value if name is not None else None)
            if value is None or not (polled.device == index or same) or value in found:
                continue
            found[value] = schema.Refresh(
                value=value,  # type: ignore[arg-type]
                seconds=polled.median_seconds,
                changes=polled.changes,
                polled_seconds=round(polled.polled_seconds, 3),
                poll_seconds=polled.poll_seconds,
            )
    usage = measured.power_usage.get(index)
    loaded = measured.loaded_power_usage.get(index)
    if usage is not None and usage.seconds is None and loaded is not None and loaded.seconds is not None:
        usage = loaded
    if usage is not None:
        found["power_usage"] = usage
    return tuple(found[value] for value in sorted(found))
