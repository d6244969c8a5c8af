"""``warptd report`` given what is not a recording says what it was given (issue 39, finding 13)."""

from __future__ import annotations

from warptd.recording.cli import run_report


def test_an_html_report_given_back_names_the_json_to_give(tmp_path, capsys):
    report = tmp_path / "r.json"
    report.write_text("<!DOCTYPE html>\n<html><head><title>warptd</title></head></html>\n")
    assert run_report([str(report)], str(tmp_path / "out.html")) == 2
    said = capsys.readouterr().err
    assert said == (
        f"warptd report: {report} is an HTML report, not a recording's JSON: give the JSON saved with it "
        "(warptd profile's --save FILE, or the .json beside its --output FILE.html)\n"
    )
    assert not (tmp_path / "out.html").exists()
