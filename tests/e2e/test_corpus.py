"""The corpus: the real daemon and its doctor over every capture of tests/captures/ through the NVML
double's replay, held to each capture's reviewed golden file (issue 40). A capture without one fails
until ``python -m tests.golden tests/captures/NAME.json`` writes it and its diff is reviewed."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests import golden
from tests.conftest import assert_promtool_clean

CAPTURES = golden.captures()


def test_the_corpus_covers_the_gpus_drivers_and_hardware_it_promises():
    """At least 10 captures, 5 models, drivers of the 580, 590, 595 and 610 branches, MIG on and off, a
    GPU without GPM and one without NVLink."""
    from warptd.capture import schema

    read = {path.name: schema.Capture.read(path) for path in CAPTURES}
    assert len(read) >= 10
    models = {c.gpus[0].identity.name for c in read.values()}
    assert len(models) >= 5, models
    assert {"580", "590", "595", "610"} <= {c.node.driver_version.split(".")[0] for c in read.values()}
    modes = [c.gpus[0].states[schema.IDLE].call("nvmlDeviceGetMigMode") for c in read.values()]
    assert {a.value[0] if a is not None and a.ok else 0 for a in modes} == {0, 1}  # type: ignore[index]
    no_gpm = [
        name
        for name, c in read.items()
        if (a := c.gpus[0].states[schema.IDLE].call("nvmlGpmQueryDeviceSupport")) is not None
        and a.ok
        and not a.value["isSupportedDevice"]
    ]
    no_nvlink = [
        name
        for name, c in read.items()
        if (a := c.gpus[0].states[schema.IDLE].call("nvmlDeviceGetNvLinkState", 0)) is not None
        and a.ret == schema.NOT_SUPPORTED
    ]
    assert no_gpm and no_nvlink


@pytest.mark.parametrize("capture", CAPTURES, ids=[path.stem for path in CAPTURES])
def test_every_capture_has_its_reviewed_golden_file(capture):
    path = golden.golden_path(capture)
    assert path.exists(), (
        f"{capture.name} has no golden file: run `{golden.COMMAND} tests/captures/{capture.name}`, "
        "review what it wrote and commit it"
    )


#: A series of a device in a golden file: its family and the device's UUID.
DEVICE_SERIES = re.compile(r'^(warptd_\w+)\{[^}]*uuid="([^"]+)"')


@pytest.mark.parametrize("capture", CAPTURES, ids=[path.stem for path in CAPTURES])
def test_the_default_costs_at_most_60_series_a_gpu_on_every_captured_gpu(capture):
    """docs/metrics.md's promise (issue 39) on real GPUs, not only the double's models: each GPU or MIG
    device of each state, its per-process series (the golden run asks --processes) apart."""
    per_device: Counter[tuple[str, str]] = Counter()
    state = ""
    for line in golden.golden_path(capture).read_text().splitlines():
        state = line if line.startswith("[") else state
        found = DEVICE_SERIES.match(line)
        if found and not found[1].startswith(("warptd_device_process_", "warptd_process_")):
            per_device[state, found[2]] += 1
    assert per_device and max(per_device.values()) <= 60, per_device.most_common(1)


@pytest.mark.slow
def test_warptd_over_every_capture_exports_what_was_reviewed():
    """Every state of every capture, several at once: the series (present and absent, labels, steady
    values, types), the doctor's findings and what rests on the model, as the golden files hold them;
    and every exposition clean for promtool."""
    runs = golden.run_all(CAPTURES)
    failures = []
    for capture, by_state in runs.items():
        for found in by_state.values():
            assert_promtool_clean(found.exposition)
        path = golden.golden_path(capture)
        expected = path.read_text() if path.exists() else ""
        diff = golden.differences(expected, golden.render(capture, by_state))
        if diff:
            failures.append(f"{path.name}:\n  " + "\n  ".join(diff[:40]))
    assert not failures, (
        "warptd over these captures is not what was reviewed (if the change is right, regenerate with "
        f"`{golden.COMMAND} CAPTURE` and review the diff):\n" + "\n".join(failures)
    )
