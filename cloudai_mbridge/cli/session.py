"""What ``cloudai-mbridge dry-run`` and ``run`` add around CloudAI's own flow.

dry-run: CloudAI's Slurm flow queries the cluster even when nothing is submitted (``sinfo``/``squeue`` in
``SlurmSystem.update``, ``scontrol show config`` for GPU directives, ``sacct`` in ``complete_job`` after every point),
logs ``Submitted slurm job: 0`` and a ``Reward: -1.0`` per DSE point, and generates the scenario reports from results
that cannot exist (a FAILED status table, an empty A/B report). Inside a dry-run session none of that happens: the
cluster is not asked, the per-point job chatter is dropped from the terminal (debug.log keeps it), no report is
generated, and the session ends by saying which job files were written where. A dry-run that writes no job at all
(every point rejected) exits 1.

run: the run's inputs (system, scenario and test TOMLs) are kept in ``<results>/mbridge_inputs/`` (generate-report
reads them from there); it ends with the same accounting as dry-run (points, jobs run, passed, failed, skipped by a
rule with the rule) and the report files written; it exits 1 when every job failed (CloudAI's DSE loop counts a failed
job as a -1 reward and exits 0) or when a rule skipped a point the test does not declare in ``expected_rejections``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import interrupts
from ..atomic import WriteError, failed_write, failures, os_message, os_problem
from ..interrupts import signal_name
from ..launch.payload import CONFIG_NAME, ResultsExistError, check_folder_name, claim_scenario_root

# Terminal lines of CloudAI's runner / DSE loop that describe a submission or a result a dry-run does not have.
_DRY_RUN_NOISE = re.compile(
    r"^(Submitted slurm job: 0$|Job completed: |Step \d+: Observation: |Waiting for all jobs|All jobs are complete"
    r"|Retrieved cached result)"
)


@dataclass
class Session:
    mode: str
    scenario_roots: list[Path] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    refused: bool = False  # the whole scenario was refused before anything was written
    unreadable: bool = False  # ... because a file could not be read (exits.EXIT_INPUT)
    files: str = ""  # the scenario and system files of the command, for messages
    output_dir: Path | None = None  # --output-dir of the command (None: the system's output_path)
    inputs: dict[str, Any] = field(default_factory=dict)  # system_config, test_scenario, tests_dir of the command
    report: Any = None  # preflight.PreflightReport of every sweep point, from the checking parser
    stop_signal: int | None = None  # SIGINT / SIGTERM / SIGHUP received: the sweep stops before its next point
    created: set[Path] = field(default_factory=set)  # point folders this process created
    report_failures: list[str] = field(default_factory=list)  # files of the run's reports that could not be written

    def run_dirs(self) -> list[Path]:
        dirs: list[Path] = []
        for root in self.scenario_roots:
            dirs += sorted((p.parent for p in root.rglob(CONFIG_NAME)), key=_natural)
        return dirs


class SweepStopped(BaseException):
    """The sweep stops before its next point: a signal (``signum``) or a failure of the operating system while a
    point was written (``error``). A BaseException, so that CloudAI's DSE loop, which logs an Exception of a step
    and goes on with the next point, lets it through."""

    def __init__(self, signum: int | None = None, error: OSError | None = None) -> None:
        super().__init__(signum if error is None else error)
        self.signum = signum
        self.error = error


class ScenarioRefusedError(Exception):
    """The scenario is refused as a whole (raised by the checking parser, caught around CloudAI's setup)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


_current: Session | None = None


def describe_error(exc: BaseException) -> str:
    """One line from an exception and its causes; a pydantic error becomes 'field = value: what is wrong' per
    problem (CloudAI wraps them in its own parse errors)."""
    parts: list[str] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        errors = getattr(e, "errors", None)
        if callable(errors) and type(e).__name__ == "ValidationError":
            from .friendly import friendly_lines

            parts += [line for line in friendly_lines(errors()) if line not in parts]
        else:
            text = " ".join(str(getattr(e, "message", "") or e).split())
            if text and text not in parts:
                parts.append(text)
        e = e.__cause__ or e.__context__
    return "; ".join(parts) or type(exc).__name__


def current() -> Session | None:
    return _current


def note_rejected(name: str) -> None:
    """A rule rejected a point of test run ``name`` (workloads/base.py tells it through its rejection listeners)."""
    if _current is not None:
        _current.rejected.append(name)


def _natural(path: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _DRY_RUN_NOISE.match(record.getMessage())


# --------------------------------------------------------------------------------------------------------------
# The CloudAI internals this package replaces: every one is a ``replace_*`` function below and an entry of
# REPLACEMENTS. No CloudAI extension point serves them (each docstring says why); everything that one serves goes
# through CloudAI's Registry instead (registration.py). tests/test_cloudai_surface.py checks, per entry, that the
# pinned CloudAI's original still has the signature and does what the replacement relies on, and fails when a
# replacement of a CloudAI attribute exists anywhere in the package without an entry here.
# --------------------------------------------------------------------------------------------------------------


class Patches:
    """CloudAI attributes replaced for the duration of one command; ``restore`` puts the originals back (last
    first)."""

    def __init__(self) -> None:
        self.saved: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, value: Any) -> None:
        # a class's own attribute (a property stays a property), never one it inherits
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self.saved.append((owner, name, original))
        setattr(owner, name, value)

    def replace_entry(self, mapping: dict[Any, Any], key: Any, value: Any) -> None:
        """A Registry entry (one of CloudAI's maps) for the rest of the command; put back by ``restore``."""
        self.saved.append((mapping, key, mapping.get(key, _ABSENT)))
        mapping[key] = value

    def restore(self) -> None:
        while self.saved:
            owner, name, original = self.saved.pop()
            if isinstance(owner, dict):
                if original is _ABSENT:
                    owner.pop(name, None)
                else:
                    owner[name] = original
            else:
                setattr(owner, name, original)


_ABSENT = object()


def use_our_installer(p: Patches, system: Any, scenario: Any) -> None:
    """run: the Registry's Slurm installer is MBridgeSlurmInstaller (systems/slurm/installer.py: srun's pyxis options
    are not asked for when no item is a container image) for this command, when every test of the scenario is ours.
    Plain ``cloudai``, and any scenario holding a test of CloudAI's, keep CloudAI's SlurmInstaller and its checks."""
    from cloudai.core import Registry
    from cloudai.systems.slurm import SlurmSystem

    from ..workloads.base import MBridgeTestDefinition

    if not isinstance(system, SlurmSystem) or not scenario.test_runs:
        return
    if all(isinstance(tr.test, MBridgeTestDefinition) for tr in scenario.test_runs):
        from ..systems.slurm.installer import MBridgeSlurmInstaller

        p.replace_entry(Registry().installers_map, "slurm", MBridgeSlurmInstaller)


def replace_runner(p: Patches, s: Session) -> None:
    """Replaces ``Runner`` in cloudai/cli/handlers.py (cloudai/_core/runner.py's ``Runner``, which
    ``handle_dry_run_and_run`` constructs by that name) with CloudAI's Runner plus: the scenario and test names
    checked as folder names before CloudAI creates anything; in a dry-run, no wait between points (the runner's
    ``monitor_interval``, its own field, is 0: nothing is being waited for); the scenario folder
    (``runner.runner.scenario_root``, named by the second in ``Runner.create_runner``) claimed atomically, so two
    runs started in one second do not share it; the folder recorded for the session's accounting; in ``run``, the
    inputs kept in it (save_inputs).

    Not the Registry's runner (``update_runner``): the folder is chosen in ``Runner.create_runner`` before the
    scheduler's runner exists, and ``--single-sbatch`` replaces the Slurm runner in the Registry after setup."""
    from cloudai.cli import handlers

    runner_cls = handlers.Runner

    def capturing_runner(*args: Any, **kwargs: Any) -> Any:
        for arg in (*args, *kwargs.values()):  # refused before CloudAI writes anything for the scenario
            if hasattr(arg, "test_runs"):
                check_folder_name("scenario name", arg.name, "test scenario")
                for tr in arg.test_runs:
                    check_folder_name("test id", tr.name, f"test scenario {arg.name!r}")
                if warning := large_sweep_warning(s.mode, arg.test_runs):
                    logging.warning(warning)
        runner = runner_cls(*args, **kwargs)
        if s.mode == "dry-run":
            # CloudAI's runner sleeps monitor_interval (1 s in a dry-run) after every point, for jobs that a dry-run
            # does not have: its own field, set on this runner
            runner.runner.monitor_interval = 0
        root = claim_scenario_root(Path(runner.runner.scenario_root))
        runner.runner.scenario_root = root
        s.scenario_roots.append(root)
        if s.mode == "run":
            try:
                save_inputs(root, **s.inputs)
            except BaseException:
                with contextlib.suppress(OSError):
                    root.rmdir()  # claimed by this process a moment ago, and still empty
                s.scenario_roots.remove(root)
                raise
        stop_between_points(s, runner.runner)
        return runner

    p.replace(handlers, "Runner", capturing_runner)


def replace_parser(p: Patches, s: Session) -> None:
    """Replaces ``Parser`` in cloudai/cli/handlers.py (cloudai/parser.py's ``Parser``, which
    ``_setup_system_and_scenario`` constructs by that name) with a subclass whose ``parse`` checks the scenario as a
    whole (every sweep point's rules, its job rendered in memory: preflight.scenario_check) right after CloudAI's parse:
    before CloudAI asks the cluster (sinfo in ``run``), creates --output-dir, installs or writes anything.

    Not a test definition hook: the check needs the system and every test run of the scenario together, and a refusal
    must stop CloudAI before ``prepare_output_dir``; no CloudAI hook runs between the parse and that."""
    from cloudai.cli import handlers

    parser_cls = handlers.Parser

    class CheckingParser(parser_cls):  # type: ignore[misc, valid-type]
        def parse(self, *args: Any, **kwargs: Any) -> Any:
            result = super().parse(*args, **kwargs)
            system, _tests, scenario = result
            if scenario is not None:
                from .preflight import scenario_check

                problems, s.report = scenario_check(system, scenario, s.files, output_dir=s.output_dir)
                if problems:
                    raise ScenarioRefusedError(problems)
                if s.mode == "run":
                    use_our_installer(p, system, scenario)
            return result

    p.replace(handlers, "Parser", CheckingParser)


# Above this many sweep points a dry-run or run says, before the first point, what it is about to spend.
LARGE_SWEEP = 2000
# benchmarks/results/preflight_grid.txt: dry-run 1,135 s per 1,000 points, preflight 2.3 s (the same checks, no jobs).
DRY_RUN_S_PER_POINT = 1.1


def large_sweep_warning(mode: str, test_runs: Any) -> str | None:
    """One line for a sweep past LARGE_SWEEP points (CloudAI's grid: the product of every swept list): how many, the
    time a dry-run takes at the measured rate, that every point becomes a job folder, and the faster command."""
    from ..rules.sweep import sweep_size

    try:
        total = sum(sweep_size(tr) for tr in test_runs)
    except Exception:  # a test run CloudAI built in a way we do not know: no estimate, no warning
        return None
    if total <= LARGE_SWEEP:
        return None
    hours = total * DRY_RUN_S_PER_POINT / 3600
    took = f"about {hours:,.1f} h" if hours >= 1 else f"about {hours * 60:,.0f} min"
    return (f"{mode}: this scenario sweeps {total:,} points; at the measured {DRY_RUN_S_PER_POINT} s per point a "
            f"dry-run takes {took}, writes a job folder per point and holds every point in memory. "
            "`cloudai-mbridge preflight` checks the same points without writing jobs (about 2 s per 1,000 points); "
            "Ctrl-C stops this one before its next point")


def replace_setup(p: Patches, s: Session) -> None:
    """Replaces ``_setup_system_and_scenario`` in cloudai/cli/handlers.py (called by ``handle_dry_run_and_run``;
    ``None`` makes it return 1) with: the system and scenario files checked first (config_files.py), then CloudAI's
    own setup (with the checking parser of replace_parser); a refusal, a parse error or a CloudAI ``exit`` becomes one
    line naming the files and the fix, and leaves nothing behind.

    Not an extension point: CloudAI's setup has none; its parse errors are raised or exit the process from inside."""
    from cloudai.cli import handlers

    setup = handlers._setup_system_and_scenario
    mode = s.mode

    def checked_setup(args: Any) -> Any:
        s.files = f"{getattr(args, 'test_scenario', '')} (system {getattr(args, 'system_config', '')})"
        s.output_dir = getattr(args, "output_dir", None)
        s.inputs = {k: getattr(args, k, None) for k in ("system_config", "test_scenario", "tests_dir")}
        from .config_files import file_problems

        early = file_problems(getattr(args, "system_config", None), getattr(args, "test_scenario", None))
        if early:
            for problem in early:
                logging.error(f"{mode}: {problem}")
            s.refused = s.unreadable = True
            return None
        fix = ("Fix: correct the field(s) named above; `cloudai-mbridge verify-configs "
               f"{getattr(args, 'test_scenario', None) or '<scenario.toml>'} --system-config "
               f"{getattr(args, 'system_config', None) or '<system.toml>'}` checks them without running anything")
        try:
            result = setup(args)
        except ScenarioRefusedError as exc:
            for problem in exc.problems:
                logging.error(f"{mode}: {problem}")
            logging.error(f"{mode}: nothing was written or submitted: the scenario is refused as a whole "
                          "(reasons above)")
            s.refused = True
            return None
        except SystemExit:  # CloudAI logged what it could not read (file, field, value) and exits
            logging.error(f"{mode}: could not read {s.files}. {fix}")
            s.refused = s.unreadable = True
            raise
        except Exception as exc:  # CloudAI's parser raises (a bad time_limit, an override it cannot apply)
            logging.error(f"{mode}: could not read {s.files}: {describe_error(exc)}. {fix}")
            s.refused = s.unreadable = True
            return None
        if result is None:
            logging.error(f"{mode}: could not read {s.files}. {fix}")
            s.unreadable = True
        return result

    p.replace(handlers, "_setup_system_and_scenario", checked_setup)


def replace_slurm_update(p: Patches) -> None:
    """dry-run: replaces ``SlurmSystem.update`` (cloudai/systems/slurm/slurm_system.py), which runs ``sinfo`` and
    ``squeue``; CloudAI's ``_setup_system_and_scenario`` calls it in dry-run too. Here it asks nothing.

    Not the Registry's system (``update_system``): strategies are looked up by the system's exact type, and preflight
    and verify-configs use systems parsed before the session starts."""
    from cloudai.systems.slurm import SlurmSystem

    def update(self: Any) -> None:
        logging.debug("dry-run: cluster state not queried (no sinfo/squeue)")

    p.replace(SlurmSystem, "update", update)


def replace_slurm_complete_job(p: Patches) -> None:
    """dry-run: replaces ``SlurmSystem.complete_job`` (cloudai/systems/slurm/slurm_system.py), which runs ``sacct``
    for the job's nodes; CloudAI's ``SlurmRunner.on_job_completion`` calls it after every dry-run point (job id 0).
    Here it does nothing. Not ``update_system``, for the reasons of replace_slurm_update."""
    from cloudai.systems.slurm import SlurmSystem

    def complete_job(self: Any, job: Any) -> None:
        return None

    p.replace(SlurmSystem, "complete_job", complete_job)


def answer_gpu_directives_from_file(system: Any) -> None:
    """dry-run: CloudAI's ``SlurmSystem.supports_gpu_directives`` runs ``scontrol show config`` unless its own cache
    field ``supports_gpu_directives_cache`` is set. The dry-run's checks (preflight.scenario_check, called for every
    system a dry-run, preflight or verify-configs uses) set that field from the system file: GPU directives exactly
    when it declares GPUs. A field of CloudAI's, set on the system at hand: nothing of CloudAI's is replaced."""
    from cloudai.systems.slurm import SlurmSystem

    if isinstance(system, SlurmSystem) and system.supports_gpu_directives_cache is None:
        system.supports_gpu_directives_cache = bool(system.gpus_per_node)


def replace_check_installation(p: Patches) -> None:
    """dry-run: replaces ``_check_installation`` in cloudai/cli/handlers.py, whose ``installer.is_installed`` creates
    the system's ``install_path`` and ``<install_path>/huggingface`` (``prepare_output_dir``): ``./install`` of the
    shipped system files lands in the working folder, outside --output-dir, although ``handle_dry_run_and_run``
    then marks every item as installed without looking (``mark_as_installed``). Here a dry-run checks nothing on disk
    and creates nothing; ``run`` keeps CloudAI's check and install (the folder is the system file's ``install_path``,
    relative to the working folder). Not an extension point: ``handle_dry_run_and_run`` calls it by name in both
    modes."""
    from cloudai.cli import handlers
    from cloudai.core import InstallStatusResult

    check = handlers._check_installation

    def no_install_check(args: Any, *rest: Any, **kwargs: Any) -> Any:
        if getattr(args, "mode", None) != "dry-run":
            return check(args, *rest, **kwargs)
        logging.debug("dry-run: installation not checked, nothing created under install_path")
        return InstallStatusResult(True, "dry-run: installation not checked")

    p.replace(handlers, "_check_installation", no_install_check)


def replace_generate_reports(p: Patches, s: Session) -> None:
    """Replaces ``generate_reports`` in cloudai/cli/handlers.py, which ``handle_non_dse_job`` calls whatever the mode.
    dry-run: CloudAI's writes a status table of FAILED jobs and empty reports from results that cannot exist; here
    nothing is generated. run: CloudAI's logs a report that could not be written as a warning and goes on; here the
    same reports, every such failure collected (report_failures) so that run says so and exits 1. Not a report's
    config (``ReportConfig.enable``): it has no mode, and a scenario's ``[reports]`` table overrides the Registry's;
    CloudAI has no hook after its reports."""
    from cloudai.cli import handlers

    generate = handlers.generate_reports

    def no_reports(*args: Any, **kwargs: Any) -> None:
        logging.debug("dry-run: no reports (nothing ran)")

    def checked_reports(*args: Any, **kwargs: Any) -> None:
        folder = args[2] if len(args) > 2 else kwargs.get("result_dir")
        with report_failures(folder) as failed:
            generate(*args, **kwargs)
        s.report_failures += failed.messages()

    p.replace(handlers, "generate_reports", no_reports if s.mode == "dry-run" else checked_reports)


def replace_load_test_runs(p: Patches) -> None:
    """Replaces ``Reporter.load_test_runs`` in cloudai/_core/base_reporter.py, which sorts a test's run folders by
    ``int(name)``: one symbolic link, file or folder not named by a number among them raised ValueError in every
    report of the scenario (CloudAI logs each as "Error generating report" and writes none). Here each such entry
    is named on screen with why and skipped (reports/common.run_folders), and the runs are reported as far as they
    can be; a link is never followed (a link to a sibling counted a run twice). Not an extension point: every
    CloudAI reporter inherits it, and a scenario report runs for every scenario."""
    from cloudai._core.base_reporter import Reporter

    from ..reports.common import load_test_runs

    def tolerant(self: Any) -> None:
        load_test_runs(self)

    p.replace(Reporter, "load_test_runs", tolerant)


def replace_report_templates(p: Patches) -> None:
    """Replaces the ``jinja2`` that cloudai/reporter.py renders its scenario pages with (StatusReporter's
    <scenario>.html, DSEReporter's <scenario>-dse-report.html): its ``jinja2.Environment(loader=...)`` escapes
    nothing, so markup in a scenario name or a test's name or description stayed live in the page (a <script> ran
    when it was opened; issue 46). Here the same jinja2 whose Environment escapes HTML, as CloudAI's own comparison
    report sets it (select_autoescape). Not an extension point: the reporters build their Environment inline."""
    import types

    import jinja2
    from cloudai import reporter

    class EscapingEnvironment(jinja2.Environment):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("autoescape", jinja2.select_autoescape(
                enabled_extensions=("html", "htm", "xml", "jinja2"), default_for_string=True))
            super().__init__(*args, **kwargs)

    shim = types.SimpleNamespace(**{k: getattr(jinja2, k) for k in dir(jinja2) if not k.startswith("__")})
    shim.Environment = EscapingEnvironment
    p.replace(reporter, "jinja2", shim)


def replace_summary_table(p: Patches) -> None:
    """Replaces the ``Table`` that cloudai/reporter.py prints its "Scenario results" table with (StatusReporter's
    print_summary, after every run and generate-report): each cell is a string that Rich reads as markup, so a test's
    name, a scenario name (in the results path) or a failure text holding ``[bold red]x[/]``, ``[link=...]`` or an
    emoji code such as ``:boom:`` was styled, turned into a link or replaced on the terminal, and a stray ``[/x]``
    raised MarkupError (issue 46). Here every cell but the Status column (CloudAI's own PASSED/FAILED markup) is
    handed to Rich as plain ``Text``: shown as written. Not an extension point: print_summary builds its table
    inline."""
    from cloudai import reporter

    base = reporter.Table

    class LiteralTable(base):  # type: ignore[misc, valid-type]
        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            from rich.text import Text

            headers = [str(c.header) for c in self.columns]
            cells = [Text(cell) if isinstance(cell, str) and (i >= len(headers) or headers[i] != "Status") else cell
                     for i, cell in enumerate(renderables)]
            super().add_row(*cells, **kwargs)

    p.replace(reporter, "Table", LiteralTable)


@contextmanager
def tolerant_reports() -> Iterator[None]:
    """generate-report: CloudAI's reports over a results tree with foreign entries among the run folders, its scenario
    pages and its terminal table with what came from the input shown as text."""
    p = Patches()
    replace_load_test_runs(p)
    replace_report_templates(p)
    replace_summary_table(p)
    try:
        yield
    finally:
        p.restore()


def replace_register_signal_handlers(p: Patches, s: Session, signals: contextlib.ExitStack) -> None:
    """Replaces ``register_signal_handlers`` in cloudai/cli/handlers.py, whose handler sets the runner's shutdown flag
    that CloudAI's DSE loop resets at every point, so Ctrl-C / SIGTERM / SIGHUP never stopped a sweep. Here the first
    signal stops the sweep before its next point (stop_between_points; run: CloudAI's own handler cancels the
    submitted jobs), a second one at once (interrupts.py). Not an extension point: ``handle_dry_run_and_run`` calls it
    by name with the runner's cancel function."""
    from cloudai.cli import handlers

    def register_signal_handlers(cancel: Any) -> None:
        def first(signum: int) -> None:
            s.stop_signal = signum
            what = "cancelling the submitted job(s), " if s.mode == "run" else ""
            logging.warning(f"{s.mode}: {signal_name(signum)} received: {what}no further point is started "
                            "(send it again to stop at once)")
            if s.mode == "run":
                cancel(signum, None)

        signals.enter_context(interrupts.on_first_signal(first))

    p.replace(handlers, "register_signal_handlers", register_signal_handlers)


def replace_expand_file_list(p: Patches) -> None:
    """verify-configs: replaces ``expand_file_list`` in cloudai/cli/handlers.py, which logs ``conf/hook does not
    exist.`` as an error when ``handle_verify_all_configs`` looks for hooks in ``HOOK_ROOT`` (relative to the working
    folder) and there are none; here a missing ``HOOK_ROOT`` is no hooks, every other folder as CloudAI's less the
    results folders in it (a dry-run written into conf/: config_files.config_tomls; commands.py says which).
    Not an extension point: ``HOOK_ROOT`` is a module constant that ``handle_verify_all_configs`` reads itself."""
    from cloudai.cli import handlers

    hook_root = handlers.HOOK_ROOT
    expand = handlers.expand_file_list

    def expand_quiet(root: Path, glob: str = "*.toml") -> tuple[int, list[Path]]:
        if root == hook_root and not root.exists():
            return 0, []  # no hooks here: nothing to verify, not an error
        err, found = expand(root, glob)
        if root.is_dir() and root != hook_root:  # results folders in the tree are no configuration (config_tomls)
            from .config_files import config_tomls

            kept = set(config_tomls(root)[0])
            found = [p for p in found if p in kept]
        return err, found

    p.replace(handlers, "expand_file_list", expand_quiet)


# Every CloudAI attribute the package replaces (where CloudAI defines it -> the function replacing it). A new one
# needs an entry here and a test in tests/test_cloudai_surface.py (its inventory tests fail otherwise).
REPLACEMENTS = {
    "cloudai.cli.handlers.Runner": replace_runner,
    "cloudai.cli.handlers.Parser": replace_parser,
    "cloudai.cli.handlers._setup_system_and_scenario": replace_setup,
    "cloudai.systems.slurm.slurm_system.SlurmSystem.update": replace_slurm_update,
    "cloudai.systems.slurm.slurm_system.SlurmSystem.complete_job": replace_slurm_complete_job,
    "cloudai.cli.handlers._check_installation": replace_check_installation,
    "cloudai.cli.handlers.generate_reports": replace_generate_reports,
    "cloudai.cli.handlers.register_signal_handlers": replace_register_signal_handlers,
    "cloudai.cli.handlers.expand_file_list": replace_expand_file_list,
    "cloudai.reporter.jinja2": replace_report_templates,
    "cloudai.reporter.Table": replace_summary_table,
    "cloudai._core.base_reporter.Reporter.load_test_runs": replace_load_test_runs,
}


@contextmanager
def session(mode: str) -> Iterator[Session]:
    """Patch CloudAI for the duration of one dry-run / run command of this process (the CLI runs one)."""
    global _current
    s = Session(mode)
    p = Patches()
    replace_runner(p, s)
    replace_parser(p, s)
    replace_setup(p, s)
    signals = contextlib.ExitStack()
    replace_register_signal_handlers(p, s, signals)
    replace_generate_reports(p, s)
    if mode == "run":
        replace_load_test_runs(p)
        replace_report_templates(p)  # its scenario pages, as generate-report's (tolerant_reports)
        replace_summary_table(p)  # and its terminal table
    noise: list[tuple[logging.Handler, logging.Filter]] = []
    if mode == "dry-run":
        replace_slurm_update(p)
        replace_slurm_complete_job(p)
        replace_check_installation(p)
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler:  # the terminal, not debug.log
                f = _DropNoise()
                handler.addFilter(f)
                noise.append((handler, f))
    from ..workloads.base import add_rejection_listener, remove_rejection_listener

    _current = s
    add_rejection_listener(note_rejected)
    try:
        yield s
    finally:
        remove_rejection_listener(note_rejected)
        _current = None
        signals.close()
        p.restore()
        for handler, f in noise:
            handler.removeFilter(f)


@contextmanager
def verify_configs_session() -> Iterator[None]:
    """CloudAI's ``handle_verify_all_configs`` (commands.py's verify-configs) without the hook-folder error. (CloudAI's
    dummy kubeconfig is written only for its own ``scheduler = "kubernetes"`` files; ours say "mbridge_kubernetes" and
    need none.)"""
    p = Patches()
    replace_expand_file_list(p)
    try:
        yield
    finally:
        p.restore()


def stop_between_points(s: Session, runner: Any) -> None:
    """CloudAI's runner, checked before each point: after a signal no further point is started, and a point that
    the operating system could not write (a full disk, a read-only folder) stops the sweep instead of being logged
    and followed by the next one (CloudAI's DSE loop goes on after an error of a step). The point's own folder,
    created by this process, is removed again: no job folder is left without its job."""
    job_path, submit = runner.get_job_output_path, runner.submit_test

    def checked_job_path(tr: Any) -> Path:
        if s.stop_signal is not None:
            raise SweepStopped(signum=s.stop_signal)
        try:
            path = job_path(tr)
            if not any(Path(path).iterdir()):
                s.created.add(Path(path))
        except ResultsExistError:
            raise
        except OSError as exc:
            raise SweepStopped(error=exc) from exc
        return path

    def checked_submit(tr: Any) -> None:
        if s.stop_signal is not None:
            raise SweepStopped(signum=s.stop_signal)
        try:
            submit(tr)
        except ResultsExistError:
            raise
        except OSError as exc:
            out = Path(tr.output_path)
            if out in s.created and not (out / "logs").exists():  # nothing was submitted from it
                shutil.rmtree(out, ignore_errors=True)
            raise SweepStopped(error=exc) from exc

    runner.get_job_output_path = checked_job_path
    runner.submit_test = checked_submit


@dataclass
class ReportFailures:
    writes: list[str] = field(default_factory=list)  # our writer's messages (path, what, fix)
    others: list[str] = field(default_factory=list)  # a report of CloudAI's that the operating system refused

    def messages(self) -> list[str]:
        return list(dict.fromkeys([*self.writes, *self.others]))


@contextmanager
def report_failures(result_dir: Path | None = None) -> Iterator[ReportFailures]:
    """The report files that could not be written while the reports were generated: CloudAI logs a report's error
    as a warning and goes on (generate-report then exited 0); here every such failure is collected, with the file,
    the reason and the fix, so that the command can say so and exit 1."""
    found = ReportFailures()
    root = logging.getLogger()
    last = {"report": ""}

    class Catch(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            message = record.getMessage()
            if message.startswith("Error generating report"):
                last["report"] = message.split(",")[0].removeprefix("Error generating report").strip()
            exc = record.exc_info[1] if record.exc_info else None
            if isinstance(exc, OSError) and exc.errno is not None and not isinstance(exc, WriteError):
                found.others.append(f"report {last['report']}: {os_problem(exc, folder=result_dir)}"
                                    .replace("report : ", ""))
            return True

    catch = Catch()
    root.addFilter(catch)
    try:
        with failures() as written:
            yield found
    finally:
        root.removeFilter(catch)
        found.writes += written


def log_report_failures(verb: str, messages: list[str]) -> None:
    for message in messages:
        logging.error(f"{verb}: {message}")
    logging.error(f"{verb}: {len(messages)} report file(s) could not be written (above); no file was left "
                  "half-written. Fix: as said above, then run `cloudai-mbridge generate-report --result-dir "
                  "<results folder>` again")


def _would_write(s: Session) -> int | None:
    """How many points of the scenario would get a job (the rest are skipped by a rule); None when unknown."""
    if s.report is None:
        return None
    return sum(1 for p in s.report.points if p.ok or not p.checked)


def finish_stopped(s: Session, stop: SweepStopped) -> int:
    """The sweep stopped before its end (a signal, or the operating system refused to write a point): say what was
    done and what was not; a dry-run that failed to write keeps nothing. The exit status is 128 + the signal, or 1."""
    dirs = s.run_dirs()
    total = _would_write(s)
    of = f" of {total}" if total is not None else ""
    rest = f", {total - len(dirs)} not" if total is not None else ""
    root = s.scenario_roots[-1] if s.scenario_roots else None
    if stop.error is not None:
        logging.error(f"{s.mode}: {os_message(stop.error)}")
        if s.mode == "dry-run":
            discard(s)
            logging.error(f"{s.mode}: stopped; nothing was kept (the point folders of a failed dry-run are removed)")
        elif not dirs:  # no job was submitted: a folder with only the run's inputs is no result (as a dry-run)
            discard(s)
            logging.error(f"{s.mode}: stopped before any job was submitted"
                          f"{f' ({total} point(s) not started)' if total is not None else ''}; nothing was kept (the "
                          "folder held only the run's inputs)")
        else:
            logging.error(f"{s.mode}: stopped: {len(dirs)}{of} point(s) submitted{rest} started; results so far in "
                          f"{root}")
        return 1
    name = signal_name(stop.signum or 0)
    if s.mode == "dry-run":
        logging.error(f"dry-run: stopped by {name} after {len(dirs)}{of} point(s): {len(dirs)} job(s) written"
                      f"{f' under {root}' if dirs else ''}{rest} written. Fix: run the command again to write "
                      "every point")
    else:
        logging.error(f"run: stopped by {name}: {len(dirs)}{of} point(s) submitted{rest} started; the job(s) "
                      "running at the signal were cancelled. Reports of what ran: `cloudai-mbridge generate-report "
                      f"--result-dir {root}`")
    return 128 + (stop.signum or 0)


def discard(s: Session) -> None:
    """Remove the scenario folders this command created (claimed fresh by this process): a failed dry-run, or a run
    that failed before it submitted any job (its folder would hold only its inputs), leaves no half-written jobs
    behind."""
    why = "nothing is kept from a failed dry-run" if s.mode == "dry-run" else "no job of it was submitted"
    for root in s.scenario_roots:
        shutil.rmtree(root, ignore_errors=True)
        logging.info(f"{s.mode}: removed {root} ({why})")
    s.scenario_roots.clear()


def nothing_ran(s: Session) -> bool:
    """No point of this run got as far as its job (every point folder is made before its job is submitted)."""
    return s.mode == "run" and not s.run_dirs()


def skipped(s: Session) -> list[Any]:
    """The sweep points a rule skips (preflight.PointResult), from the check made before anything was written."""
    return [p for p in s.report.points if p.checked and not p.ok] if s.report is not None else []


def point_name(p: Any) -> str:
    return f"{p.test} point {p.point} ({p.varies})" if p.swept else p.test


def skip_reason(p: Any) -> str:
    """The rules that skip the point, with their messages (the values and the fix were logged when it was met)."""
    return p.error if p.error else "; ".join(f"[{v.rule}] {v.message}" for v in p.violations)


UNDECLARED_FIX = ("Fix: change the sweep so that no point breaks a rule, or, if the point is there on purpose, declare "
                  "it: expected_rejections = \"<rule>\" in the test's [cmd_args] (rule ids as in the brackets)")


def log_skipped(mode: str, points: list[Any]) -> list[Any]:
    """One line per skipped point (its rule; expected or not); the points the test does not declare."""
    undeclared = [p for p in points if not p.expected]
    level = logging.ERROR if mode == "run" else logging.WARNING  # a dry-run that wrote its jobs did not fail
    for p in points:
        if p.expected:
            logging.info(f"  skipped, as the test declares (expected_rejections): {point_name(p)}: {skip_reason(p)}")
        else:
            logging.log(level, f"  skipped, NOT declared in expected_rejections: {point_name(p)}: {skip_reason(p)}")
    if undeclared:
        consequence = "it exits 1" if mode == "run" else "`run` will exit 1 (after running the rest)"
        logging.log(level, f"{mode}: {len(undeclared)} point(s) skipped by a rule that the scenario does not declare: "
                      f"{consequence}. {UNDECLARED_FIX}")
    return undeclared


def _count(points: list[Any]) -> str:
    return f"{len(points)} skipped by a rule{':' if points else ''}"


def finish_dry_run(s: Session, code: int) -> int:
    """Say what the dry-run wrote and where, and which points a rule skipped; 1 when it wrote nothing because every
    point was rejected."""
    if code:
        discard(s)
        return code
    dirs = s.run_dirs()
    if not dirs:
        if s.rejected:
            logging.error("dry-run: no job written: every point was rejected (reasons above)")
            return code or 1
        return code
    root = s.scenario_roots[-1] if s.scenario_roots else dirs[0].parent
    logging.info(f"dry-run: nothing was submitted; {len(dirs)} job(s) written under {root}:")
    for d in dirs:
        rel = d.relative_to(root) if d.is_relative_to(root) else d
        logging.info(f"  {rel}/  {', '.join(job_files(d))}")
    points = skipped(s)
    total = f"{len(s.report.points)} point(s): " if s.report is not None else ""
    logging.info(f"dry-run: {total}{len(dirs)} job(s) written, {_count(points)}")
    log_skipped("dry-run", points)
    return code


def job_files(run_dir: Path) -> list[str]:
    """The files of a generated job worth naming: the sbatch script, the payload's config, the Kubernetes
    manifests (k8s/*.yaml)."""
    files = sorted(p.name for p in run_dir.iterdir() if p.is_file() and p.suffix in (".sh", ".yaml", ".json"))
    manifests = run_dir / "k8s"
    if manifests.is_dir():
        files += sorted(f"k8s/{p.name}" for p in manifests.iterdir() if p.is_file() and p.suffix == ".yaml")
    return files


def report_files(root: Path) -> list[Path]:
    """The scenario reports CloudAI and the plugin wrote at the top of the results folder."""
    return sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")) if root.is_dir() else []


def finish_run(s: Session, code: int) -> int:
    """The run's accounting (points, jobs run, passed, failed, skipped by a rule) and its report files; 1 when every
    job failed or a rule skipped a point that the test does not declare."""
    if code:
        return code
    dirs = s.run_dirs()
    points = skipped(s)
    if not dirs and not points:
        return code
    from ..workloads.reporting import run_status

    failed = []
    for d in dirs:
        status = run_status(d)
        if not status.is_successful:
            failed.append((d, status.error_message or "no result in the job's logs"))
    total = f"{len(s.report.points)} point(s): " if s.report is not None else ""
    logging.info(f"run: {total}{len(dirs)} job(s) ran ({len(dirs) - len(failed)} passed, {len(failed)} failed), "
                 f"{_count(points)}")
    undeclared = log_skipped("run", points)
    if dirs and len(failed) == len(dirs):
        logging.error(f"run: every job failed ({len(dirs)} of {len(dirs)}):")
        for d, reason in failed:
            logging.error(f"  {d}: {reason}")
    elif failed:
        logging.warning(f"run: {len(failed)} of {len(dirs)} job(s) failed:")
        for d, reason in failed:
            logging.warning(f"  {d}: {reason}")
    for root in s.scenario_roots:
        files = report_files(root)
        if files:
            logging.info(f"run: reports in {root}: {', '.join(p.name for p in files)}")
    if s.report_failures:
        log_report_failures("run", s.report_failures)
        return 1
    if dirs and len(failed) == len(dirs):
        return 1
    return 1 if undeclared else code


INPUTS = "mbridge_inputs"


def save_inputs(root: Path, system_config: Any = None, test_scenario: Any = None, tests_dir: Any = None) -> None:
    """Keep the run's system, scenario and test TOMLs in ``<root>/mbridge_inputs/`` (conf/'s layout: system/,
    test_scenario/, test/), so ``generate-report --result-dir <root>`` needs nothing else. Only the tests the scenario
    names are copied; the folder appears whole or not at all."""
    import tempfile

    from ..atomic import normal_mode
    from ..safe_read import MAX_TOML_BYTES, InputFileError, read_text
    from .config_files import named_test_files, tomllib

    if system_config is None or test_scenario is None:
        return
    scenario = Path(test_scenario)
    try:
        names = {t.get("test_name") for t in tomllib.loads(read_text(scenario, MAX_TOML_BYTES)).get("Tests", [])}
    except (OSError, ValueError, InputFileError):
        return  # CloudAI read it already; nothing to keep if it cannot be read again
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{INPUTS}."))
    try:
        for sub, src in (("system", Path(system_config)), ("test_scenario", scenario)):
            (staging / sub).mkdir()
            shutil.copyfile(src, staging / sub / src.name)
        (staging / "test").mkdir()
        for name, src in named_test_files(tests_dir) if tests_dir else []:
            if name in names:
                shutil.copyfile(src, staging / "test" / src.name)
        for path in [staging, *staging.rglob("*")]:
            normal_mode(path, directory=path.is_dir())
        os.replace(staging, root / INPUTS)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise failed_write(root / INPUTS, exc) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
