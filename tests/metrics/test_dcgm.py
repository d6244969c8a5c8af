"""Which dcgm-exporter release ``--compat dcgm-exporter`` replaces, and so its node label (issue 39,
finding 21): ``hostname`` since dcgm-exporter's PR #655, ``Hostname`` in 4.5.3-4.8.2 and before."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest

from tests.dcgm import advance_gpm, compat_rig, expected, identity, scrape, script
from tests.helpers import select
from warptd.config import SettingsError, load_settings
from warptd.metrics import dcgm
from warptd.metrics.dcgm_docs import render_rules


@pytest.mark.parametrize(
    ("release", "label"),
    [
        ("latest", "hostname"),
        ("4.5.3-4.8.2", "Hostname"),  # the last release before the rename
        ("4.8.2", "Hostname"),  # dcgm-exporter's own version alone
        ("4.4.0-4.5.0", "Hostname"),
        ("3.3.9-3.6.1-ubuntu22.04", "Hostname"),  # an image tag as pulled
        ("4.5.3-4.8.3", "hostname"),
        ("4.6.0-4.9.0", "hostname"),
    ],
)
def test_the_node_label_is_the_one_of_the_release_replaced(release, label):
    assert dcgm.node_label(release) == label
    assert dcgm.identity_labels(release)[5] == label
    assert label in dcgm.labels_of(dcgm.COMPAT[0], pods=True, release=release)


def test_the_default_is_the_current_release():
    assert load_settings().dcgm_exporter_release == "latest"
    assert dcgm.node_label() == "hostname"


@pytest.mark.parametrize("release", ["newest", "4.8", "4.5.3-4.8.2; rm -rf /", ""])
def test_a_release_that_is_none_is_one_line_naming_the_forms(release):
    with pytest.raises(SettingsError) as refused:
        load_settings(dcgm_exporter_release=release or " ")
    message = str(refused.value)
    assert "\n" not in message and "dcgm_exporter_release" in message
    assert (
        "not a dcgm-exporter release" in message and "latest, or its image's version: 4.5.3-4.8.2" in message
    )


def test_the_recording_rules_carry_the_label_of_the_release_they_are_made_for():
    current, older = render_rules(), render_rules("4.5.3-4.8.2")
    assert '"hostname", "$1", "node"' in current and "Hostname" not in current.split("groups:")[1]
    assert '"Hostname", "$1", "node"' in older and "hostname" not in older.split("groups:")[1]
    assert "modelName, Hostname, DCGM_FI_DRIVER_VERSION) warptd:dcgm_identity" in older


ROOT = Path(__file__).parents[2]


DATA = ROOT / "tests" / "data" / "dcgm-exporter"


GUIDE = ROOT / "docs" / "migrating-from-dcgm-exporter.md"


def default_counters() -> list[tuple[str, str, str]]:
    """(name, type, help) of every line of dcgm-exporter's etc/default-counters.csv."""
    rows = []
    with (DATA / "default-counters.csv").open() as handle:
        for row in csv.reader(line for line in handle if line.strip() and not line.startswith("#")):
            name, kind, *help_ = (part.strip() for part in row)
            rows.append((name, kind, ",".join(help_).strip()))
    return rows


def test_every_default_counter_is_served_or_documented_as_not_served_with_its_reason():
    counters = default_counters()
    assert len([kind for _, kind, _ in counters if kind != "label"]) == 25  # and the driver version label
    served = {metric.name for metric in dcgm.COMPAT}
    guide = GUIDE.read_text()
    for name, _, _ in counters:
        if name in served or name in dcgm.AS_LABELS:
            continue
        assert name in dcgm.NOT_SERVED, f"{name}: neither served nor listed as not served"
        assert dcgm.NOT_SERVED[name] in guide, f"{name}: the guide does not give the reason"
    assert served | dcgm.AS_LABELS | set(dcgm.NOT_SERVED) == {name for name, _, _ in counters}


def test_names_types_and_help_are_dcgm_exporter_s():
    by_name = {metric.name: metric for metric in (*dcgm.COMPAT, *dcgm.RULES_ONLY)}
    for name, kind, help_ in default_counters():
        if name in by_name:
            assert (by_name[name].type, by_name[name].help) == (kind, help_), name
        else:
            assert kind == "label" or name in dcgm.NOT_SERVED


@pytest.mark.slow
def test_every_served_series_equals_the_double_in_dcgm_exporter_s_units_and_labels(settings, fake_nvml):
    script(fake_nvml)
    time.sleep(1.15)  # the 1 s average (field 185 refreshed every 100 ms): let it hold the new level
    rig = compat_rig(settings, "nvidia")
    try:
        rig.tick()
        advance_gpm(fake_nvml)
        rig.tick_gpm()
        samples = scrape(rig)
    finally:
        rig.close()
    served = {s.name for s in samples if s.name.startswith("DCGM_")}
    assert served == {metric.name for metric in dcgm.COMPAT} - {"DCGM_FI_DEV_XID_ERRORS"}  # no XID monitor
    for index in (0, 1):
        labels = identity(fake_nvml, index, settings.node)
        for name, want in expected(fake_nvml, index).items():
            found = select(samples, name, gpu=str(index))
            assert len(found) == 1, (name, found)
            assert found[0].labels == labels, name
            assert found[0].value == pytest.approx(want, rel=1e-6), (name, index)


def test_the_helm_value_passes_the_flag_and_refuses_another_exporter():
    from tests.e2e.test_deploy import by_kind, render

    def args(values: dict[str, str]) -> list[str]:
        return by_kind(render(values), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"]

    assert "--compat=dcgm-exporter" in args({"compat": "dcgm-exporter"})
    assert not [arg for arg in args({}) if arg.startswith("--compat")]  # off by default
    stderr = render({"compat": "nvidia-smi"}, expect_ok=False)[0]["stderr"]
    assert "compat" in stderr and "values don't meet the specifications of the schema" in stderr
