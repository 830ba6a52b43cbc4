"""Issue 46 (6): markup in a scenario name or a test's name or description stays text in every page our commands
write. Our pages escape what they show (reports/page.py); CloudAI's scenario pages (StatusReporter's <scenario>.html,
DSEReporter's) are rendered by a jinja2 that escapes nothing, so in our generate-report and run they are rendered
with HTML escaping on (session.replace_report_templates). The real CloudAI reporter writes the page here."""

from __future__ import annotations

import html
from pathlib import Path

from helpers import CONF

from cloudai_mbridge.cli import session as plugin_session
from cloudai_mbridge.registration import register

NAME = "ab<svg onload=alert(1)>&amp;"  # no "/": the name is also the page's file name
DESCRIPTION = "<img src=x onerror=alert(2)> & <b>bold</b>"


def _status_page(tmp_path: Path, escaped: bool) -> str:
    from cloudai.core import Parser
    from cloudai.models.scenario import ReportConfig
    from cloudai.parser import HOOK_ROOT
    from cloudai.reporter import StatusReporter

    register()
    system, _tests, scenario = Parser(CONF / "system" / "local_slurm.toml", HOOK_ROOT).parse(
        CONF / "test", CONF / "test_scenario" / "refit_cpu_smoke.toml")
    scenario.name = NAME
    tr = scenario.test_runs[0]
    tr.test.description = DESCRIPTION
    results = tmp_path / ("escaped" if escaped else "plain")
    (results / tr.name / "0" / ("0" if tr.is_dse_job else "")).mkdir(parents=True)  # a sweep's: <N>/<step>
    reporter = StatusReporter(system, scenario, results, ReportConfig(enable=True))
    if escaped:
        with plugin_session.tolerant_reports():
            reporter.load_test_runs()
            reporter.generate_scenario_report()
    else:
        reporter.load_test_runs()
        reporter.generate_scenario_report()
    return (results / f"{NAME}.html").read_text()


def test_cloudais_scenario_page_shows_markup_as_text_in_our_commands(tmp_path: Path) -> None:
    page = _status_page(tmp_path, escaped=True)
    assert "<svg onload" not in page and "<img src=x" not in page and "<b>bold" not in page
    assert html.escape(NAME) in page and html.escape(DESCRIPTION, quote=False) in page
    assert "<table>" in page, "CloudAI's own markup stays markup"


def test_without_the_replacement_cloudais_page_runs_the_markup(tmp_path: Path) -> None:
    """What the replacement is for (and proof that the test above can fail)."""
    page = _status_page(tmp_path, escaped=False)
    assert "<svg onload=alert(1)>" in page and "<img src=x onerror=alert(2)>" in page


def test_our_own_page_escapes_a_title_and_sections() -> None:
    from cloudai_mbridge.reports.page import html_page, html_table

    page = html_page(NAME, [html_table(["test"], [[DESCRIPTION]])])
    assert "<svg onload" not in page and "<img src=x" not in page and html.escape(NAME) in page
