"""Which dcgm-exporter release ``--compat dcgm-exporter`` replaces, and so its node label (issue 39,
finding 21): ``hostname`` since dcgm-exporter's PR #655, ``Hostname`` in 4.5.3-4.8.2 and before."""

from __future__ import annotations

import pytest

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
