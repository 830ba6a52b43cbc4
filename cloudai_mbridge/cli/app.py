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

import contextlib
import errno
import logging
import os
import sys
from pathlib import Path
from typing import Any

from .._cloudai import CloudAIMissingError, require_cloudai
from . import startup
from .exits import EXIT_ENVIRONMENT, EXIT_INPUT, HELP

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


def toml_files(args: list[str]) -> list[Path]:
    """Every TOML file the command will read: the configs named on the command line, the *.toml of the folders
    (--tests-dir, verify-configs' folder) and CloudAI's hook folder."""
    files: list[Path] = []
    values = _option_values(args, _TOML_OPTIONS)
    if "verify-configs" in args:  # its positional folder / file
        rest = args[args.index("verify-configs") + 1:]
        named = [a for i, a in enumerate(rest)
                 if not a.startswith("-") and (i == 0 or not rest[i - 1].startswith("-"))]
        values += named
        if not _option_values(args, ("--tests-dir",)):  # the test/ folder beside a scenario folder it reads too
            for value in named:
                path = Path(value).resolve()
                beside = (path if path.is_dir() else path.parent).parent / "test"
                if beside.is_dir() and not beside.is_relative_to(path if path.is_dir() else path.parent):
                    values.append(str(beside))
    if _SCENARIO_VERBS.intersection(args) and not _option_values(args, ("--hook-dir",)):
        from cloudai.parser import HOOK_ROOT  # read by CloudAI's parser when --hook-dir is not given

        values.append(str(HOOK_ROOT))
    flat = {str(Path(v)) for v in _option_values(args, ("--tests-dir",))}  # CloudAI reads its *.toml, not below
    for value in values:
        path = Path(value)
        # anything there but a folder is checked: a FIFO or a device is refused before CloudAI opens it (issue 32)
        if path.is_dir():
            files.extend(_folder_tomls(path, recursive=str(path) not in flat))
        elif path.exists():
            files.append(path)
    return list(dict.fromkeys(files))


MAX_FOLDER_ENTRIES = 20_000  # files and folders looked at under one folder named on the command line


class FolderTooLargeError(Exception):
    pass


def _folder_tomls(folder: Path, recursive: bool) -> list[Path]:
    """The *.toml files of ``folder`` (and below it when ``recursive``), looking at MAX_FOLDER_ENTRIES entries at
    most: a folder such as / or a home folder is refused in a second instead of scanned for minutes (issue 32)."""
    import os

    found: list[Path] = []
    seen = 0
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_FOLDER_ENTRIES:
                        raise FolderTooLargeError(
                            f"{folder} holds more than {MAX_FOLDER_ENTRIES:,} files and folders"
                            f"{' (with its subfolders)' if recursive else ''}; it does not look like a folder of "
                            "CloudAI configs. Fix: name the folder that holds them (conf/ for verify-configs, "
                            "conf/test for --tests-dir)")
                    try:
                        is_dir = entry.is_dir(follow_symlinks=True)
                    except OSError:  # a symlink loop: checked as a file, whose reading names the loop
                        is_dir = False
                    if entry.name.endswith(".toml") and not is_dir:
                        found.append(Path(entry.path))
                    elif recursive and entry.is_dir(follow_symlinks=False):
                        pending.append(Path(entry.path))
        except OSError:
            continue  # a folder that cannot be listed: CloudAI's own reading says so if it matters
    return sorted(found)


def toml_problems(args: list[str]) -> list[str]:
    """Every TOML file the command will read (the configs named on the command line, the *.toml of the folders,
    CloudAI's hook folder), decoded, parsed and measured here first (config_files.toml_file_problem): a file that is
    not UTF-8, not TOML or nested absurdly deep is a message naming the file, the place and the fix, never a
    traceback from deep inside the parser or whatever reads the parsed tables next."""
    from .config_files import toml_file_problem

    try:
        files = toml_files(args)
    except FolderTooLargeError as exc:
        return [str(exc)]
    problems = []
    for value in _option_values(args, ("--tests-dir",)):
        if Path(value).is_dir() and not _folder_tomls(Path(value), recursive=False):
            problems.append(f"--tests-dir {value} holds no .toml file (CloudAI reads the test TOMLs of that folder "
                            "itself, not of its subfolders). Fix: name the folder of the test TOMLs, such as conf/test")
    for option in ("--system-config", "--test-scenario"):
        for value in _option_values(args, (option,)):
            if Path(value).is_dir():
                problems.append(f"{option} {value} is a folder, not a TOML file. Fix: name the .toml file itself")
    return problems + [p for p in map(toml_file_problem, files) if p]


def _verb(args: list[str]) -> str:
    return next((a for a in args if a in _SCENARIO_VERBS or a in ("verify-configs", "list")), "the command")


def _log_file_problem(exc: BaseException, log_file: str) -> str | None:
    """CloudAI's logging set-up failed because --log-file cannot be opened: one line naming it and the fix."""
    from ..atomic import os_reason

    e: BaseException | None = exc
    while e is not None and not isinstance(e, OSError):
        e = e.__cause__ or e.__context__
    if e is None:
        return None
    return (f"cannot open the log file {Path(log_file).absolute()}: {os_reason(e)[0]}. Fix: pass --log-file with a "
            "path in a writable folder (the default is debug.log in the current folder)")


def _undecodable_args(args: list[str]) -> list[str]:
    """An argument that is no valid UTF-8 (a path of raw bytes, which Python keeps as surrogate escapes): the files
    and folders the command writes carry it in their text (configs, CSVs, the script), which cannot hold it."""
    found = []
    for i, arg in enumerate(args):
        if any("\udc80" <= c <= "\udcff" for c in arg):
            option = args[i - 1] if i and args[i - 1].startswith("-") else "an argument"
            found.append(f"{option} {arg!a} is not valid UTF-8 text; the files the command writes name it and "
                         "cannot hold it. Fix: use a path whose name is UTF-8 (rename or link the folder)")
    return found


def _symlink_loops(args: list[str]) -> list[str]:
    """An argument that names a symbolic link loop (a link that leads back to itself, directly or through others):
    one line naming it, never pathlib's RuntimeError from resolving it nor click's "does not exist"."""
    found = []
    for i, arg in enumerate(args):
        if arg.startswith("-") and "=" in arg:
            option, arg = arg.split("=", 1)
        else:
            option = args[i - 1] if i and args[i - 1].startswith("-") else "the argument"
        try:
            os.stat(arg)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                found.append(f"{option} {arg}: a symbolic link loop (following the link leads back to itself) "
                             "[ELOOP]. Fix: point the link at the real file or folder, or name that one instead")
        except ValueError:
            continue
    return found


def _log_file_kind_problem(log_file: str) -> str | None:
    """A --log-file that exists and is no regular file: opening a FIFO waits for a reader forever, a device takes or
    refuses the lines unseen (/dev/full). /dev/null is a choice: the user asks for no log."""
    import stat

    path = Path(log_file)
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # absent (it is created) or unreachable (opening it says why)
    if stat.S_ISREG(mode) or str(path) == os.devnull:
        return None
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device or socket"
    return (f"cannot use the log file {path.absolute()}: it is {kind}, not a regular file. Fix: pass --log-file with "
            "a file path in a writable folder (the default is debug.log in the current folder), or --log-file "
            "/dev/null for no log")


def _quiet_log_file_errors() -> None:
    """A log file that stops taking lines (a full disk) is said once in one line, not a traceback per record."""
    said = False

    def handle_error(handler: logging.FileHandler, _record: logging.LogRecord) -> None:
        nonlocal said
        from ..atomic import os_reason

        exc = sys.exc_info()[1]
        if not said and isinstance(exc, OSError):
            said = True
            what, fix = os_reason(exc)
            print(f"cloudai-mbridge: cannot write the log file {handler.baseFilename}: {what}; it misses the lines "
                  f"from here on. Fix: {fix.replace('--output-dir', '--log-file')}", file=sys.stderr)

    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handleError = handle_error.__get__(handler)  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    from .. import interrupts, redact

    code: Any = 0
    try:
        interrupts.install()  # Ctrl-C, SIGTERM, SIGHUP: a clean stop with a message, never a half-written file
        redact.install()  # nothing printed by this process (ours or CloudAI's) shows a secret-looking value
        _main(argv)
    except SystemExit as exc:
        code = exc.code
    except (interrupts.Interrupted, KeyboardInterrupt, Exception) as exc:
        # outside the command's own handling: while starting (a signal, also one Python wrapped into another
        # exception while CloudAI's classes build)
        code = interrupts.stop_code(exc)
        if code is None and startup.is_memory_error(exc):  # CloudAI's import under ulimit -v, say
            startup.print_error(startup.memory_problem())
            code = EXIT_ENVIRONMENT
        if code is None:
            raise
    finally:
        interrupts.closing()  # the work is done: a signal from here is noted, never a traceback or lost
        sys.stdout.flush()
        failed = redact.output_errors()
    from ..atomic import sync_folders

    sync_folders()  # the per-test reports' deferred folder syncs: here, not in an atexit function
    if not code:
        code = interrupts.swallowed_at_end() or code  # swallowed on the way, or came while the command finished
    if failed:  # stdout (or stderr) redirected to a full disk, /dev/full, a closed pipe: one line, never exit 0
        from ..atomic import os_reason

        for name, error in failed:
            what, _fix = os_reason(error)
            if error.errno == errno.EBADF:  # started with it closed (>&-)
                line = (f"{name} was closed when the command started (>&-): what the command printed to it is lost. "
                        "Fix: redirect it to a file, or to /dev/null to discard it, instead of closing it")
            else:
                line = (f"could not write to {name} ({what}): what the command printed is incomplete. Fix: redirect "
                        "it to a file on a disk with free space, or do not redirect it")
            stream = sys.__stderr__ if name != "standard error" else None  # the one that failed says nothing more
            if stream is not None:
                with contextlib.suppress(OSError, ValueError, AttributeError):  # standard error may refuse it too
                    print(f"cloudai-mbridge: {line}", file=stream, flush=True)
        code = code if isinstance(code, int) and code else 1
    late = interrupts.release(console=argv is None)  # a signal from here ends the process as a killed one
    raise SystemExit(code or late or 0)


def _main(argv: list[str] | None) -> None:
    from .. import interrupts, redact
    try:
        require_cloudai()
    except CloudAIMissingError as exc:
        print(f"cloudai-mbridge: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    import click
    from cloudai.cli import cli as cloudai_cli

    from ..launch.payload import ResultsExistError, UnsafeOutputPathError
    from ..registration import register
    from ..rules import PointRejectedError
    from .commands import guard_generate_report, list_command, verify_configs_command, version_message

    register()
    interrupts.raise_swallowed()  # a signal Python swallowed while CloudAI was imported stops the command here

    def setup(log_file: str, log_level: str) -> None:
        levels = ("debug", "info", "warning", "error", "critical")
        if str(log_level).lower() not in levels:
            raise click.BadParameter(f"{log_level!r}. Fix: use one of {', '.join(levels)}", param_hint="--log-level")
        # preflight writes nothing outside --output-dir, CloudAI's debug.log included: log to stderr only
        if click.get_current_context().invoked_subcommand == "preflight":
            logging.basicConfig(level=log_level.upper(), format="[%(levelname)s] %(message)s", stream=sys.stderr)
        else:
            problem = _log_file_kind_problem(log_file)
            if problem:
                print(f"cloudai-mbridge: {problem}", file=sys.stderr)
                raise SystemExit(2)
            try:
                cloudai_cli.main.callback(log_file, log_level)
            except (OSError, ValueError) as exc:  # dictConfig wraps the OSError of an unwritable --log-file
                problem = _log_file_problem(exc, log_file)
                if problem is None:
                    raise
                print(f"cloudai-mbridge: {problem}", file=sys.stderr)
                raise SystemExit(2) from None
            _quiet_log_file_errors()
        redact.protect_logging()  # CloudAI's debug.log and terminal handlers show no secret

    group = click.Group(
        name="cloudai-mbridge",
        callback=setup,
        params=[p for p in cloudai_cli.main.params if p.name != "version"],
        help="CloudAI with the Megatron-Bridge MoE plugin (cloudai-mbridge) loaded.",
        epilog=HELP,
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
    args = sys.argv[1:] if argv is None else argv
    if not _symlink_loops(args):  # a loop is refused below; resolving it would raise
        args = _default_tests_dir(args)
    problems = _undecodable_args(args) or _symlink_loops(args) or toml_problems(args)
    if not problems and "--help" not in args and "-h" not in args:
        from .field_check import typo_problems
        problems = typo_problems(toml_files(args))  # an unknown field or value: "did you mean", in our words
    if problems:
        for problem in problems:
            print(f"cloudai-mbridge: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_INPUT)
    try:
        group.main(args=args, prog_name="cloudai-mbridge")
    except (PointRejectedError, ResultsExistError, UnsafeOutputPathError) as exc:
        logging.error("%s", exc)
        raise SystemExit(1) from None
    except interrupts.Interrupted as exc:
        interrupts.handled()
        print(f"cloudai-mbridge: {_verb(args)} stopped by {exc} before it finished: no file was left half-written "
              "(each appears whole or not at all; an earlier one is kept as it was). Run the command again to "
              "finish", file=sys.stderr)
        raise SystemExit(exc.code) from None
    except OSError as exc:  # the operating system refused (no space, read-only, name too long, ...): say what, where
        from ..atomic import os_message

        logging.debug("operating system error", exc_info=True)
        print(f"cloudai-mbridge: {_verb(args)}: {os_message(exc)}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as exc:  # never a bare traceback on the terminal; debug.log keeps it for a bug report
        from .session import describe_error

        if startup.is_memory_error(exc):
            print(f"cloudai-mbridge: {startup.memory_problem(_verb(args))}", file=sys.stderr)
            raise SystemExit(EXIT_ENVIRONMENT) from None
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
        from .preflight import REPORT_CSV, preflight, render_text, scenario_check, write_reports
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
        from ..rules.sweep import sweep_limit_problem

        if sweep_limit_problem(scenario):  # counted before any point is enumerated; no --output-dir is created
            from .preflight import test_sources

            too_many = sweep_limit_problem(scenario, test_sources(tests_dir) if tests_dir else None, str(scenario_cfg))
            print(f"preflight: {too_many}", file=sys.stderr)
            raise SystemExit(1)
        from .. import interrupts
        from ..atomic import Staged
        from .inputs import secret_problems

        secret = output_dir is not None and bool(secret_problems(system, scenario))  # the page would show them
        write = output_dir is not None and not secret
        existed = output_dir.exists() if output_dir is not None else True
        staged: Staged | None = None
        try:
            if write:
                output_dir.mkdir(parents=True, exist_ok=True)
                # preflight.csv is written as the points come (a 100k-point sweep is never held in memory), into a
                # temporary file that becomes preflight.csv with the page, both or neither; a signal is held until
                # ``staged`` names the file, so the cleanup below always finds it
                with interrupts.deferred():
                    staged = Staged(output_dir / REPORT_CSV)
            sink = staged.write if staged is not None else None
            with session("dry-run"):  # jobs are rendered in memory to check them: the cluster is not asked
                # every point is checked once: the refusals come from the same report the table shows
                refusals, report = scenario_check(system, scenario, f"{scenario_cfg} (system {system_cfg})",
                                                  result_dir, sink=sink, keep_all=False)
                if report is None:
                    report = preflight(system, scenario, result_dir, sink=sink, keep_all=False)
            sys.stdout.write(render_text(report))
            for problem in refusals:  # what makes dry-run / run refuse the scenario as a whole
                print(f"preflight: dry-run and run would refuse the scenario: {problem}", file=sys.stderr)
            if secret:
                print(f"preflight: no table written to {output_dir}: the scenario holds a secret (above)",
                      file=sys.stderr)
            elif output_dir is not None:
                csv_path, html_path = write_reports(report, output_dir, staged)  # both or neither; failure: one line
                print(f"wrote {csv_path} and {html_path}")
        except BaseException:
            if staged is not None:
                staged.discard()
            if output_dir is not None:
                _remove_if_new_and_empty(output_dir, existed)
            raise
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
            except session.SweepStopped as stop:  # a signal, or a point the operating system could not write
                code = session.finish_stopped(s, stop)
                if stop.error is not None:  # a run that submitted nothing kept nothing either (finish_stopped)
                    _remove_if_new_and_empty(output_dir, existed)
                raise SystemExit(code) from None
            except BaseException:
                if mode == "dry-run" or session.nothing_ran(s):  # a folder of a run's inputs alone is no result
                    session.discard(s)
                _remove_if_new_and_empty(output_dir, existed)
                raise
            if s.stop_signal is not None:  # it came after the last point had started, or in a scenario without sweep
                raise SystemExit(session.finish_stopped(s, session.SweepStopped(signum=s.stop_signal)))
            finish = session.finish_dry_run if mode == "dry-run" else session.finish_run
            code = finish(s, code)
            if code and s.unreadable:  # a file could not be read: the same status as preflight and verify-configs
                code = EXIT_INPUT
        if code:
            _remove_if_new_and_empty(output_dir, existed)
        raise SystemExit(code)

    wrapped = copy.copy(command)
    wrapped.callback = callback
    return wrapped
