"""Each command's flags, and what its ``--help`` promises of them (issue 39, finding 20)."""

from __future__ import annotations

import re

import pytest

from warptd.arguments import _COMMAND_GROUPS, _FLAGS, build_parser
from warptd.config import Settings

COMMANDS = [command for command, groups in _COMMAND_GROUPS.items() if groups]


def _help(command: str, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")  # as a person's 80-column terminal shows it
    parser = build_parser()
    if command != "serve":
        parser = parser._subparsers._group_actions[0].choices[command]  # argparse keeps them there
    return parser.format_help()


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_the_variable_of_every_flag_it_offers(command, monkeypatch):
    """The help's rule, or its list of exceptions, gives each flag's WARPTD_* variable: the right one."""
    text = " ".join(_help(command, monkeypatch).split())
    assert all(len(line) <= 80 for line in _help(command, monkeypatch).splitlines())
    named = dict(re.findall(r"(--[a-z-]+): (WARPTD_[A-Z_]+)", text.split("Named otherwise:")[-1]))
    for title in _COMMAND_GROUPS[command]:
        for names, options in _FLAGS[title]:
            flag, setting = names[0], options["dest"]  # every shared flag names its setting
            told = named.get(flag, "WARPTD_" + flag.removeprefix("--").replace("-", "_").upper())
            assert told == f"WARPTD_{setting.upper()}", f"{command} --help: {flag} is {told}?"
            assert setting in Settings.model_fields


def test_the_daemons_help_names_every_setting_no_flag_sets(monkeypatch):
    text = " ".join(_help("serve", monkeypatch).split())
    without = re.findall(r"WARPTD_[A-Z_]+", text.split("Without a flag:")[1].split(".")[0])
    flagged = {o["dest"] for title in _COMMAND_GROUPS["serve"] for n, o in _FLAGS[title]}
    assert {f"WARPTD_{name.upper()}" for name in set(Settings.model_fields) - flagged - {"config"}} == set(
        without
    )


@pytest.mark.parametrize("command", ["sample", "doctor"])
@pytest.mark.parametrize("flag", ["--carbon-intensity", "--energy-price", "--window-interval"])
def test_commands_that_record_nothing_offer_no_recording_flag(command, flag, capsys, monkeypatch):
    assert flag not in _help(command, monkeypatch)
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([command, flag, "1"])
    assert exited.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
    for recording in ("serve", "stress", "profile"):
        assert flag in _help(recording, monkeypatch)
