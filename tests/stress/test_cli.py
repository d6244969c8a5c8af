"""``warptd stress`` as a person runs it on a node without an accelerator, or without torch (issue 39,
finding 19): one line that says what to do, exit 2, nothing started."""

from __future__ import annotations

from warptd.cli import main
from warptd.install import install_command
from warptd.stress import jobs


def _stress(tmp_path, *flags: str) -> int:
    paths = ["--sysfs", str(tmp_path), "--procfs", str(tmp_path)]
    return main(["--backend", "cpu", *paths, "stress", "--duration", "1", *flags])


def test_without_an_accelerator_the_cpu_must_be_named(tmp_path, capsys):
    assert _stress(tmp_path) == 2
    assert capsys.readouterr().err == (
        "warptd: no accelerator on this node (warptd list --verbose says why each backend did not load); "
        "to stress the CPU, name it: --device cpu:0\n"
    )


def test_without_torch_it_gives_the_pip_command_here_and_no_daemon(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(jobs, "torch_installed", lambda: False)
    assert _stress(tmp_path, "--device", "cpu:0") == 2
    err = capsys.readouterr().err
    assert err == f"warptd: torch is not installed: install the stress extra: {install_command('stress')}\n"
