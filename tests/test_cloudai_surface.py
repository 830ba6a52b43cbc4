"""The CloudAI internals the package replaces (session.REPLACEMENTS) and the private CloudAI members its registered
subclasses override, checked against the pinned CloudAI.

One test per replacement: the original's signature as recorded here, and the piece of the original's behaviour the
replacement relies on, shown with the real CloudAI objects (a real SlurmSystem whose command shell is a real bash
script that records the commands instead of running them: Slurm is not asked). When one fails, CloudAI changed the
member the message names: read its new code, adapt the replacement in session.py (or drop it if CloudAI now does what
it was for), then update the record here.

The inventory tests fail when a CloudAI attribute is replaced anywhere in the package without an entry in
session.REPLACEMENTS, or when an entry has no test here. A new replacement: a ``replace_*`` function in session.py
that calls ``p.replace(owner, name, value)`` once, its entry in REPLACEMENTS, and a test below decorated with
``@surface("<its REPLACEMENTS key>")``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import inspect
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import CONF, ROOT

from cloudai_mbridge.cli import session as plugin_session
from cloudai_mbridge.registration import register

PACKAGE = ROOT / "cloudai_mbridge"
SYSTEM = CONF / "system" / "local_slurm.toml"
SCENARIO = CONF / "test_scenario" / "refit_cpu_smoke.toml"

SURFACE: dict[str, str] = {}  # REPLACEMENTS key -> the test here that checks it


def surface(key: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def mark(test: Callable[..., None]) -> Callable[..., None]:
        SURFACE[key] = test.__name__
        return test

    return mark


def check_signature(fn: Any, recorded: str, member: str, replacement: str) -> None:
    actual = str(inspect.signature(fn))
    assert actual == recorded, (
        f"CloudAI changed the signature of {member}: {actual} (recorded {recorded}). session.{replacement} replaces "
        f"it: read the new {member} in {inspect.getsourcefile(fn)}, adapt session.{replacement}, then update the "
        "recorded signature in tests/test_cloudai_surface.py"
    )


def calls_by_name(fn: Any, name: str) -> bool:
    """``fn`` looks ``name`` up at call time (a global or an attribute): replacing it there reaches ``fn``."""
    return name in fn.__code__.co_names


@contextmanager
def replaced(*installs: Callable[[plugin_session.Patches], None]) -> Iterator[None]:
    p = plugin_session.Patches()
    try:
        for install in installs:
            install(p)
        yield
    finally:
        p.restore()


@pytest.fixture(autouse=True)
def _plugin() -> None:
    register()
    assert plugin_session.current() is None, "a session is open: the originals are not in place"


@pytest.fixture
def recorder(tmp_path: Path) -> Callable[[], list[str]]:
    """A bash script in place of /bin/bash for CommandShell: it records each command and prints nothing."""
    log = tmp_path / "commands.log"
    script = tmp_path / "record.sh"
    script.write_text(f"#!/bin/bash\nprintf '%s\\n' \"$2\" >> '{log}'\n")
    script.chmod(0o755)

    def commands() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    commands.script = script  # type: ignore[attr-defined]
    return commands


def parse(tmp_path: Path, scenario: Path = SCENARIO, commands: Any = None) -> tuple[Any, Any]:
    """The real SlurmSystem and scenario of the local Slurm smoke test; results under tmp_path; the system's shell
    the recorder when given."""
    from cloudai.core import Parser
    from cloudai.parser import HOOK_ROOT
    from cloudai.util import CommandShell

    system, _tests, scenario_obj = Parser(SYSTEM, HOOK_ROOT).parse(CONF / "test", scenario)
    system.output_path = tmp_path / "results"
    if commands is not None:
        system.cmd_shell = CommandShell(commands.script)
    return system, scenario_obj


# --------------------------------------------------------------------------------------------------------------
# One test per replacement
# --------------------------------------------------------------------------------------------------------------


@surface("cloudai.cli.handlers.Runner")
def test_runner(tmp_path: Path) -> None:
    from cloudai.cli import handlers
    from cloudai.core import Runner

    member = "cloudai._core.runner.Runner"
    check_signature(Runner.__init__, "(self, mode: str, system: cloudai._core.system.System, test_scenario: "
                    "cloudai._core.test_scenario.TestScenario)", member, "replace_runner")
    assert handlers.Runner is Runner and calls_by_name(handlers.handle_dry_run_and_run, "Runner"), (
        "cloudai.cli.handlers.handle_dry_run_and_run no longer constructs handlers.Runner: session.replace_runner "
        "would not see the run (no claimed folder, no kept inputs, no accounting). Look at how it creates its runner")
    system, scenario = parse(tmp_path)
    runner = Runner("dry-run", system, scenario)
    root = runner.runner.scenario_root
    assert root.parent == system.output_path and root.name.startswith(f"{scenario.name}_") and not root.exists(), (
        f"{member}.create_runner changed the scenario folder ({root}): session.replace_runner claims "
        "<output_path>/<scenario>_<time> itself, and would put every run in <scenario>_<time>_2 if CloudAI created it")
    tr = scenario.test_runs[0]
    runner.runner.scenario_root = tmp_path / "claimed"
    assert runner.runner.get_job_output_path(tr).is_relative_to(tmp_path / "claimed"), (
        "CloudAI's BaseRunner.get_job_output_path no longer follows runner.scenario_root: the folder that "
        "session.replace_runner claims is not where the jobs are written")


@surface("cloudai.cli.handlers.Parser")
def test_parser(tmp_path: Path) -> None:
    from cloudai.cli import handlers
    from cloudai.parser import Parser

    member = "cloudai.parser.Parser"
    check_signature(Parser.__init__, "(self, system_config_path: pathlib.Path, hook_root: pathlib.Path = "
                    "PosixPath('conf/hook')) -> None", member, "replace_parser")
    check_signature(Parser.parse, "(self, test_path: pathlib.Path | None = None, test_scenario_path: pathlib.Path | "
                    "None = None) -> tuple[cloudai._core.system.System, list[cloudai.models.workload.TestDefinition], "
                    "cloudai._core.test_scenario.TestScenario | None]", f"{member}.parse", "replace_parser")
    assert handlers.Parser is Parser and calls_by_name(handlers._setup_system_and_scenario, "Parser"), (
        "cloudai.cli.handlers._setup_system_and_scenario no longer parses with handlers.Parser: "
        "session.replace_parser's whole-scenario check would not run before CloudAI writes anything")
    # The order relied on: a refusal raised by the parse stops CloudAI's setup before it creates --output-dir.
    hostile = tmp_path / "hostile.toml"
    hostile.write_text(SCENARIO.read_text().replace('id = "refit_cpu_smoke"', 'id = "../escape"'))
    s = plugin_session.Session("dry-run")
    args = argparse.Namespace(system_config=SYSTEM, hook_dir=None, tests_dir=CONF / "test", test_scenario=hostile,
                              output_dir=tmp_path / "out", mode="dry-run")
    with replaced(lambda p: plugin_session.replace_parser(p, s)), pytest.raises(plugin_session.ScenarioRefusedError):
        handlers._setup_system_and_scenario(args)
    assert not (tmp_path / "out").exists(), (
        "cloudai.cli.handlers._setup_system_and_scenario created --output-dir before its parse: a scenario that "
        "session.replace_parser refuses now leaves a folder behind. Look at the order in _setup_system_and_scenario")


@surface("cloudai.cli.handlers._setup_system_and_scenario")
def test_setup_system_and_scenario(tmp_path: Path) -> None:
    from cloudai.cli import handlers
    from cloudai.systems.slurm import SlurmSystem

    member = "cloudai.cli.handlers._setup_system_and_scenario"
    check_signature(handlers._setup_system_and_scenario, "(args: argparse.Namespace) -> "
                    "tuple[cloudai._core.system.System, cloudai._core.test_scenario.TestScenario, "
                    "list[cloudai.models.workload.TestDefinition]] | None", member, "replace_setup")
    assert calls_by_name(handlers.handle_dry_run_and_run, "_setup_system_and_scenario"), (
        f"cloudai.cli.handlers.handle_dry_run_and_run no longer calls {member}: session.replace_setup (the early "
        "file checks, one-line errors) is bypassed")
    # The original: (system, scenario, tests), the output folder prepared (sinfo left out: the cluster is not asked).
    args = argparse.Namespace(system_config=SYSTEM, hook_dir=None, tests_dir=CONF / "test", test_scenario=SCENARIO,
                              output_dir=tmp_path / "out", mode="dry-run")
    with replaced(plugin_session.replace_slurm_update):
        result = handlers._setup_system_and_scenario(args)
    assert result is not None and isinstance(result[0], SlurmSystem) and result[1].name == "refit_cpu_smoke", (
        f"{member} no longer returns (system, test_scenario, tests): session.replace_setup passes its result on")
    assert (tmp_path / "out").is_dir()
    # What the replacement relies on: None makes handle_dry_run_and_run exit 1 without doing anything else.
    s = plugin_session.Session("dry-run")
    missing = argparse.Namespace(**{**vars(args), "system_config": tmp_path / "absent.toml",
                                    "output_dir": tmp_path / "out2"})
    with replaced(lambda p: plugin_session.replace_setup(p, s)):
        code = handlers.handle_dry_run_and_run(missing)
    assert code == 1 and s.refused and not (tmp_path / "out2").exists(), (
        "cloudai.cli.handlers.handle_dry_run_and_run no longer returns 1 when _setup_system_and_scenario returns "
        "None: session.replace_setup's refusals would not stop the command")


@surface("cloudai.systems.slurm.slurm_system.SlurmSystem.update")
def test_slurm_update(tmp_path: Path, recorder: Any) -> None:
    from cloudai.cli import handlers
    from cloudai.systems.slurm import SlurmSystem

    member = "cloudai.systems.slurm.slurm_system.SlurmSystem.update"
    check_signature(SlurmSystem.update, "(self) -> 'None'", member, "replace_slurm_update")
    assert calls_by_name(handlers._setup_system_and_scenario, "update"), (
        "cloudai.cli.handlers._setup_system_and_scenario no longer calls system.update(): a dry-run may not need "
        "session.replace_slurm_update any more (drop it if so)")
    system, _ = parse(tmp_path, commands=recorder)
    system.update()
    asked = [c.split()[0] for c in recorder()]
    assert asked == ["sinfo", "squeue"], (
        f"{member} no longer asks the cluster with sinfo and squeue (it ran {asked}): check what "
        "session.replace_slurm_update leaves out of a dry-run")
    with replaced(plugin_session.replace_slurm_update):
        system.update()
    assert len(recorder()) == 2  # the replacement asked nothing


@surface("cloudai.systems.slurm.slurm_system.SlurmSystem.complete_job")
def test_slurm_complete_job(tmp_path: Path, recorder: Any) -> None:
    from cloudai.systems.slurm import SlurmJob, SlurmRunner, SlurmSystem

    member = "cloudai.systems.slurm.slurm_system.SlurmSystem.complete_job"
    check_signature(SlurmSystem.complete_job, "(self, job: 'SlurmJob') -> 'None'", member,
                    "replace_slurm_complete_job")
    assert calls_by_name(SlurmRunner.on_job_completion, "complete_job"), (
        "cloudai.systems.slurm.SlurmRunner.on_job_completion no longer calls system.complete_job: a dry-run may not "
        "need session.replace_slurm_complete_job any more (drop it if so)")
    system, scenario = parse(tmp_path, commands=recorder)
    tr = scenario.test_runs[0]
    tr.output_path = tmp_path / "job"
    system.complete_job(SlurmJob(tr, id=0))
    asked = recorder()
    assert [c.split()[:3] for c in asked] == [["sacct", "-j", "0"]], (
        f"{member} no longer runs sacct for the job (it ran {asked}): check what session.replace_slurm_complete_job "
        "leaves out of a dry-run")
    with replaced(plugin_session.replace_slurm_complete_job):
        system.complete_job(SlurmJob(tr, id=0))
    assert recorder() == asked


def test_gpu_directives_come_from_cloudais_own_cache_field(tmp_path: Path, recorder: Any) -> None:
    """No replacement: a dry-run sets CloudAI's own ``supports_gpu_directives_cache`` field from the system file
    (session.answer_gpu_directives_from_file), which the property answers from without asking scontrol."""
    member = "cloudai.systems.slurm.slurm_system.SlurmSystem.supports_gpu_directives"
    system, _ = parse(tmp_path, commands=recorder)
    assert system.supports_gpu_directives_cache is None
    system.supports_gpu_directives  # noqa: B018 (the property runs scontrol)
    assert recorder() == ["scontrol show config"] and system.supports_gpu_directives_cache is not None, (
        f"{member} no longer asks `scontrol show config` and caches the answer in supports_gpu_directives_cache "
        f"(it ran {recorder()}): session.answer_gpu_directives_from_file fills that cache to spare a dry-run the "
        "query; read the new property and adapt it")
    for gpus, expected in ((8, True), (None, False)):
        fresh, _ = parse(tmp_path, commands=recorder)
        fresh.gpus_per_node = gpus
        plugin_session.answer_gpu_directives_from_file(fresh)
        assert fresh.supports_gpu_directives is expected, (
            f"{member} no longer answers from supports_gpu_directives_cache once it is set")
    assert len(recorder()) == 1  # set from the file: nothing asked


def test_dry_run_asks_no_scontrol_through_the_plugins_checks(tmp_path: Path, recorder: Any) -> None:
    """Inside a dry-run session the scenario check (every dry-run, preflight and verify-configs passes there) sets
    the cache; outside one (``run``: a real cluster answers) it leaves CloudAI's property to ask."""
    from cloudai_mbridge.cli.preflight import scenario_check

    system, scenario = parse(tmp_path, commands=recorder)
    system.gpus_per_node = 4
    with plugin_session.session("dry-run"):
        scenario_check(system, scenario)
    assert system.supports_gpu_directives_cache is True and recorder() == []
    system, scenario = parse(tmp_path, commands=recorder)
    with plugin_session.session("run"):
        scenario_check(system, scenario)  # renders the job: CloudAI's property asks the cluster
    assert recorder() == ["scontrol show config"]


@surface("cloudai.cli.handlers.generate_reports")
def test_generate_reports(tmp_path: Path) -> None:
    from cloudai.cli import handlers

    member = "cloudai.cli.handlers.generate_reports"
    check_signature(handlers.generate_reports, "(system: cloudai._core.system.System, test_scenario: "
                    "cloudai._core.test_scenario.TestScenario, result_dir: pathlib.Path, error: BaseException | None "
                    "= None) -> None", member, "replace_generate_reports")
    non_dse = handlers.handle_non_dse_job
    assert calls_by_name(non_dse, "generate_reports") and not calls_by_name(non_dse, "mode"), (
        "cloudai.cli.handlers.handle_non_dse_job now looks at the mode before generating reports: if it skips them "
        "in a dry-run, drop session.replace_generate_reports")
    # The original writes reports from a results folder in which nothing ran.
    system, scenario = parse(tmp_path)
    result_dir = tmp_path / "nothing_ran"
    result_dir.mkdir()
    handlers.generate_reports(system, scenario, result_dir)
    written = sorted(p.name for p in result_dir.iterdir())
    assert written, (
        f"{member} no longer writes a report for a scenario that did not run: session.replace_generate_reports may "
        "be unnecessary")
    with replaced(lambda p: plugin_session.replace_generate_reports(p, plugin_session.Session("dry-run"))):
        empty = tmp_path / "dry_run"
        empty.mkdir()
        handlers.generate_reports(system, scenario, empty)
    assert not any(empty.iterdir())


@surface("cloudai.cli.handlers._check_installation")
def test_check_installation(tmp_path: Path) -> None:
    from cloudai.cli import handlers

    member = "cloudai.cli.handlers._check_installation"
    check_signature(handlers._check_installation, "(args: argparse.Namespace, system: cloudai._core.system.System, "
                    "tests: list[cloudai.models.workload.TestDefinition], test_scenario: "
                    "cloudai._core.test_scenario.TestScenario) -> cloudai._core.installables.base.InstallStatusResult",
                    member, "replace_check_installation")
    run = handlers.handle_dry_run_and_run
    assert calls_by_name(run, "_check_installation") and calls_by_name(run, "mark_as_installed"), (
        "cloudai.cli.handlers.handle_dry_run_and_run no longer checks the installation and then marks every item "
        "installed in a dry-run: check what session.replace_check_installation leaves out")
    # The original creates install_path and its huggingface folder, even for a dry-run.
    system, scenario = parse(tmp_path)
    _tests = [tr.test for tr in scenario.test_runs]
    args = argparse.Namespace(mode="dry-run", enable_cache_without_check=False)
    system.install_path = tmp_path / "install"
    system.hf_home_path = system.install_path / "huggingface"
    handlers._check_installation(args, system, _tests, scenario)
    assert system.hf_home_path.is_dir(), (
        f"{member} no longer creates install_path/huggingface in a dry-run: session.replace_check_installation may "
        "be unnecessary")
    system.install_path = tmp_path / "install2"
    system.hf_home_path = system.install_path / "huggingface"
    with replaced(plugin_session.replace_check_installation):
        assert handlers._check_installation(args, system, _tests, scenario).success
        assert not system.install_path.exists()  # the dry-run created nothing
        handlers._check_installation(argparse.Namespace(mode="run", enable_cache_without_check=False), system,
                                     _tests, scenario)
        assert system.hf_home_path.is_dir()  # a run keeps CloudAI's check, which creates the install folder


@surface("cloudai.cli.handlers.register_signal_handlers")
def test_register_signal_handlers() -> None:
    import signal

    from cloudai.cli import handlers

    member = "cloudai.cli.handlers.register_signal_handlers"
    check_signature(handlers.register_signal_handlers, "(signal_handler: Callable) -> None", member,
                    "replace_register_signal_handlers")
    assert calls_by_name(handlers.handle_dry_run_and_run, "register_signal_handlers"), (
        "cloudai.cli.handlers.handle_dry_run_and_run no longer calls register_signal_handlers by name: "
        "session.replace_register_signal_handlers has no effect; find where CloudAI installs its handlers now")
    # The original installs the given handler for SIGINT, SIGTERM and SIGHUP (the signals the replacement takes).
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.getsignal(sig) for sig in (*sigs, signal.SIGQUIT)}

    def handler(signum: int, frame: Any) -> None:
        return None

    try:
        handlers.register_signal_handlers(handler)
        assert all(signal.getsignal(sig) is handler for sig in sigs), (
            f"{member} no longer installs its handler for SIGINT / SIGTERM / SIGHUP: check what "
            "session.replace_register_signal_handlers must stop")
    finally:
        for sig, old_handler in before.items():
            signal.signal(sig, old_handler)
    # The replacement installs no handler of CloudAI's: the first signal only records itself (the sweep stops at
    # the next point), until the session's signals are closed.
    from cloudai_mbridge import interrupts

    s = plugin_session.Session("dry-run")
    signals = contextlib.ExitStack()
    try:
        interrupts.install()  # as cli.main does first
        with replaced(lambda p: plugin_session.replace_register_signal_handlers(p, s, signals)):
            handlers.register_signal_handlers(handler)
            assert all(signal.getsignal(sig) is not handler for sig in sigs)
            signal.raise_signal(signal.SIGHUP)
            assert s.stop_signal == signal.SIGHUP
        signals.close()
    finally:
        for sig, old_handler in before.items():
            signal.signal(sig, old_handler)


@surface("cloudai.cli.handlers.expand_file_list")
def test_expand_file_list(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    from cloudai.cli import handlers

    member = "cloudai.cli.handlers.expand_file_list"
    check_signature(handlers.expand_file_list, "(root: pathlib.Path, glob: str = '*.toml') -> "
                    "tuple[int, typing.List[pathlib.Path]]", member, "replace_expand_file_list")
    assert calls_by_name(handlers.handle_verify_all_configs, "expand_file_list") and calls_by_name(
        handlers.handle_verify_all_configs, "HOOK_ROOT"), (
        "cloudai.cli.handlers.handle_verify_all_configs no longer expands HOOK_ROOT with expand_file_list: look at "
        "how it finds hooks and adapt session.replace_expand_file_list")
    monkeypatch.chdir(tmp_path)  # HOOK_ROOT is relative to the working folder: none here
    assert not handlers.HOOK_ROOT.exists()
    with caplog.at_level(logging.ERROR):
        assert handlers.expand_file_list(handlers.HOOK_ROOT, glob="**/*.toml") == (1, [])
    assert "does not exist" in caplog.text, (
        f"{member} no longer logs an error for a missing folder: session.replace_expand_file_list may be unnecessary")
    caplog.clear()
    with replaced(plugin_session.replace_expand_file_list), caplog.at_level(logging.ERROR):
        assert handlers.expand_file_list(handlers.HOOK_ROOT, glob="**/*.toml") == (0, [])
        assert not caplog.text
        assert handlers.expand_file_list(tmp_path / "other") == (1, [])  # any other folder: CloudAI's answer


@surface("cloudai._core.base_reporter.Reporter.load_test_runs")
def test_load_test_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from cloudai._core.base_reporter import Reporter
    from cloudai.models.scenario import ReportConfig

    member = "cloudai._core.base_reporter.Reporter.load_test_runs"
    check_signature(Reporter.load_test_runs, "(self)", member, "replace_load_test_runs")

    class Plain(Reporter):
        def generate(self) -> None:
            pass

    system, scenario = parse(tmp_path)
    tr = scenario.test_runs[0]
    results = tmp_path / "results"
    for run in ("0", "1"):
        (results / tr.name / run / ("0" if tr.is_dse_job else "")).mkdir(parents=True)  # a sweep's: <N>/<step>
    (results / tr.name / "2").symlink_to("0")  # a link to a sibling
    (results / tr.name / "notes").mkdir()  # a folder not named by a number
    reporter = Plain(system, scenario, results, ReportConfig(enable=True))
    with pytest.raises(ValueError):
        reporter.load_test_runs()
    # (also, CloudAI's follows the link: run 0 would be counted twice)
    with replaced(plugin_session.replace_load_test_runs), caplog.at_level(logging.WARNING):
        reporter = Plain(system, scenario, results, ReportConfig(enable=True))
        reporter.load_test_runs()
    assert [t.current_iteration for t in reporter.trs] == [0, 1]
    assert "2: skipped: a symbolic link" in caplog.text and "notes: skipped: a folder" in caplog.text


@surface("cloudai.reporter.jinja2")
def test_report_templates() -> None:
    from cloudai import reporter

    assert calls_by_name(reporter.StatusReporter.generate_scenario_report, "jinja2") and calls_by_name(
        reporter.DSEReporter.generate, "jinja2"), (
        "cloudai.reporter's scenario pages no longer build their jinja2 Environment from the module's jinja2: look at "
        "how they render and adapt session.replace_report_templates")

    def page() -> str:  # as StatusReporter.generate_scenario_report renders it
        util = Path(reporter.__file__).parent / "util"
        env = reporter.jinja2.Environment(loader=reporter.jinja2.FileSystemLoader(util))
        return env.get_template("general-report.jinja2").render(name="<script>x()</script>", report_items=[])

    assert "<title><script>x()</script></title>" in page(), (
        "CloudAI's scenario page now escapes its input: session.replace_report_templates may be unnecessary")
    with replaced(plugin_session.replace_report_templates):
        assert "<title>&lt;script&gt;x()&lt;/script&gt;</title>" in page()
    assert "<script>x()</script>" in page(), "restored"


@surface("cloudai.reporter.Table")
def test_summary_table() -> None:
    from cloudai import reporter
    from rich.console import Console

    assert calls_by_name(reporter.StatusReporter.print_summary, "Table"), (
        "cloudai.reporter's print_summary no longer builds its table from the module's Table: look at how it prints "
        "and adapt session.replace_summary_table")

    def shown() -> str:  # as print_summary builds and prints its table
        table = reporter.Table(title="Scenario results")
        for col in ["Case", "Status", "Details"]:
            table.add_column(col, overflow="fold")
        table.add_row("a[bold]b[/bold]", "[bold][green]PASSED[/green][/bold]", "d :boom:")
        console = Console(width=200, color_system=None)
        with console.capture() as capture:
            console.print(table)
        return capture.get()

    assert "ab" in shown() and "[bold]" not in shown(), (
        "CloudAI's summary table now shows its cells as text: session.replace_summary_table may be unnecessary")
    with replaced(plugin_session.replace_summary_table):
        text = shown()
    assert "a[bold]b[/bold]" in text and "d :boom:" in text, text
    assert "PASSED" in text and "[green]" not in text, "the Status column stays CloudAI's markup"
    assert "[bold]" not in shown(), "restored"


def test_our_kubernetes_system_files_need_no_dummy_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No replacement: CloudAI's verify-configs writes a dummy kubeconfig (by default in ~/.kube) only around files of
    its own ``scheduler = "kubernetes"``; ours say "mbridge_kubernetes" and parse without any kubeconfig."""
    from cloudai.cli import handlers
    from cloudai.core import Parser

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    ours = CONF / "system" / "k8s_generic.toml"
    theirs = tmp_path / "theirs.toml"
    theirs.write_text(f'kube_config_path = "{tmp_path / "kube" / "config"}"\n'
                      + ours.read_text().replace('"mbridge_kubernetes"', '"kubernetes"'))
    assert calls_by_name(handlers.verify_system_configs, "_ensure_kube_config_exists")
    written: list[bool] = []
    real = handlers._ensure_kube_config_exists

    @contextlib.contextmanager
    def watch(path: Path, content: str) -> Iterator[None]:
        with real(path, content):
            written.append(path == theirs)
            yield

    monkeypatch.setattr(handlers, "_ensure_kube_config_exists", watch)  # to see which files CloudAI wraps
    assert handlers.verify_system_configs([theirs, ours]) == 0
    assert written == [True], (
        'cloudai.cli.handlers.verify_system_configs no longer wraps exactly its own scheduler = "kubernetes" files '
        f"in a dummy kubeconfig (wrapped: {written}); read it: the plugin's files must parse without one")
    assert Parser.parse_system(ours).name == "k8s-generic-h100-ib"
    assert not (tmp_path / "home").exists(), "a kubeconfig was written for the plugin's own system file"


# --------------------------------------------------------------------------------------------------------------
# Private CloudAI members that the plugin's registered subclasses override (no replacement: the subclasses reach
# CloudAI through its Registry, registration.py), and the private state they use
# --------------------------------------------------------------------------------------------------------------

# CloudAI member -> (its recorded signature, the plugin class overriding it)
OVERRIDES = {
    "cloudai.systems.slurm.slurm_command_gen_strategy.SlurmCommandGenStrategy._container_mounts": (
        "(self) -> list[str]", "cloudai_mbridge.systems.slurm.strategy.MBridgeSlurmStrategy"),
    "cloudai.systems.kubernetes.kubernetes_runner.KubernetesRunner._submit_test": (
        "(self, tr: cloudai._core.test_scenario.TestRun) -> cloudai.systems.kubernetes.kubernetes_job.KubernetesJob",
        "cloudai_mbridge.systems.kubernetes.runner.MBridgeKubernetesRunner"),
    "cloudai.systems.kubernetes.kubernetes_system.KubernetesSystem.model_post_init": (
        "(self, _context: 'Any' = None) -> 'None'",
        "cloudai_mbridge.systems.kubernetes.runner.MBridgeKubernetesSystem"),
    "cloudai._core.base_reporter.Reporter.load_test_runs": (
        "(self)", "cloudai_mbridge.reports.common.TolerantLoading"),
}


def _resolve(dotted: str) -> Any:
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("member", sorted(OVERRIDES), ids=lambda m: m.rsplit(".", 2)[-2] + "." + m.rsplit(".", 1)[1])
def test_overridden_private_member(member: str) -> None:
    recorded, ours = OVERRIDES[member]
    owner_path, name = member.rsplit(".", 1)
    assert name in vars(_resolve(owner_path)), (
        f"CloudAI no longer defines {member}: {ours} overrides it. Read {owner_path} and adapt {ours}")
    actual = str(inspect.signature(_resolve(member)))
    assert actual == recorded, (
        f"CloudAI changed the signature of {member}: {actual} (recorded {recorded}). {ours} overrides it: read the "
        f"new code, adapt {ours}, then update OVERRIDES in tests/test_cloudai_surface.py")
    assert name in vars(_resolve(ours)), f"{ours} no longer overrides {name}: remove it from OVERRIDES"


def test_private_state_the_subclasses_use() -> None:
    from cloudai.systems.kubernetes import KubernetesSystem
    from cloudai.systems.slurm import SlurmInstaller

    from cloudai_mbridge.systems.slurm.installer import PYXIS_OPTIONS

    clients = {"_core_v1", "_batch_v1", "_custom_objects_api"}
    assert clients <= set(KubernetesSystem.__private_attributes__), (
        f"cloudai's KubernetesSystem no longer keeps its API clients in {sorted(clients)}: "
        "systems/kubernetes/runner.py's MBridgeKubernetesSystem._connect and __deepcopy__ set them")
    assert "__getstate__" in vars(KubernetesSystem), (
        "cloudai's KubernetesSystem no longer defines __getstate__: MBridgeKubernetesSystem.__deepcopy__ uses it")
    assert set(PYXIS_OPTIONS) <= set(SlurmInstaller.REQUIRED_SRUN_OPTIONS) and calls_by_name(
        SlurmInstaller._check_srun_options, "REQUIRED_SRUN_OPTIONS"), (
        "cloudai's SlurmInstaller no longer checks the pyxis options through REQUIRED_SRUN_OPTIONS: "
        "systems/slurm/installer.py's MBridgeSlurmInstaller narrows that tuple for container-less scenarios")


# --------------------------------------------------------------------------------------------------------------
# The inventory: every replacement listed, each with its test
# --------------------------------------------------------------------------------------------------------------


def test_every_replacement_has_a_surface_test() -> None:
    untested = sorted(set(plugin_session.REPLACEMENTS) - set(SURFACE))
    stale = sorted(set(SURFACE) - set(plugin_session.REPLACEMENTS))
    assert not untested, (f"session.REPLACEMENTS lists {untested} without a test here. Fix: add a test decorated "
                          "with @surface(<key>) that checks the original's signature and the behaviour relied on")
    assert not stale, f"tests here check {stale}, which session.REPLACEMENTS no longer lists: remove them"


def _cloudai_attributes() -> dict[str, Any]:
    """Every attribute of every imported CloudAI module and of the classes they define, by dotted name."""
    found: dict[str, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "cloudai" or name.startswith("cloudai.")):
            continue
        for key, value in list(vars(module).items()):
            found[f"{name}.{key}"] = value
            if isinstance(value, type) and value.__module__ == name:
                for attr, member in list(vars(value).items()):
                    found[f"{name}.{value.__qualname__}.{attr}"] = member
    return found


def _changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    missing = object()
    return {k for k in before.keys() | after.keys() if before.get(k, missing) is not after.get(k, missing)}


def test_the_sessions_replace_exactly_the_inventory() -> None:
    """Inside dry-run, run and verify-configs, the CloudAI attributes that differ from CloudAI's own are exactly
    session.REPLACEMENTS; afterwards every one is CloudAI's again."""
    import cloudai.cli.handlers
    import cloudai.systems.slurm  # noqa: F401

    before = _cloudai_attributes()
    changed: set[str] = set()
    for open_session in (lambda: plugin_session.session("dry-run"), lambda: plugin_session.session("run"),
                         plugin_session.verify_configs_session):
        with open_session():
            changed |= _changed(before, _cloudai_attributes())
    extra = sorted(changed - set(plugin_session.REPLACEMENTS))
    unused = sorted(set(plugin_session.REPLACEMENTS) - changed)
    assert not extra, f"the sessions replace {extra}, which session.REPLACEMENTS does not list: add them (and tests)"
    assert not unused, f"session.REPLACEMENTS lists {unused}, which no session replaces: remove them"
    left = sorted(_changed(before, _cloudai_attributes()))
    assert not left, f"{left} not restored after the session"


def _cloudai_names(tree: ast.AST) -> set[str]:
    """The names a module binds by importing from CloudAI (anywhere in the module)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "cloudai"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "cloudai":
            names |= {a.asname or a.name for a in node.names}
    return names


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def cloudai_patches(path: Path) -> list[int]:
    """The lines of ``path`` that assign to (or delete) an attribute of something imported from CloudAI, or call
    setattr/delattr on one: a replaced CloudAI internal."""
    tree = ast.parse(path.read_text())
    names = _cloudai_names(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        flattened = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple | ast.List) else [t])]
        if any(isinstance(t, ast.Attribute) and _root_name(t) in names for t in flattened):
            found.append(node.lineno)
    return sorted(found)


def test_no_cloudai_attribute_is_replaced_outside_the_inventory() -> None:
    """A replacement of a CloudAI attribute anywhere in the package other than through session.Patches fails here;
    so does a ``p.replace`` call in session.py that REPLACEMENTS does not list."""
    direct = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
              for line in cloudai_patches(path)]
    assert not direct, (f"{direct} replace a CloudAI attribute directly. Fix: a replace_* function in session.py, "
                        "listed in REPLACEMENTS, with its test in tests/test_cloudai_surface.py")
    tree = ast.parse(Path(plugin_session.__file__).read_text())  # wherever session.py lives
    assert len(_replace_calls(tree)) == len(plugin_session.REPLACEMENTS), (
        f"session.py calls p.replace {len(_replace_calls(tree))} times for {len(plugin_session.REPLACEMENTS)} entries "
        "of REPLACEMENTS: each replace_* function replaces one attribute and is listed there")
    for key, install in plugin_session.REPLACEMENTS.items():
        calls = _replace_calls(ast.parse(inspect.getsource(install)))
        names = [c.args[1].value for c in calls if len(c.args) > 1 and isinstance(c.args[1], ast.Constant)]
        assert names == [key.rsplit(".", 1)[1]], (
            f"session.{install.__name__} replaces {names}, but REPLACEMENTS lists it for {key}")
        assert (install.__doc__ or "").strip(), f"session.{install.__name__} has no docstring saying what and why"


def _replace_calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "replace" and isinstance(n.func.value, ast.Name) and n.func.value.id == "p"]


def test_the_inventory_scan_finds_a_direct_replacement(tmp_path: Path) -> None:
    """The scan above can fail: the direct assignments verify-configs made to cloudai.cli.handlers before they moved
    into session.py are found, and so are setattr and tuple targets."""
    probe = tmp_path / "probe.py"
    probe.write_text("import contextlib\nfrom cloudai.cli import handlers\nimport cloudai.systems.slurm as slurm\n\n"
                     "def quiet(other):\n"
                     "    handlers._ensure_kube_config_exists = lambda *_a: contextlib.nullcontext()\n"
                     "    setattr(slurm.SlurmSystem, 'update', None)\n    other.y, handlers.x = 1, 2\n"
                     "    other.z = 3\n")
    assert cloudai_patches(probe) == [6, 7, 8]
