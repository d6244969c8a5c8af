"""docs/metrics.md is generated from the catalog and must be current."""

from pathlib import Path

from warptd.metrics.catalog import EVERY
from warptd.metrics.docs import render_markdown

DOC = Path(__file__).parents[1] / "docs" / "metrics.md"


def test_metrics_doc_is_current():
    assert DOC.read_text() == render_markdown(), "run: python -m warptd.metrics.docs > docs/metrics.md"


def test_catalog_follows_prometheus_naming():
    units = (
        "_bytes",
        "_ratio",
        "_watts",
        "_joules",
        "_celsius",
        "_hertz",
        "_seconds",
        "_info",
        "_up",
        "_active",
    )
    units += ("_running", "_per_second", "_open")
    # Unitless gauges: counts of things (rows, pages, processes), 0/1 states and enumerations.
    units += ("_rows", "_pages", "_processes", "_pending", "_failure", "_action", "_state")
    for spec in EVERY:
        assert spec.name.startswith("warptd_"), spec.name
        if spec.type == "counter":
            assert spec.name.endswith("_total"), spec.name
        else:
            assert not spec.name.endswith("_total"), spec.name
            assert spec.name.endswith(units), f"{spec.name} has no base-unit suffix"
        assert "percent" not in spec.name


ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"


def test_every_setting_and_flag_is_in_the_configuration_reference():
    """The settings table names each setting's environment variable and every flag the CLI takes."""
    from warptd.arguments import build_parser
    from warptd.config import Settings

    text = CONFIGURATION.read_text()
    for name in Settings.model_fields:
        if name != "config":
            assert f"`WARPTD_{name.upper()}" in text, (
                f"WARPTD_{name.upper()} missing from docs/configuration.md"
            )
    flags = {
        flag for action in build_parser()._actions for flag in action.option_strings if flag.startswith("--")
    }
    for flag in flags - {"--help", "--version"}:
        assert f"`{flag}" in text, f"{flag} missing from docs/configuration.md"


def test_the_settings_table_is_current():
    """Each setting's row (flag, variable, default, description) is made from its field: issue 41."""
    from warptd.config.docs import settings_table

    assert settings_table() in CONFIGURATION.read_text(), (
        "run: python -m warptd.config.docs and paste it between the markers of docs/configuration.md"
    )


def test_readme_opens_with_what_warptd_is_then_the_two_commands():
    lines = README.read_text().splitlines()
    intro = " ".join(lines[2 : lines.index("```sh")]).strip()
    assert intro.startswith("warptd is ") and intro.count(". ") == 1 and intro.endswith(".")
    commands = [lines[i + 1] for i, line in enumerate(lines) if line == "```sh"][:2]
    assert commands[0] == "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/warptd"
    assert commands[1].startswith("python3 -m venv .venv && ") and commands[1].endswith("pytest")  # .ci/run
    first_screen = "\n".join(lines[:50])
    assert ".venv/bin/pip install '.[amd]'" in first_screen  # how to add a vendor


def test_readme_and_docs_links_resolve():
    import re

    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).is_file(), f"{page.name} links to missing {target}"


def test_the_recording_schema_in_the_docs_is_current():
    from warptd.recording.docs import schema_markdown

    text = (ROOT / "docs" / "recordings.md").read_text()
    assert schema_markdown() in text, (
        "run: python -m warptd.recording.docs and paste it into docs/recordings.md"
    )


def test_the_readme_names_every_external_tool_the_tests_need():
    """Issue 39, finding 20: chromium was left out. A tool the tests ask for by name is either in the
    test extra (installed by pip with the suite) or named in the README's test command paragraph."""
    import re
    import tomllib

    asked = {
        name
        for path in (ROOT / "tests").rglob("*.py")
        for name in re.findall(r'require_tool\("([^"]+)"\)', path.read_text())
    }
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    from_pip = {re.split(r"[<>=\[ ]", requirement)[0].removesuffix("-bin") for requirement in extra}
    text = README.read_text()
    paragraph = text[text.index("The first command, run in a checkout") :].split("\n\n")[0]
    assert "chromium" in asked
    for tool in sorted(asked - from_pip):
        assert f"`{tool}`" in paragraph, f"README's test paragraph does not name {tool}"
