"""NVIDIA's table (warptd/metrics/nvidia.py): each row names what nvml.h and nvidia-ml-py name, the NVML
double answers every field row, and every family of the table is the catalog's."""

from __future__ import annotations

import pynvml
import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from warptd.config import load_settings
from warptd.metrics import catalog, nvidia
from warptd.metrics.spec import CONVERSIONS, DEVICE_LABELS, Call, Entry, Field, MetricSpec


def test_every_field_row_is_named_as_nvidia_ml_py_numbers_it():
    for row in nvidia.FIELDS:
        assert getattr(pynvml, row.source.name) == row.source.id, row.source


def test_every_call_and_gpm_row_is_one_nvidia_ml_py_has():
    for row in nvidia.ROWS:
        if isinstance(row.source, Call):
            assert callable(getattr(pynvml, row.source.name)), row.source
        elif isinstance(row.source, Entry):
            assert isinstance(getattr(pynvml, row.source.name), int), row.source


def test_the_gpm_rows_are_of_the_two_units_the_gpm_reader_converts():
    """Percent into a ratio gauge, MiB/s integrated into a byte counter (warptd.backends.nvidia.gpm)."""
    for row in nvidia.GPM_METRICS:
        assert (row.unit, row.metric.type) in {("percent", "gauge"), ("MiB/s", "counter")}, row


def test_every_row_has_a_known_unit_and_the_labels_of_its_family():
    for row in nvidia.ROWS:
        assert row.unit in CONVERSIONS, row
        own = len(row.metric.labels) - len(DEVICE_LABELS)
        labelled_by_answer = row.metric in (nvidia.FAN_SPEED, nvidia.RECOVERY_ACTION)  # the fan, the action
        assert len(row.labels) == own - labelled_by_answer, row


def test_the_catalog_has_every_family_of_the_table_in_the_order_of_its_rows():
    declared = {value for value in vars(nvidia).values() if isinstance(value, MetricSpec)}
    assert set(nvidia.FAMILIES) == declared  # no family declared without a row
    position = catalog.ALL.index(nvidia.FAMILIES[0])
    assert catalog.ALL[position : position + len(nvidia.FAMILIES)] == nvidia.FAMILIES
    assert {catalog.BY_NAME[family.name] for family in nvidia.FAMILIES} == set(nvidia.FAMILIES)


@pytest.fixture
def answering():
    """An H100 SXM (18 NVLinks, rows remapped) and a GPU that retires pages instead (before Ampere),
    each with its NVML handle."""
    remapping, retiring = FakeGpu(0), FakeGpu(1)
    retiring.retires_pages = 1
    fake = FakeNvml([remapping, retiring])
    with fake.installed():
        pynvml.nvmlInit()
        try:
            yield [(gpu, pynvml.nvmlDeviceGetHandleByIndex(gpu.index)) for gpu in fake.gpus]
        finally:
            pynvml.nvmlShutdown()
    fake.close()


def test_the_double_answers_every_field_row(answering):
    """A field of the table that the double neither models nor has in FIELD_ANSWERS would test nothing:
    it answers NOT_SUPPORTED, and its series is absent from every test."""
    keys = [row.source.key for row in nvidia.FIELDS]
    unanswered = set(keys)
    for _, handle in answering:
        for answer in pynvml.nvmlDeviceGetFieldValues(handle, keys):
            if answer.nvmlReturn == pynvml.NVML_SUCCESS:
                unanswered.discard((answer.fieldId, answer.scopeId))
    assert not unanswered


def test_a_field_answered_as_given_is_one_gpu_s_own_at_scope_0(answering):
    """The mechanism FIELD_ANSWERS uses: a field the double does not model (95, PCIe replay rollovers)
    answers as given, on that GPU, at scope 0; NOT_SUPPORTED where the GPU lacks the field."""
    (gpu, handle), (_, other) = answering
    rollovers = Field(95, "NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER")
    assert getattr(pynvml, rollovers.name) == rollovers.id

    def answer(on: object, scope: int = 0) -> tuple[int, int]:
        value = pynvml.nvmlDeviceGetFieldValues(on, [(rollovers.id, scope)])[0]
        return value.nvmlReturn, value.value.ullVal

    assert answer(handle)[0] == pynvml.NVML_ERROR_NOT_SUPPORTED  # not modelled: not answered
    gpu.answer_field(rollovers.id, 7)
    assert answer(handle) == (pynvml.NVML_SUCCESS, 7)
    gpu.field_answer[rollovers.id] = 9
    assert answer(handle) == (pynvml.NVML_SUCCESS, 9)
    assert answer(handle, scope=1)[0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert answer(other)[0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    gpu.unsupported_fields = {rollovers.id}
    assert answer(handle)[0] == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_flags_environment_and_file_give_the_lists(monkeypatch, tmp_path):
    config = tmp_path / "warptd.toml"
    config.write_text(
        'metrics_exclude = ["warptd_device_pcie_*"]\nmetrics_include = ["warptd_device_engine_*"]\n'
    )
    s = load_settings(config=config)
    assert (s.metrics_exclude, s.metrics_include) == (["warptd_device_pcie_*"], ["warptd_device_engine_*"])
    assert not s.metric_selection.wants(nvidia.PCIE_BYTES.name) and s.metric_selection.wants(
        nvidia.ENGINE_ACTIVE.name
    )
    monkeypatch.setenv("WARPTD_METRICS_EXCLUDE", "warptd_device_clock_*, warptd_device_fan_speed_ratio")
    s = load_settings(config=config)
    assert s.metrics_exclude == ["warptd_device_clock_*", "warptd_device_fan_speed_ratio"]  # env over file
    from warptd.arguments import build_parser

    args = build_parser().parse_args(
        ["serve", "--metrics-exclude", "warptd_device_up", "--metrics-exclude", "warptd_build_info"]
    )
    assert args.metrics_exclude == ["warptd_device_up", "warptd_build_info"]
