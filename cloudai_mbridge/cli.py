"""``cloudai-mbridge``: CloudAI's own command line with this plugin registered.

Differences from plain ``cloudai``: the plugin is loaded; ``--tests-dir`` defaults to the ``test/`` folder beside the
scenario's folder (conf/test for conf/test_scenario/x.toml); ``verify-configs`` exits non-zero when a file fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ._cloudai import CloudAIMissingError, require_cloudai

_SCENARIO_VERBS = {"run", "dry-run", "install", "uninstall", "generate-report"}


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


def main(argv: list[str] | None = None) -> None:
    try:
        require_cloudai()
    except CloudAIMissingError as exc:
        print(f"cloudai-mbridge: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    import click
    from cloudai.cli import cli as cloudai_cli
    from cloudai.cli.handlers import handle_verify_all_configs

    from .launch.payload import ResultsExistError
    from .registration import register
    from .rules import PointRejectedError

    register()

    @click.command(name="verify-configs")
    @click.argument("configs_dir", type=click.Path(exists=True, resolve_path=True, path_type=Path))
    @click.option("--tests-dir", type=click.Path(exists=True, resolve_path=True, path_type=Path, file_okay=False))
    def verify_configs(configs_dir: Path, tests_dir: Path | None) -> None:
        """Verify the configuration TOML files (exit status = number of failing files, capped at 1)."""
        failed = handle_verify_all_configs(argparse.Namespace(configs_dir=configs_dir, tests_dir=tests_dir))
        if failed:
            logging.error("verify-configs: %d file(s) failed", failed)
        raise SystemExit(1 if failed else 0)

    group = click.Group(
        name="cloudai-mbridge",
        callback=cloudai_cli.main.callback,
        params=list(cloudai_cli.main.params),
        help="CloudAI with the Megatron-Bridge MoE plugin (cloudai-mbridge) loaded.",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    for name, command in cloudai_cli.main.commands.items():
        group.add_command(command, name)
    group.add_command(verify_configs, "verify-configs")
    args = sys.argv[1:] if argv is None else argv
    try:
        group.main(args=_default_tests_dir(args), prog_name="cloudai-mbridge")
    except (PointRejectedError, ResultsExistError) as exc:
        logging.error("%s", exc)
        raise SystemExit(1) from None
