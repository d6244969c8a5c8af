"""A setting is one field: its flag, variable, config file key, --help line and docs row come from it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.helpers import settings_error
from warptd.arguments import _flag
from warptd.config import Settings, options
from warptd.config.docs import row
from warptd.config.knob import SAMPLING, Option, setting
from warptd.config.settings import PARTS, Part


class _Extra(Part):
    """A setting added by a test, as a new one would be."""

    group = SAMPLING

    probe_interval: float = setting(5.0, "between two probes", "SECONDS", gt=0, le=60, live=True)
    """seconds between two probes of something new"""


class _Extended(Settings, _Extra):
    """The daemon's settings and the new one."""


def test_a_new_setting_is_one_field(monkeypatch, tmp_path):
    """Declared once, the setting has its flag with its default in the help, its variable, its key in
    the config file and its row in the docs: nothing else names it."""
    option = Option("probe_interval", _Extended.model_fields["probe_interval"], SAMPLING)
    parser = argparse.ArgumentParser()
    names, given = _flag(option)
    parser.add_argument(*names, **given)
    assert names == ("--probe-interval",)
    assert given["help"] == "between two probes (default 5)"
    assert parser.parse_args(["--probe-interval", "2.5"]).probe_interval == 2.5
    assert row(option) == (
        "| `--probe-interval` | `WARPTD_PROBE_INTERVAL` | `5` | seconds between two probes of something new |"
    )
    monkeypatch.setenv("WARPTD_PROBE_INTERVAL", "7")
    assert _Extended().probe_interval == 7
    monkeypatch.delenv("WARPTD_PROBE_INTERVAL")
    (tmp_path / "c.toml").write_text("probe_interval = 3\n")
    assert _Extended(config=tmp_path / "c.toml").probe_interval == 3
    with pytest.raises(ValueError, match="less than or equal to 60"):
        _Extended(probe_interval=61)


def test_every_setting_is_described_and_has_one_flag_at_most():
    """Its docstring is its description (the docs row); no two settings share a flag or a variable."""
    every = options()
    assert [o.name for o in every] and sorted(o.name for o in every) == sorted(Settings.model_fields)
    for option in every:
        assert option.field.description, f"{option.name} has no docstring"
        assert option.knob is not None
    flags = [o.flag for o in every if o.flag]
    assert len(flags) == len(set(flags))
    assert {part.group for part in PARTS} == {o.group for o in every}


@pytest.mark.parametrize(
    ("name", "flag"),
    [
        ("stress", "--no-stress"),  # a switch on by default turns it off
        ("pod_labels", "--pod-labels"),  # one off by default turns it on
        ("backends", "--backend"),  # a flag named otherwise
        ("window_energy_names", "--window-energy-name"),
        ("interval", "--interval"),
        ("node", None),  # no flag: the variable and the file only
        ("stress_history", None),
    ],
)
def test_a_flag_is_the_settings_name_unless_its_knob_says_otherwise(name, flag):
    option = next(o for o in options() if o.name == name)
    assert option.flag == flag


def test_the_reloadable_settings_are_the_knobs_marked_live():
    from warptd.config import RELOADABLE

    assert {o.name for o in options() if o.knob.live} == RELOADABLE
    assert {"interval", "window_memory", "stress_token_file", "log_level"} <= RELOADABLE
    assert not {"listen", "backends", "sysfs", "stress", "node", "procfs"} & RELOADABLE


def test_reloadable_settings_are_settings_and_the_shape_of_the_process_is_not():
    from warptd.config import RELOADABLE, Settings

    assert set(RELOADABLE) <= set(Settings.model_fields)
    assert not {"listen", "backends", "sysfs", "stress", "node", "procfs"} & RELOADABLE


def test_a_device_as_the_token_file_is_refused_without_reading_it():
    """/dev/zero took RSS to 3.4 GiB and the daemon never started; /dev/null reads as empty."""
    settings = Settings(stress_token_file=Path("/dev/null"))
    assert (
        settings_error(settings.stress_token_value) == "invalid setting stress_token_file: not a regular file"
    )


def test_window_memory_reads_sizes():
    assert Settings(window_memory="16MiB").window_memory == 16 * 2**20
    assert Settings(window_memory="512KiB").window_memory == 512 * 2**10
    assert Settings(window_memory=2**20).window_memory == 2**20
    with pytest.raises(ValueError, match="not a size"):
        Settings(window_memory="plenty")
    with pytest.raises(ValueError):
        Settings(window_memory="1KiB")  # below 64 KiB


def test_a_change_of_selection_needs_a_restart():
    from warptd.config import RELOADABLE

    assert not {"metrics_exclude", "metrics_include"} & RELOADABLE
