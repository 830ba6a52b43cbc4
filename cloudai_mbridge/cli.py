"""``cloudai-mbridge``: CloudAI's own command line with this plugin registered.

Differences from plain ``cloudai``: the plugin is loaded; ``--tests-dir`` defaults to the ``test/`` folder beside the
scenario's folder (conf/test for conf/test_scenario/x.toml); ``preflight`` checks every sweep point without generating
jobs (preflight.py); ``dry-run`` asks no cluster and lists what it wrote, ``run`` keeps its inputs in the results
folder, ends with the points run, passed, failed and skipped by a rule, and exits 1 when every job failed or a rule
skipped a point the test does not declare (session.py); ``verify-configs`` says why a file fails and exits 1, ``list``
shows the plugin's workloads, ``generate-report`` works from the results folder alone and refuses one without the
scenario's results, ``--version`` names the plugin (commands.py).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from ._cloudai import CloudAIMissingError, require_cloudai

_SCENARIO_VERBS = {"run", "dry-run", "preflight", "install", "uninstall", "generate-report"}


def _default_tests_dir(args: list[str]) -> list[str]:
    explicit = any(a == "--tests-dir" or a.startswith("--tests-dir=") for a in args)
    if explicit or not _SCENARIO_VERBS.intersection(args):
        return args
    scenario = None
    for i, a in enumerate(args):
        if a == "--test-scenario" and i + 1 < len(args):
            scenario = args[i + 1]
        elif a.startswith("--test-scenario="):
            scenario = a.split("=", 1)[1]
    if scenario is None:
        return args
    tests_dir = Path(scenario).resolve().parent.parent / "test"
    return [*args, "--tests-dir", str(tests_dir)] if tests_dir.is_dir() else args


_TOML_OPTIONS = ("--system-config", "--test-scenario", "--tests-dir", "--hook-dir")


def _option_values(args: list[str], names: tuple[str, ...]) -> list[str]:
    out = []
    for i, a in enumerate(args):
        if a in names and i + 1 < len(args):
            out.append(args[i + 1])
        elif "=" in a and a.split("=", 1)[0] in names:
            out.append(a.split("=", 1)[1])
    return out


def toml_problems(args: list[str]) -> list[str]:
    """Every TOML file the command will read (the configs named on the command line, the *.toml of the folders),
    decoded and parsed here first: a file that is not UTF-8 or not TOML is a message naming the file, the place and
    the fix, never a traceback from deep inside the parser."""
    from .config_files import tomllib

    files: list[Path] = []
    values = _option_values(args, _TOML_OPTIONS)
    if "verify-configs" in args:  # its positional folder / file
        rest = args[args.index("verify-configs") + 1:]
        values += [a for i, a in enumerate(rest)
                   if not a.startswith("-") and (i == 0 or not rest[i - 1].startswith("-"))]
    for value in values:
        path = Path(value)
        files.extend(sorted(path.rglob("*.toml")) if path.is_dir() else [path] if path.is_file() else [])
    problems = []
    for option in ("--system-config", "--test-scenario"):
        for value in _option_values(args, (option,)):
            if Path(value).is_dir():
                problems.append(f"{option} {value} is a folder, not a TOML file. Fix: name the .toml file itself")
    for path in files:
        try:
            data = path.read_bytes()
        except OSError as e:
            problems.append(f"{path}: cannot be read ({e.strerror}). Fix: check the file's permissions")
            continue
        try:
            tomllib.loads(data.decode("utf-8"))
        except RecursionError:
            problems.append(f"{path}: not valid TOML (arrays or tables nested too deeply to read). "
                            "Fix: correct the file")
        except UnicodeDecodeError as e:
            problems.append(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}). "
                            "Fix: save the file as UTF-8")
        except tomllib.TOMLDecodeError as e:
            problems.append(f"{path}: not valid TOML ({e}). Fix: correct the file at that line")
    return problems


def main(argv: list[str] | None = None) -> None:
    from . import redact

    redact.install()  # nothing printed by this process (ours or CloudAI's) shows a secret-looking value
    try:
        require_cloudai()
    except CloudAIMissingError as exc:
        print(f"cloudai-mbridge: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    import click
    from cloudai.cli import cli as cloudai_cli

    from .commands import guard_generate_report, list_command, verify_configs_command, version_message
    from .launch.payload import ResultsExistError, UnsafeOutputPathError
    from .registration import register
    from .rules import PointRejectedError

    register()

    def setup(log_file: str, log_level: str) -> None:
        levels = ("debug", "info", "warning", "error", "critical")
        if str(log_level).lower() not in levels:
            raise click.BadParameter(f"{log_level!r}. Fix: use one of {', '.join(levels)}", param_hint="--log-level")
        # preflight writes nothing outside --output-dir, CloudAI's debug.log included: log to stderr only
        if click.get_current_context().invoked_subcommand == "preflight":
            logging.basicConfig(level=log_level.upper(), format="[%(levelname)s] %(message)s", stream=sys.stderr)
        else:
            cloudai_cli.main.callback(log_file, log_level)
        redact.protect_logging()  # CloudAI's debug.log and terminal handlers show no secret

    group = click.Group(
        name="cloudai-mbridge",
        callback=setup,
        params=[p for p in cloudai_cli.main.params if p.name != "version"],
        help="CloudAI with the Megatron-Bridge MoE plugin (cloudai-mbridge) loaded.",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    for name, command in cloudai_cli.main.commands.items():
        if name in ("dry-run", "run"):
            command = with_session(command)
        elif name == "generate-report":
            command = guard_generate_report(command)
        group.add_command(command, name)
    click.version_option(version_message(), "--version", message="%(version)s")(group)
    group.add_command(verify_configs_command(), "verify-configs")
    group.add_command(list_command(), "list")
    group.add_command(preflight_command(cloudai_cli.main.commands["dry-run"]), "preflight")
    args = _default_tests_dir(sys.argv[1:] if argv is None else argv)
    problems = toml_problems(args)
    if problems:
        for problem in problems:
            print(f"cloudai-mbridge: {problem}", file=sys.stderr)
        raise SystemExit(2)
    try:
        group.main(args=args, prog_name="cloudai-mbridge")
    except (PointRejectedError, ResultsExistError, UnsafeOutputPathError) as exc:
        logging.error("%s", exc)
        raise SystemExit(1) from None
    except Exception as exc:  # never a bare traceback on the terminal; debug.log keeps it for a bug report
        from .session import describe_error

        logging.debug("unexpected error", exc_info=True)
        print(f"cloudai-mbridge: {describe_error(exc)} (unexpected: please report it with debug.log, which holds "
              "the traceback)", file=sys.stderr)
        raise SystemExit(1) from None


def preflight_command(dry_run: Any) -> Any:
    """``preflight``: dry-run's arguments (plus ``--result-dir``), every sweep point checked, no job generated."""
    import click

    def callback(system_cfg: Path, tests_dir: Path | None, scenario_cfg: Path, hook_dir: Path | None,
                 output_dir: Path | None, result_dir: Path | None, **_ignored: object) -> None:
        from .config_files import file_problems
        from .preflight import REPORT_CSV, REPORT_HTML, preflight, render_text, scenario_check, write_csv, write_html
        from .session import describe_error, session

        early = file_problems(system_cfg, scenario_cfg)
        if early:
            for problem in early:
                print(f"preflight: {problem}", file=sys.stderr)
            raise SystemExit(2)
        try:
            from cloudai.core import Parser
            from cloudai.parser import HOOK_ROOT

            system, _tests, scenario = Parser(system_cfg, hook_dir or HOOK_ROOT).parse(tests_dir, scenario_cfg)
            if scenario is None:
                raise ValueError("no test scenario was read")
        except SystemExit:
            print(f"preflight: could not read {scenario_cfg} with {system_cfg} (see the messages above). Fix: correct "
                  "the field(s) named there", file=sys.stderr)
            raise SystemExit(2) from None
        except Exception as exc:
            print(f"preflight: could not read {scenario_cfg} with {system_cfg}: {describe_error(exc)}. Fix: correct "
                  "that field", file=sys.stderr)
            raise SystemExit(2) from None
        with session("dry-run"):  # jobs are rendered in memory to check them: the cluster is not asked
            # every point is checked once: the refusals come from the same report the table shows
            refusals, report = scenario_check(system, scenario, f"{scenario_cfg} (system {system_cfg})", result_dir)
            if report is None:
                report = preflight(system, scenario, result_dir)
        sys.stdout.write(render_text(report))
        for problem in refusals:  # what makes dry-run / run refuse the scenario as a whole
            print(f"preflight: dry-run and run would refuse the scenario: {problem}", file=sys.stderr)
        if output_dir is not None:
            output_dir.mkdir(parents=True, exist_ok=True)
            csv_path = write_csv(report, output_dir / REPORT_CSV)
            html_path = write_html(report, output_dir / REPORT_HTML)
            print(f"wrote {csv_path} and {html_path}")
        raise SystemExit(report.exit_code or (1 if refusals else 0))

    result_dir_opt = click.Option(
        ["--result-dir"], type=click.Path(exists=True, file_okay=False, resolve_path=True, path_type=Path),
        help="An earlier results folder of this scenario: GPU-hours from its measured iteration times.",
    )
    return click.Command(
        name="preflight",
        callback=callback,
        params=[*dry_run.params, result_dir_opt],
        help="Check every point of the scenario's sweeps (rules, memory estimate, GPU-hours) without generating "
        "jobs; exit status 1 when every point, or a test without a sweep, is rejected.",
    )


def _remove_if_new_and_empty(output_dir: Any, existed: bool) -> None:
    """--output-dir created by this command and left empty by a refusal is removed again."""
    if output_dir is None or existed:
        return
    path = Path(output_dir)
    try:
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    except OSError:
        pass


def with_session(command: Any) -> Any:
    """CloudAI's dry-run / run command inside a plugin session (session.py): a dry-run that asks no cluster and says
    what it wrote, a run that exits 1 when every job failed."""
    import copy

    from . import session

    original = command.callback
    mode = "dry-run" if command.name == "dry-run" else "run"

    def callback(**kwargs: Any) -> None:
        output_dir = kwargs.get("output_dir")
        existed = output_dir is None or Path(output_dir).exists()
        with session.session(mode) as s:
            try:
                original(**kwargs)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                if mode == "dry-run":
                    session.discard(s)
                _remove_if_new_and_empty(output_dir, existed)
                raise
            finish = session.finish_dry_run if mode == "dry-run" else session.finish_run
            code = finish(s, code)
        if code:
            _remove_if_new_and_empty(output_dir, existed)
        raise SystemExit(code)

    wrapped = copy.copy(command)
    wrapped.callback = callback
    return wrapped
