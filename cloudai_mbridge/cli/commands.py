"""The commands ``cloudai-mbridge`` replaces or adds over CloudAI's own (imported only once CloudAI is importable)."""

from __future__ import annotations

import argparse
import gc
import logging
import re
from pathlib import Path
from typing import Any

import click
from cloudai.cli import handlers

from .._version import installed_version
from ..safe_read import MAX_TOML_BYTES, read_text
from .exits import EXIT_INPUT, EXIT_REFUSED


def version_message() -> str:
    here = Path(__file__).resolve().parent
    mine, theirs = installed_version("cloudai-mbridge"), installed_version("cloudai")
    return f"cloudai-mbridge {mine} ({here}) with CloudAI {theirs}"


# --------------------------------------------------------------------------------------------------------------
# verify-configs
# --------------------------------------------------------------------------------------------------------------


def config_kinds(configs: Path) -> dict[str, list[Path]]:
    """The TOMLs of ``configs`` (a file, or a folder searched recursively) by kind, as CloudAI sorts them; results
    folders below it (a dry-run written into conf/) are skipped, each said in one line (config_files.config_tomls;
    session.py's expand_file_list skips the same for CloudAI's own pass)."""
    from .config_files import RUN_MARKER, config_tomls

    kept, skipped = config_tomls(configs)
    for top, runs in skipped.items():
        logging.info(f"verify-configs: skipped {top}: results of {runs} run(s) (folders that hold "
                     f"{RUN_MARKER}), not configuration")
    return handlers.load_tomls_by_type(kept)


def sibling_tests_dir(configs: Path, kinds: dict[str, list[Path]]) -> Path | None:
    """conf/test for conf/test_scenario (or a scenario file in it), when the folder checked holds scenarios but no
    test TOMLs (``kinds``: config_kinds(configs)): the same default as the scenario commands."""
    if kinds["test"] or not kinds["scenario"]:
        return None
    candidate = (configs if configs.is_dir() else configs.parent).parent / "test"
    return candidate if candidate.is_dir() else None


def explain_failures(kinds: dict[str, list[Path]], tests_dir: Path | None) -> list[str]:
    """CloudAI counts failing files without saying why (its exceptions go to debug level or nowhere): parse each
    file of ``kinds`` (config_kinds) again the way it does and return '<file>: <reason>' for each failure."""
    from unittest.mock import Mock

    from cloudai.core import Parser, System, TestParser
    from cloudai.test_parser import load_test_toml_file

    test_tomls = list(tests_dir.glob("*.toml")) if tests_dir else kinds["test"]
    reasons: list[str] = []

    class Capture(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.ERROR)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(" ".join(record.getMessage().split()))

    def attempt(path: Path, fn: Any) -> None:
        root = logging.getLogger()
        saved, cap = root.handlers[:], Capture()
        root.handlers = [cap]  # CloudAI logs the detail itself; keep it for the reason, not twice on the terminal
        try:
            fn()
        except (Exception, SystemExit) as exc:
            text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            reasons.append(f"{path}: {' | '.join([*cap.messages, text])}")
        finally:
            root.handlers = saved

    for path in kinds["system"]:
        if 'scheduler = "kubernetes"' in read_text(path, MAX_TOML_BYTES, "this TOML file", errors="replace"):
            continue  # CloudAI needs a kubeconfig to parse these; its own check covers them
        attempt(path, lambda p=path: Parser.parse_system(p))
    tp = TestParser([], None)  # type: ignore[arg-type]

    def load_test(path: Path) -> None:
        with path.open(encoding="utf-8") as fh:
            tp.current_file = path
            tp.load_test_definition(load_test_toml_file(fh, path))

    for path in test_tomls:
        attempt(path, lambda p=path: load_test(p))
    system = Mock(spec=System)
    for path in kinds["scenario"]:

        def load_scenario(p: Path = path) -> None:
            tests = Parser.parse_tests(test_tomls, system)
            Parser.parse_test_scenario(p, system, {t.name: t for t in tests}, {})

        attempt(path, load_scenario)
    reasons += [f"{p}: not a system, test or scenario TOML" for p in kinds["unknown"]]
    return reasons


# Rules whose verdict depends on the system a scenario runs on (its GPU, GPUs per node, node count, fabric): a
# scenario refused only by these is meant for another system. Any other refusal (a secret, an API-server limit, a
# field the rules refuse everywhere) is an error on every system.
SYSTEM_FIT_RULES = frozenset({
    "system-gpu", "memory", "node-shape", "dispatcher-gpu", "fp8-recipe-gpu", "hybridep-nvlink-domain",
    "deepep-network", "world-size-expert-parallel", "world-size-model-parallel", "global-batch", "flex-dispatcher-ep",
    "refit-transport-device", "refit-layout", "refit-model-size", "interleaved-microbatches",
    # expert-dp = world / (etp*ep*pp): a recipe's instances divide it on the recipe's node count, not on a 2-GPU host
    "distributed-optimizer-instances",
    # a shipped recipe that upstream itself cannot run (conf/test/nvidia062_*: the file's header says why) is refused
    # on its own system too; the scenario's line names the rule
    "pipeline-layout", "standalone-one-node",
    # a test kind the plugin writes no job for on this system type (the dispatch microbenchmark is Slurm only)
    "system-kind",
})


def _fits_elsewhere(reason: str) -> bool:
    """A refusal that another system would not give: a system-fit rule, or a Kubernetes system's need of a container
    image (its API-server limits are errors everywhere)."""
    rule = _rule_of(reason)
    return rule in SYSTEM_FIT_RULES or (rule == "kubernetes" and "container_image" in reason)


def _declared_rejections(tr: object) -> frozenset[str]:
    """The rule ids a test run's test declares in ``expected_rejections`` (none for a test that is not ours)."""
    test = getattr(tr, "test", None)
    found = getattr(getattr(test, "test_definition", test), "expected_rejections", None)
    return found if isinstance(found, frozenset) else frozenset()


def _rule_of(reason: str) -> str:
    """The rule id a refusal line starts with ('[memory] ...' -> 'memory'), or '' when it names none."""
    found = re.match(r"\s*\[([A-Za-z0-9_-]+)\]", reason)
    return found.group(1) if found else ""


def _reading_tests_once(parser_cls: Any) -> Any:
    """CloudAI's ``Parser`` with its ``parse_tests`` done once per list of test TOMLs, for one command: verify-configs
    parses every scenario of a folder against the same test folder, and CloudAI's ``parse`` reads and validates that
    whole folder again for each (conf/: 39 scenarios x 80 test TOMLs). A subclass of ours, nothing of CloudAI's is
    replaced; the definitions it returns are only read (a scenario's test runs get copies, test_scenario_parser.py's
    ``_prepare_tdef``), and a parse that fails is not kept: the next scenario reads and reports it again."""
    done: dict[tuple[Path, ...], list] = {}

    class ReadingTestsOnce(parser_cls):  # type: ignore[misc, valid-type]
        @staticmethod
        def parse_tests(test_tomls: list[Path], system: Any) -> list:
            key = tuple(test_tomls)
            if key not in done:
                done[key] = parser_cls.parse_tests(test_tomls, system)
            return list(done[key])

    return ReadingTestsOnce


def scenario_checks(configs: Path, kinds: dict[str, list[Path]], tests_dir: Path | None,
                    system_cfg: Path, skipped: list[str] | None = None,
                    unreadable: list[str] | None = None) -> list[str]:
    """dry-run's own checks of every scenario under ``configs`` (``kinds``: config_kinds(configs)) on ``system_cfg``,
    without writing anything: the parse, the folder names, every sweep point's rules and its job rendered in memory
    (preflight.scenario_check).

    A conf/ folder holds scenarios for several systems (each sized for one GPU and node count): when a folder is
    checked, a scenario that dry-run would refuse on ``system_cfg`` only because a test of it has no point the rules
    accept there (the GPU, the node count, the memory) is meant for another system: it is appended to ``skipped`` as
    one line with the first reason, not an error. Everything else (a file CloudAI cannot read, a folder name, a
    secret, an empty sweep) is an error. A scenario file named on its own is checked strictly: every refusal is an
    error."""
    from cloudai.core import Parser
    from cloudai.parser import HOOK_ROOT

    from .preflight import scenario_check
    from .session import describe_error

    problems = []
    parser_cls = _reading_tests_once(Parser)
    if tests_dir is None:  # the folder holding the test TOMLs (CloudAI reads one folder)
        folders = {p.parent for p in kinds["test"]}
        tests_dir = folders.pop() if len(folders) == 1 else configs if configs.is_dir() else configs.parent
    for path in kinds["scenario"]:
        files = f"{path} (system {system_cfg})"
        try:
            _system, _tests, scenario = parser_cls(system_cfg, HOOK_ROOT).parse(tests_dir, path)
        except SystemExit:
            problems.append(f"{files}: CloudAI could not read it (its messages above)")
            if unreadable is not None:
                unreadable.append(str(path))
            continue
        except Exception as exc:
            problems.append(f"{files}: could not read it: {describe_error(exc)}. Fix: correct that field")
            if unreadable is not None:
                unreadable.append(str(path))
            continue
        if scenario is None:
            continue
        refusals, report = scenario_check(_system, scenario, files, tests_dir=tests_dir)
        tallies = [report.tests.get(tr.name) for tr in scenario.test_runs] if report is not None else [None]
        misfits = [t for t in tallies if t is not None and not t.runnable]
        # a rule the test declares in expected_rejections refuses it on every system: it decides nothing here
        declared = {id(t): _declared_rejections(tr) for tr, t in zip(scenario.test_runs, tallies, strict=False)}
        fit_only = all(_fits_elsewhere(r) or _rule_of(r) in declared.get(id(t), ()) for t in misfits for r in t.reasons)
        if skipped is not None and configs.is_dir() and refusals and misfits and fit_only and None not in tallies:
            fit = [r for t in misfits for r in t.reasons if _fits_elsewhere(r)]
            if fit:
                first = fit[0].split(" Fix:")[0].split(" | ")[0]
                first = first if len(first) <= 160 else first[:157] + "..."
                skipped.append(f"{path.name}: not for this system: {len(misfits)} of its {len(tallies)} test(s) "
                               f"have no point that runs on {system_cfg.name} ({first})")
            else:
                rules = sorted({_rule_of(r) for t in misfits for r in t.reasons})
                skipped.append(f"{path.name}: refused on every system, as its test(s) declare: {len(misfits)} of its "
                               f"{len(tallies)} test(s) are rejected only by rules named in expected_rejections "
                               f"({', '.join(f'[{r}]' for r in rules)}); checked, not an error")
            continue
        problems += refusals
    return problems


def the_tests_folder(kinds: dict[str, list[Path]]) -> Path | None:
    """The one folder holding every test TOML found (conf/test for conf/), when there are scenarios to check."""
    folders = {p.parent for p in kinds["test"]}
    return folders.pop() if kinds["scenario"] and len(folders) == 1 else None


def the_system(configs: Path, kinds: dict[str, list[Path]]) -> Path | None:
    """The folder's only system TOML (a one-cluster conf/), else None."""
    if configs.is_file():
        return None
    return kinds["system"][0] if len(kinds["system"]) == 1 else None


def sweep_limit_problems(kinds: dict[str, list[Path]], tests_dir: Path | None) -> list[str]:
    """rules/sweep.py's sweep_limit_problem of every scenario of ``kinds``, read without a system (as explain_failures
    reads them; a scenario that cannot be read is CloudAI's to report)."""
    from unittest.mock import Mock

    from cloudai.core import Parser, System

    from ..rules.sweep import sweep_limit_problem
    from .preflight import test_sources

    test_tomls = list(tests_dir.glob("*.toml")) if tests_dir else kinds["test"]
    system = Mock(spec=System)
    found = []
    try:
        tests = {t.name: t for t in Parser.parse_tests(test_tomls, system)}
    except (Exception, SystemExit):
        return []
    for path in kinds["scenario"]:
        try:
            scenario = Parser.parse_test_scenario(path, system, tests, {})
        except (Exception, SystemExit):
            continue
        if sweep_limit_problem(scenario):
            sources = test_sources(tests_dir) if tests_dir else {t: str(p) for t, p in _names(test_tomls)}
            found.append(sweep_limit_problem(scenario, sources, str(path)) or "")
    return found


def _names(paths: list[Path]) -> list[tuple[str, Path]]:
    from .config_files import tomllib

    named = []
    for path in paths:
        try:
            named.append((tomllib.loads(read_text(path, MAX_TOML_BYTES)).get("name"), path))
        except Exception:
            continue
    return named


class _ParsedOnly(logging.Filter):
    """CloudAI's "Checked N configuration files, all passed" says its parser read them; the plugin's checks of each
    scenario (the sweep's size, on a system every point) come after it and may still refuse one: said as what it
    is."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Checked ") and message.endswith(", all passed"):
            record.msg = message.removesuffix(", all passed") + ", read by CloudAI's parser" + (
                " (the plugin's checks of each scenario follow)" if "configuration files" in message else "")
            record.args = ()
        return True


def verify_configs_command() -> click.Command:
    @click.command(name="verify-configs")
    @click.argument("configs_dir", type=click.Path(exists=True, resolve_path=True, path_type=Path))
    @click.option("--tests-dir", type=click.Path(exists=True, resolve_path=True, path_type=Path, file_okay=False))
    @click.option("--system-config", "system_cfg",
                  type=click.Path(exists=True, dir_okay=False, resolve_path=True, path_type=Path),
                  help="Check every scenario on this system with dry-run's own checks (default: the folder's only "
                  "system file, if it has exactly one).")
    def verify_configs(configs_dir: Path, tests_dir: Path | None, system_cfg: Path | None) -> None:
        """Verify the configuration TOML files; exit 2 with each file that cannot be read and why, 1 when dry-run
        would refuse a scenario. Scenarios are checked
        against the test/ folder beside theirs unless --tests-dir says otherwise, and, on a system (--system-config
        or the folder's only one), with everything dry-run checks: every sweep point's rules and its job rendered
        in memory. Nothing is written."""
        kinds = config_kinds(configs_dir)
        if tests_dir is None:
            tests_dir = sibling_tests_dir(configs_dir, kinds) or the_tests_folder(kinds)
            if tests_dir is not None:
                logging.info(f"verify-configs: scenarios checked against the tests in {tests_dir}")
        from .config_files import scenario_file_problems, system_file_problems

        early = [p for path in kinds["system"] for p in system_file_problems(path)]
        early += [p for path in kinds["scenario"] for p in scenario_file_problems(path)]
        early += system_file_problems(system_cfg) if system_cfg and system_cfg not in kinds["system"] else []
        if early:
            for problem in early:
                logging.error(f"verify-configs: {problem}")
            logging.error("verify-configs: %d problem(s)", len(early))
            raise SystemExit(EXIT_INPUT)
        from .session import verify_configs_session

        # without CloudAI's error for a missing conf/hook and its dummy kubeconfig in ~/.kube (session.py says why);
        # its "all passed" is said of its parse only, where the plugin's checks of the scenarios follow
        later = bool(kinds["scenario"])
        parsed_only = _ParsedOnly()
        if later:
            logging.getLogger().addFilter(parsed_only)
        try:
            with verify_configs_session():
                failed = handlers.handle_verify_all_configs(argparse.Namespace(configs_dir=configs_dir,
                                                                               tests_dir=tests_dir))
        finally:
            logging.getLogger().removeFilter(parsed_only)
        if failed:
            for reason in explain_failures(kinds, tests_dir):
                logging.error(f"verify-configs: {reason}")
            logging.error("verify-configs: %d file(s) failed. Fix: correct the fields named above (each line names "
                          "the file, the field and the value)", failed)
            raise SystemExit(EXIT_INPUT)
        system_cfg = system_cfg or the_system(configs_dir, kinds)
        if system_cfg is None and (too_many := sweep_limit_problems(kinds, tests_dir)):
            for problem in too_many:  # counted, not enumerated: CloudAI's parse does not look at the sweeps' size
                logging.error(f"verify-configs: {problem}")
            raise SystemExit(EXIT_REFUSED)
        if system_cfg is None:
            logging.warning("verify-configs: scenarios checked by CloudAI's parser only; pass --system-config to run "
                            "dry-run's checks too (rules, scheduler fields, every sweep point)")
            raise SystemExit(0)
        from .session import session

        skipped: list[str] = []
        unreadable: list[str] = []
        with session("dry-run"):  # the cluster is not asked (no sinfo / scontrol), as in a dry-run
            problems = scenario_checks(configs_dir, kinds, tests_dir, system_cfg, skipped, unreadable)
        for line in skipped:
            logging.info(f"verify-configs: skipped {line}")
        for problem in problems:
            logging.error(f"verify-configs: {problem}")
        if problems:
            logging.error("verify-configs: %d problem(s) dry-run would refuse", len(problems))
            raise SystemExit(EXIT_INPUT if unreadable else EXIT_REFUSED)
        checked = len(kinds["scenario"]) - len(skipped)
        if kinds["scenario"] and not checked:
            logging.error(f"verify-configs: none of the {len(skipped)} scenario(s) has a point that would run on "
                          f"{system_cfg}. Fix: check a scenario meant for it (verify-configs <scenario.toml> "
                          "--system-config <system> says why each point is rejected)")
            raise SystemExit(1)
        more = (f"; {len(skipped)} scenario(s) meant for other systems skipped (above; `verify-configs "
                "<scenario.toml> --system-config <system>` gives every reason for one)") if skipped else ""
        logging.info(f"verify-configs: {checked} scenario(s) pass dry-run's checks on {system_cfg}{more}")
        raise SystemExit(0)

    return verify_configs


# --------------------------------------------------------------------------------------------------------------
# list
# --------------------------------------------------------------------------------------------------------------


def list_command() -> click.Command:
    @click.command(name="list")
    @click.argument("type", type=click.Choice(["workloads", "reports", "agents"], case_sensitive=False),
                    default="workloads")
    @click.option("-v", "--verbose", is_flag=True, default=False, help="Verbose output.")
    def list_items(type: str, verbose: bool) -> None:
        """List registered workloads (test templates; the default), scenario reports or agents."""
        if type.lower() != "workloads":
            raise SystemExit(handlers.handle_list_registered_items(type, verbose))
        from cloudai.core import Registry

        tdefs = Registry().test_definitions_map
        # ours: every template whose class is the plugin's (one added to registration.py shows up without a list here)
        mine = [n for n, cls in tdefs.items() if cls.__module__.split(".")[0] == "cloudai_mbridge"]
        print(f"Workloads of cloudai-mbridge {installed_version('cloudai-mbridge')} (test_template_name):")
        for idx, name in enumerate(mine, start=1):
            doc = (tdefs[name].__doc__ or "").strip().splitlines()[0]
            doc = re.sub(r"\s*\(template name ``\w+``\)", "", doc).replace("``", "")  # the name is shown already
            print(f'{idx}. "{name}" {doc}')
        others = sorted(n for n in tdefs if n not in mine)
        print(f"CloudAI's own workloads ({len(others)}): {', '.join(others)}")
        from ..rules import TRAINING_RULES
        from ..rules.refit import REFIT_RULES

        print(f"Rules checked before a job is written: {len(TRAINING_RULES.rules)} for MBridgeTraining, "
              f"{len(REFIT_RULES.rules)} for MBridgeRefit (`cloudai-mbridge preflight` shows them per sweep point); "
              "scenario reports: `cloudai-mbridge list reports`.")
        raise SystemExit(0)

    return list_items


# --------------------------------------------------------------------------------------------------------------
# generate-report
# --------------------------------------------------------------------------------------------------------------


def results_problem(result_dir: Path, scenario: Any) -> str | None:
    """Why ``result_dir`` is not a results folder of ``scenario`` (None when it is): every test run writes
    ``<result_dir>/<test run name>/<iteration>/...``; at least one of them must hold a run."""
    names = [tr.name for tr in scenario.test_runs]
    present = [n for n in names if (result_dir / n).is_dir() and any((result_dir / n).iterdir())]
    if present:
        return None
    found = sorted(p.name for p in result_dir.iterdir() if p.is_dir()) if result_dir.is_dir() else []
    what = f"it holds {', '.join(found[:8])}" if found else "it is empty"
    return (f"{result_dir} holds no results of scenario {scenario.name!r} (expected a folder named "
            f"{' or '.join(repr(n) for n in names)}; {what}). Fix: pass the folder `run` printed as "
            "'Scenario results will be stored at', with the scenario that produced it.")


def saved_inputs(result_dir: Path) -> tuple[Path | None, Path | None, Path | None]:
    """(system, scenario, tests folder) that `run` kept in ``<result_dir>/mbridge_inputs/`` (session.save_inputs);
    None for each that is not there."""
    from .session import INPUTS

    def only(folder: Path) -> Path | None:
        files = sorted(folder.glob("*.toml")) if folder.is_dir() else []
        return files[0] if len(files) == 1 else None

    inputs = result_dir / INPUTS
    tests = inputs / "test"
    return only(inputs / "system"), only(inputs / "test_scenario"), tests if tests.is_dir() else None


class _FailedReports(logging.Handler):
    """Collects the reports CloudAI's generate_reports logged as failed ("Error generating report '<name>'")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.names: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Error generating report"):
            self.names.append(message.split("'")[1] if message.count("'") >= 2 else message)


def guard_generate_report(command: click.Command) -> click.Command:
    """CloudAI's generate-report, which also works from the results folder alone (--system-config and
    --test-scenario default to the files `run` kept in it), and refuses a folder without the scenario's results."""
    import copy

    original = command.callback

    def callback(system_cfg: Path | None, tests_dir: Path | None, scenario_cfg: Path | None, hook_dir: Path | None,
                 result_dir: Path) -> None:
        from cloudai.core import Parser
        from cloudai.parser import HOOK_ROOT

        from .session import INPUTS

        if system_cfg is None or scenario_cfg is None:
            saved_system, saved_scenario, saved_tests = saved_inputs(result_dir)
            if saved_system is None or saved_scenario is None:
                missing = " and ".join(o for o, v in (("--system-config", system_cfg), ("--test-scenario",
                                                                                       scenario_cfg)) if v is None)
                logging.error(f"generate-report: {result_dir} holds no {INPUTS}/ with the run's system and scenario "
                              "(cloudai-mbridge run keeps them there; this folder comes from plain cloudai, a dry-run "
                              f"or an older version). Fix: pass {missing}")
                raise SystemExit(2)
            if scenario_cfg is None:
                scenario_cfg, tests_dir = saved_scenario, tests_dir or saved_tests
            system_cfg = system_cfg or saved_system
            logging.info(f"generate-report: system {system_cfg}, scenario {scenario_cfg} (kept by the run)")
            from .config_files import toml_file_problem

            kept = [system_cfg, scenario_cfg, *(sorted(tests_dir.glob("*.toml")) if tests_dir else [])]
            problems = [p for p in map(toml_file_problem, kept) if p]  # the CLI checked only the files it was named
            if problems:
                for problem in problems:
                    logging.error(f"generate-report: {problem}")
                raise SystemExit(2)
        from ..safe_read import results_problems

        # a FIFO, a device or a huge file where a run's log, config or test-run.toml belongs: refused before CloudAI
        # or the reports open it (one would wait forever, the next read until memory runs out; issue 32)
        unreadable = results_problems(result_dir)
        if unreadable:
            for problem in unreadable:
                logging.error(f"generate-report: nothing written: {problem}")
            raise SystemExit(1)
        try:
            _, _, scenario = Parser(system_cfg, hook_dir or HOOK_ROOT).parse(tests_dir, scenario_cfg)
        except SystemExit:
            raise SystemExit(2) from None
        except Exception as exc:
            logging.error(f"generate-report: cannot read {scenario_cfg}: {type(exc).__name__}: {exc}")
            raise SystemExit(2) from None
        from ..rules.sweep import sweep_limit_problem

        if scenario is not None and sweep_limit_problem(scenario):  # the reports would enumerate every point
            from .preflight import test_sources

            too_many = sweep_limit_problem(scenario, test_sources(tests_dir) if tests_dir else None, str(scenario_cfg))
            logging.error(f"generate-report: {too_many}")
            raise SystemExit(1)
        problem = results_problem(result_dir, scenario) if scenario is not None else "no scenario was read"
        if problem:
            logging.error(f"generate-report: nothing written: {problem}")
            raise SystemExit(1)
        from ..atomic import sync_folders
        from .session import log_report_failures, report_failures, tolerant_reports

        failed_names = _FailedReports()
        logging.getLogger().addHandler(failed_names)
        code: Any = 0
        # What is loaded by now (CloudAI, pydantic, the scenario) lives as long as the command: kept out of the
        # garbage collector's passes, which otherwise walk it again and again while 1,000 runs are reported; and a
        # pass once per 20,000 new objects rather than 700 (CloudAI's reporters copy the test run per run folder).
        gc.freeze()
        gc.set_threshold(20_000, 10, 10)
        try:
            # CloudAI logs a report that failed as a warning, exits 0; a link, a file or a folder not named by a
            # number among the run folders is named and skipped, not the end of every report (issue 46)
            with report_failures(result_dir) as failed, tolerant_reports():
                try:
                    original(system_cfg=system_cfg, tests_dir=tests_dir, scenario_cfg=scenario_cfg,
                             hook_dir=hook_dir, result_dir=result_dir)
                except SystemExit as exc:
                    code = exc.code
                finally:
                    sync_folders()  # the per-test reports' renames, whose folder syncs were deferred
        finally:
            logging.getLogger().removeHandler(failed_names)
        if failed.messages():  # the operating system refused a file: what, where, the fix
            log_report_failures("generate-report", failed.messages())
            raise SystemExit(1)
        if failed_names.names:  # a report raised otherwise; CloudAI logged it and went on
            logging.error(f"generate-report: {len(failed_names.names)} report(s) could not be written: "
                          f"{', '.join(failed_names.names)} (debug.log has why); the others were")
            raise SystemExit(1)
        raise SystemExit(code)

    wrapped = copy.copy(command)
    wrapped.callback = callback
    wrapped.params = []
    for param in command.params:
        if param.name in ("system_cfg", "scenario_cfg"):
            param = copy.copy(param)
            param.required = False
            param.help = f"{param.help or ''} Default: the one `run` kept in <result-dir>/mbridge_inputs/.".strip()
        wrapped.params.append(param)
    return wrapped
