"""docs/deploy.md's fleet figures and deploy/prometheus/agent.yml's queue come from the measured series
counts (warptd/metrics/series_counts.py), as docs/metrics.md does (issue 39 #15)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from warptd.metrics import docs, nvidia
from warptd.metrics.series_counts import MODELS

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "docs" / "deploy.md"
AGENT = ROOT / "deploy" / "prometheus" / "agent.yml"


def test_the_fleet_figures_of_deploy_md_are_generated_from_the_measured_counts():
    text = DEPLOY.read_text()
    begin, end = text.index(docs.FLEET_BEGIN), text.index(docs.FLEET_END) + len(docs.FLEET_END) + 1
    assert text[begin:end] == docs.render_fleet(), (
        "run python -m warptd.metrics.docs fleet and paste it between the markers of docs/deploy.md"
    )


def test_deploy_md_states_no_series_figure_outside_the_generated_block():
    """The figures the old text gave by hand (per GPU, per node, a node's own) contradicted metrics.md:
    every number of series and samples in the Fleets section now comes from the generated block."""
    text = DEPLOY.read_text()
    fleets = text[text.index("## Fleets") : text.index("### Agent mode and remote write")]
    outside = fleets.replace(fleets[fleets.index(docs.FLEET_BEGIN) : fleets.index(docs.FLEET_END)], "")
    stated = re.findall(r"\b(\d[\d,.]*)\s*(?:M\s*)?(?:series|samples)", outside)
    assert stated == ["60"], stated  # the bound itself: "at most 60 series per GPU"


def test_every_model_measured_keeps_the_default_at_most_60_series_per_gpu():
    figures = docs.fleet_figures()
    assert max(figures[model]["default"]["gpu"] for model in MODELS) <= 60


def test_the_agent_queue_carries_twice_every_family_of_its_nodes_at_a_one_second_round_trip():
    queue = yaml.safe_load(AGENT.read_text())["remote_write"][0]["queue_config"]
    samples = docs.agent_samples_per_s()
    per_send = queue["max_samples_per_send"]
    assert queue["max_shards"] >= docs.shards_needed(samples["every"], per_send)
    assert queue["capacity"] >= 3 * per_send  # a shard buffers 3 requests while one is slow
    comment = AGENT.read_text()
    assert f"about {docs.about(samples['default'])} samples a second" in comment
    assert f"{docs.about(samples['every'])} with every family" in comment


def _ids_named(line: str) -> set[int]:
    """The field ids a line of the NVIDIA reads table names: ``fields 32-34, 39`` and ``NAME (94)``."""
    ids: set[int] = set(map(int, re.findall(r"\((\d+)\)", line)))
    for listed in re.findall(r"fields ([\d, -]+)", line):
        for span in listed.split(","):
            first, _, last = span.strip().partition("-")
            ids.update(range(int(first), int(last or first) + 1))
    return ids


def test_numbered_names_and_ranges_are_folded():
    assert docs._ranges([34, 32, 33, 39, 41, 40]) == "32-34, 39-41"
    assert docs._names(["NVDEC_0_UTIL", "NVDEC_1_UTIL", "NVDEC_2_UTIL", "SM_UTIL"]) == [
        "NVDEC_{0-2}_UTIL",
        "SM_UTIL",
    ]
    assert docs._names(["nvmlDeviceGetFanSpeed_v2"]) == ["nvmlDeviceGetFanSpeed_v2"]


def test_the_table_of_nvidia_reads_names_every_row_and_no_other_field():
    lines = {line.split("`")[1]: line for line in docs._nvidia_reads().splitlines() if line.startswith("| `")}
    for spec in {row.metric for row in nvidia.ROWS}:
        rows = [row for row in nvidia.ROWS if row.metric is spec]
        fields = {row.source.id for row in rows if isinstance(row.source, nvidia.Field)}
        assert _ids_named(lines[spec.name]) == fields, spec.name
        for row in rows:
            if not isinstance(row.source, nvidia.Field):
                assert re.sub(r"\d+", "", row.source.name) in re.sub(
                    r"\{[\d, -]+\}|\d+", "", lines[spec.name]
                )
