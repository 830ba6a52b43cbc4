"""Issue 46 (6): markup in a test's name, a scenario's results path or a failure text stays text on the terminal.
CloudAI prints its "Scenario results" table after every run and generate-report with Rich, which reads each cell as
markup: ``[bold red]x[/]`` was styled away, ``[link=...]`` became a hyperlink, ``:boom:`` an emoji, and a stray
``[/x]`` raised MarkupError. In our commands the cells CloudAI fills from the input are plain text
(session.replace_summary_table); its own PASSED/FAILED stays styled. The real CloudAI reporter prints the table here.

Own inputs (not the issue's): a Rich style, a closing tag with no opening one, a link, an emoji code."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import CONF

from cloudai_mbridge.cli import session as plugin_session
from cloudai_mbridge.registration import register

CASE = "case[bold red]x[/]y[/nope]:boom:"
FOLDER = "r[link=https:evil.example]z[/link]"  # one folder: no "/" in it


def _printed(tmp_path: Path, caplog: pytest.LogCaptureFixture, ours: bool) -> str:
    from cloudai.core import Parser
    from cloudai.models.scenario import ReportConfig
    from cloudai.parser import HOOK_ROOT
    from cloudai.reporter import StatusReporter

    register()
    system, _tests, scenario = Parser(CONF / "system" / "local_slurm.toml", HOOK_ROOT).parse(
        CONF / "test", CONF / "test_scenario" / "refit_cpu_smoke.toml")
    tr = scenario.test_runs[0]
    tr.name = CASE
    results = tmp_path / FOLDER
    (results / tr.name / "0" / ("0" if tr.is_dse_job else "")).mkdir(parents=True)
    reporter = StatusReporter(system, scenario, results, ReportConfig(enable=True))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        if ours:
            with plugin_session.tolerant_reports():
                reporter.load_test_runs()
                reporter.print_summary()
        else:
            reporter.load_test_runs()
            reporter.print_summary()
    return caplog.text


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # Rich folds a cell at the terminal's width: one line per cell here
    monkeypatch.setenv("NO_COLOR", "1")


def test_the_summary_table_shows_names_and_paths_as_written(tmp_path: Path, caplog) -> None:
    text = _printed(tmp_path, caplog, ours=True)
    assert CASE in text, text
    assert FOLDER in text, text
    assert text.count(FOLDER) == 2, "in the path and in our failure text (no_logs ... in <path>)"
    assert "FAILED" in text and "[red]" not in text and "[bold]" not in text, "CloudAI's own status stays styled"


def test_without_the_replacement_rich_reads_the_markup(tmp_path: Path, caplog) -> None:
    """What the replacement is for (and proof that the test above can fail): CloudAI's table alone eats the markup or
    stops at the stray closing tag."""
    from rich.errors import MarkupError

    try:
        text = _printed(tmp_path, caplog, ours=False)
    except MarkupError:
        return
    assert CASE not in text and FOLDER not in text
