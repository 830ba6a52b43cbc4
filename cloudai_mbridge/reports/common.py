"""What the scenario reports share: finding our runs in a results tree, writing CSV + HTML without half files."""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cloudai.core import Reporter, TestRun

from ..metrics import safejson
from ..metrics.layout import config_problem
from ..metrics.training import run_title  # noqa: F401  (the reports import it from here)
from .page import fmt, html_page, html_table  # noqa: F401  (the reports import them from here)


class TolerantLoading:
    """For our scenario reporters: ``load_test_runs`` is :func:`load_test_runs`."""

    def load_test_runs(self) -> None:
        load_test_runs(self)  # type: ignore[arg-type]


def load_test_runs(reporter: Reporter) -> None:
    """CloudAI's ``Reporter.load_test_runs``, made tolerant of a damaged results tree: a folder whose name is not a
    number is skipped (CloudAI's raises ValueError and loses every report of the scenario), and an unreadable
    ``test-run.toml`` leaves that run with the scenario's test definition (CloudAI's raises), with a warning."""
    import copy

    import toml

    def numbered(folder: Path) -> list[Path]:
        runs = []
        for entry, why in run_folders(folder):
            if why is None:
                runs.append(entry)
            else:
                skipped_entry(entry, why)
        return sorted(runs, key=lambda d: int(d.name))

    for scenario_tr in reporter.test_scenario.test_runs:
        tr = copy.deepcopy(scenario_tr)
        # Asked once, of the scenario's run: ``tr.test`` becomes each step's unrolled definition below, which is no
        # DSE job any more (asking ``tr`` again numbered every step after the first 0 in the reports).
        dse = scenario_tr.is_dse_job
        for it in numbered(reporter.results_root / tr.name):
            tr.current_iteration = int(it.name)
            for step in numbered(it) if dse else [it]:
                tr.step = int(step.name) if dse else 0
                tr.output_path = step
                tr.test = scenario_tr.test
                dump = step / "test-run.toml"
                if dse and dump.is_file():
                    try:
                        from ..safe_read import MAX_TOML_BYTES, read_text

                        text = read_text(dump, MAX_TOML_BYTES, "CloudAI's test-run.toml")
                        tr.test = tr.test.model_validate(toml.loads(text)["test_definition"])
                    except Exception as exc:  # once, not once per report of the scenario
                        _warn_once(dump, f"unreadable ({type(exc).__name__}); the scenario's test definition is used")
                reporter.trs.append(copy.deepcopy(tr))


def _is_run_number(name: str) -> bool:
    return name.isascii() and name.isdecimal() and len(name) <= 9


def run_folders(folder: Path) -> list[tuple[Path, str | None]]:
    """(entry, why it is skipped or None) for what sits where CloudAI's numbered run folders (``<test>/<N>``, a
    sweep's ``<test>/<N>/<step>``) belong: a folder named by a number is a run; a symbolic link (reports write into
    a run's folder, which would then be wherever the link points, and a link to a sibling counts a run twice), a
    folder not named by a number, or a file or anything else named by one is skipped with why. CloudAI's own files
    there (a sweep's trajectory.csv) are no run folders and are not named. An unlistable folder is no runs."""
    import os
    import stat

    found: list[tuple[Path, str | None]] = []
    try:
        with os.scandir(folder) as entries:
            listed = sorted(entries, key=lambda e: e.name)
    except OSError:
        return found
    for entry in listed:
        path = Path(entry.path)
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        numbered = _is_run_number(entry.name)
        if stat.S_ISLNK(mode):
            found.append((path, f"a symbolic link (to {os.readlink(path)!r}), not a run folder: reports never "
                                "follow one (they write into the run's folder). Fix: replace the link by the "
                                "folder itself, or move it out of the results folder"))
        elif stat.S_ISDIR(mode):
            found.append((path, None if numbered else
                          "a folder whose name is not a run number (CloudAI names each run's folder 0, 1, 2, ...). "
                          "Fix: move it out of the results folder to report it no more"))
        elif numbered:
            found.append((path, "named as a run but not a folder. Fix: move it out of the results folder"))
    return found


_SAID: set[tuple[Path, str]] = set()


def skipped_entry(path: Path, why: str) -> None:
    """A warning on screen, once per entry and command (every report of the scenario looks at the same tree)."""
    _warn_once(path, f"skipped: {why}")


def _warn_once(path: Path, text: str) -> None:
    if (path, text) not in _SAID:
        _SAID.add((path, text))
        logging.warning("%s: %s", path, text)


def holds(reporter: Reporter, *tdef_types: type) -> bool:
    """Whether the reporter's scenario has a test of one of ``tdef_types``. A scenario report of ours returns at
    once, reading and logging nothing, where it has none: CloudAI runs every enabled scenario report for every
    scenario, and a scenario without our tests must look as under CloudAI alone."""
    return any(isinstance(tr.test, tdef_types) for tr in reporter.test_scenario.test_runs)


def runs_of(reporter: Reporter, tdef_type: type) -> list[tuple[TestRun, dict[str, Any]]]:
    """(test run, the config its payload ran with) for every run of ``tdef_type`` whose config file is a JSON
    object; a run whose config is damaged is left out with a warning (its own report says invalid_config).
    CloudAI's load_test_runs appends to ``reporter.trs``: it runs once per reporter, however many kinds of run a
    report asks for (a second load counted every run twice)."""
    if not getattr(reporter, "_mbridge_runs_loaded", False):
        reporter.load_test_runs()
        reporter._mbridge_runs_loaded = True
    found = []
    for tr in reporter.trs:
        if not isinstance(tr.test, tdef_type):
            continue
        config_path = tr.output_path / "mbridge_config.json"
        if not config_path.is_file():
            logging.warning("%s: no mbridge_config.json; the run is left out of the scenario report", tr.output_path)
            continue
        from ..safe_read import MAX_JSON_BYTES, InputFileError, read_bytes

        try:
            config = safejson.loads(read_bytes(config_path, MAX_JSON_BYTES, "the run's config"))
        except (OSError, ValueError, InputFileError):
            config = None
        problem = config_problem(config) if isinstance(config, dict) else "not a JSON object"
        if problem:
            logging.warning("%s: damaged (%s); the run is left out of the scenario report", config_path, problem)
            continue
        found.append((tr, config))
    return found


def config_label(value: Any) -> str:
    """A recorded config value as a report shows it: a nested table (the payload config's ``model``) by its ``name``
    where it has one, else as compact JSON, never as a Python dict repr of every field."""
    if isinstance(value, Mapping):
        name = value.get("name")
        if isinstance(name, str) and name:
            return name
        return json.dumps(dict(value), sort_keys=True, separators=(",", ":"), default=str)
    return str(value)


def scenario_facts(configs: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> str:
    """A paragraph naming the model(s), dtype(s), GPU and engine(s) of a scenario's runs."""
    items = []
    for key, label in (("model", "model"), ("precision", "dtype"), ("gpu", "GPU"), ("engine", "engine")):
        if key not in keys:
            continue
        values = []
        for c in configs:
            v = c.get(key)
            if v is not None and config_label(v) not in values:
                values.append(config_label(v))
        if values:
            items.append(f"<b>{html.escape(label)}</b>: {html.escape(' / '.join(values))}")
    return f"<p class='facts'>{' · '.join(items)}</p>" if items else ""


def skipped_points(reporter: Reporter, tdef_type: type) -> list[Any]:
    """The sweep points of the scenario's ``tdef_type`` tests that a rule skipped, so no job ran for them
    (preflight.PointResult: test, point, values, rules, reason, whether the test declares it expected): the same
    check `run` made before queueing anything, made again on the scenario and the system."""
    from ..rules.sweep import PointResult, iter_points, sweep_limit_problem

    names = {tr.name for tr in reporter.test_scenario.test_runs if isinstance(tr.test, tdef_type)}
    if not names:
        return []
    found = []
    try:
        too_many = sweep_limit_problem(reporter.test_scenario)  # counted first: never enumerated past the limit
        if too_many:
            raise ValueError(too_many)
        # only the skipped points are kept, as they come (the accepted ones of a large sweep are never held)
        for points, _rows in iter_points(reporter.system, reporter.test_scenario, render=False,
                                         wants=lambda: (0, 1 << 62)):
            found += [p for p in points if isinstance(p, PointResult) and p.test in names and p.checked and not p.ok]
    except Exception as exc:  # the report itself must still be written
        logging.warning("skipped points not listed: the scenario's points could not be checked again (%s)", exc)
        return []
    return found


def skipped_section(points: Sequence[Any]) -> str:
    """A report's "Skipped points" section: each point a rule skipped, with the rule and why."""
    if not points:
        return "<h2>Skipped points</h2><p>None: every sweep point passed the rules and was run.</p>"
    rows = [(p.test, p.point or "—", p.varies, p.rules, p.error or "; ".join(f"{v.message}. Fix: {v.fix}"
             for v in p.violations), "yes" if p.expected else "no") for p in points]
    columns = ["test", "point", "values", "rule", "reason", "declared"]
    headers = {"point": "point (DSE step)", "values": "values that vary", "declared": "declared in "
               "expected_rejections"}
    return (f"<h2>Skipped points</h2><p>{len(points)} sweep point(s) skipped before anything was queued: Megatron "
            "(or the payload) would reject them. No job ran for them; they have no row above.</p>"
            + html_table(columns, rows, ["" if p.expected else "bad" for p in points], headers, SKIPPED_DEFINITIONS))


SKIPPED_DEFINITIONS = {
    "test": "the scenario's test the point belongs to",
    "point": "the point's number in the test's sweep (CloudAI's DSE step)",
    "values": "the swept values of this point",
    "rule": "the id of each rule the point breaks",
    "reason": "what the rule found and how to fix it",
    "declared": "yes when the test names the rule in expected_rejections (then the skip is no error)",
}
