"""Every system file in conf/system/ ships with at least one scenario that fits it: `cloudai-mbridge preflight
--system-config <system> --test-scenario <scenario>` accepts every point (rules, memory, the job rendered in memory)
and nothing makes dry-run refuse the scenario. A new system file without one fails here."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import CONF

SYSTEMS = sorted((CONF / "system").glob("*.toml"))
SCENARIOS = sorted((CONF / "test_scenario").glob("*.toml"))


def fit(system_file: Path, scenario_file: Path) -> tuple[int, int, list[str]]:
    """(accepted points, points, whole-scenario refusals) of the scenario on the system, as preflight counts them."""
    from cloudai.core import Parser
    from cloudai.parser import HOOK_ROOT

    from cloudai_mbridge.cli.preflight import scenario_check
    from cloudai_mbridge.cli.session import session
    from cloudai_mbridge.registration import register

    register()
    with session("dry-run"):  # the cluster is not asked
        system, _, scenario = Parser(system_file, HOOK_ROOT).parse(CONF / "test", scenario_file)
        problems, report = scenario_check(system, scenario)
    if report is None:
        return 0, 0, problems
    return len(report.accepted), len(report.points), problems


@pytest.mark.parametrize("system_file", SYSTEMS, ids=[p.stem for p in SYSTEMS])
def test_every_system_has_a_scenario_that_fits_it(system_file: Path) -> None:
    logging.disable(logging.WARNING)  # the rejections of the scenarios that do not fit are not this test's output
    try:
        tried = []
        # the scenarios that name the system's GPU or kind first: they are the likely fit
        for scenario in sorted(SCENARIOS, key=lambda s: not any(t in system_file.stem for t in s.stem.split("_"))):
            accepted, points, problems = fit(system_file, scenario)
            if points and accepted == points and not problems:
                return
            tried.append(f"{scenario.name} {accepted}/{points}")
    finally:
        logging.disable(logging.NOTSET)
    pytest.fail(f"{system_file} has no scenario in conf/test_scenario/ whose every point preflight accepts "
                f"({', '.join(tried)}). Fix: add one that fits this system")


def test_a_system_without_a_fitting_scenario_is_found(tmp_path: Path) -> None:
    """The check above can fail: a B300 system with 1 node of 1 GPU fits none of the shipped scenarios."""
    text = (CONF / "system" / "slurm_b300_ib.toml").read_text()
    tiny = tmp_path / "tiny.toml"
    tiny.write_text(text.replace("gpus_per_node = 8", "gpus_per_node = 1"))
    assert "gpus_per_node = 1" in tiny.read_text()
    results = [fit(tiny, s) for s in SCENARIOS]
    assert not any(points and accepted == points and not problems for accepted, points, problems in results)
