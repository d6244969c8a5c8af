"""``warptd workload KIND ID``: the flags it refuses before it asks a daemon anything."""

from __future__ import annotations

from warptd.cli import main


def test_the_cli_refuses_report_outputs_it_cannot_write_or_without_an_id(tmp_path, capsys):
    assert main(["workload", "slurm_job", "--report", str(tmp_path / "a.html")]) == 2
    assert main(["workload", "--json", str(tmp_path / "a.json")]) == 2
    assert "need KIND and ID" in capsys.readouterr().err
    assert main(["workload", "slurm_job", "1", "--json", str(tmp_path / "missing" / "a.json")]) == 2
    assert "cannot write" in capsys.readouterr().err
    same = str(tmp_path / "a.html")  # the messages name this command's flags, not profile's
    assert main(["workload", "slurm_job", "1", "--report", same, "--json", same]) == 2
    assert "--json and --report name the same file" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written, nothing asked of a daemon
