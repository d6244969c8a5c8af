"""Masking: identifiers that fingerprint a machine or user keep their shape, mask the same throughout one
file and differently in another, and common words a process was named are masked where the capture
holds the process only."""

from __future__ import annotations

import re

from warptd.capture import schema
from warptd.capture.mask import Masker, mask

GPU_UUID = "GPU-8e0a5b2e-1c3d-4f5a-9b7c-0d1e2f3a4b5c"
MIG_UUID = "MIG-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718"
UUID_SHAPE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _capture() -> schema.Capture:
    def uuid_call(value: str, device: str = "gpu") -> schema.Call:
        return schema.Call(function="nvmlDeviceGetUUID", device=device, ret=schema.SUCCESS, value=value)

    state = schema.GpuState(
        seconds=1,
        calls=(
            uuid_call(GPU_UUID),
            uuid_call(MIG_UUID, "mig:0"),
            schema.Call(function="nvmlDeviceGetSerial", ret=schema.SUCCESS, value="1654922008931"),
            schema.Call(function="nvmlDeviceGetName", ret=schema.SUCCESS, value="NVIDIA H200 python"),
        ),
        processes=(
            schema.Process(pid=41, name="python", cmdline=("python", "-m", "train", "--run", "alice-7")),
        ),
    )
    return schema.Capture(
        header=schema.Header(
            format=schema.FORMAT,
            version=schema.VERSION,
            created="2026-12-05T00:00:00+00:00",
            tool="warptd capture",
            source="capture",
            sources=(schema.Source(id="capture", kind="capture", detail=f"capture of {GPU_UUID}"),),
        ),
        node=schema.Node(hostname="gpu-node-17.corp.example"),
        gpus=(schema.Gpu(index=0, identity=schema.Identity(uuid=GPU_UUID), states={"idle": state}),),
    )


def test_identifiers_keep_their_shape_and_mask_the_same_throughout_the_file():
    masked, counts = mask(_capture())
    gpu = masked.gpus[0]
    state = gpu.states["idle"]
    uuid = state.call("nvmlDeviceGetUUID").value
    assert uuid != GPU_UUID and UUID_SHAPE.match(uuid)
    assert gpu.identity.uuid == uuid  # the same UUID masks the same everywhere ...
    assert masked.header.sources[0].detail == f"capture of {uuid}"  # ... text around it included
    mig = state.call("nvmlDeviceGetUUID", device="mig:0").value
    assert mig.startswith("MIG-") and len(mig) == len(MIG_UUID) and mig != MIG_UUID
    serial = state.call("nvmlDeviceGetSerial").value
    assert serial.isdigit() and len(serial) == 13 and serial != "1654922008931"
    host = masked.node.hostname
    assert host != "gpu-node-17.corp.example" and re.fullmatch(
        r"[a-z]{3}-[a-z]{4}-\d{2}\.[a-z]{4}\.[a-z]{7}", host
    )
    process = state.processes[0]
    assert process.name != "python" and len(process.name) == 6
    assert process.cmdline[0] == process.name and process.cmdline[1] == "-m"  # too short to mask
    assert "alice-7" not in process.cmdline and "train" not in process.cmdline
    # a word a process was named is left alone elsewhere: a model's name is no identifier
    assert state.call("nvmlDeviceGetName").value == "NVIDIA H200 python"
    assert masked.header.masked == (
        "gpu_uuid",
        "hostname",
        "mig_uuid",
        "process_cmdline",
        "process_name",
        "serial",
    )
    assert counts == {
        "gpu_uuid": 1,
        "hostname": 1,
        "mig_uuid": 1,
        "process_cmdline": 4,  # python, train, --run, alice-7
        "process_name": 1,
        "serial": 1,
    }


def test_two_files_mask_one_identifier_differently():
    one, _ = mask(_capture())
    other, _ = mask(_capture())
    assert one.gpus[0].identity.uuid != other.gpus[0].identity.uuid
    fixed = Masker(key=b"k" * 32)
    again = Masker(key=b"k" * 32)
    fixed.add("gpu_uuid", GPU_UUID)
    again.add("gpu_uuid", GPU_UUID)
    assert fixed.masks == again.masks  # a key of its own per file: drawn, not derived from the UUID


def test_nothing_to_mask_leaves_the_capture_as_it_was():
    bare = _capture().model_copy(update={"node": schema.Node(), "gpus": ()})
    assert mask(bare) == (bare, {})
