"""Render a complete sbatch script from plain data: no CloudAI, no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .hostlist import hostlist_fix, hostlist_problem
from .shell import (
    SbatchFieldError,
    argv,
    directive_word,
    env_exports,
    filename_pattern_path,
    q,
    sbatch_name,
    split_args,
)

_JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class SrunStep:
    """One srun step of the job: one task per GPU (or a single task), logs per rank under the output folder."""

    name: str
    argv: tuple[str, ...]
    num_nodes: int
    ntasks_per_node: int
    log_name: str  # file name pattern under logs/, Slurm's %t = task rank
    skip_if_exists: Path | None = None


@dataclass(frozen=True)
class SbatchSpec:
    job_name: str
    output_dir: Path
    num_nodes: int
    steps: tuple[SrunStep, ...]
    partition: str | None = None
    account: str | None = None
    gpus_per_node: int | None = None
    time_limit: str | None = None
    extra_sbatch_args: tuple[str, ...] = ()
    nodelist: tuple[str, ...] = ()  # the scenario's nodes = [...], as CloudAI resolved them
    exclude: tuple[str, ...] = ()  # the scenario's exclude_nodes (used only without a node list, as CloudAI does)
    mpi: str = "pmix"
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    container_mount_home: bool = False
    extra_srun_args: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    header: str = ""


PATH_FIX = "choose an --output-dir, scenario name and test id without '%', '\\' or control characters"

# Options the script sets itself, or that move its output (or split it): an extra_sbatch_args element must not
# override them. sbatch takes any unambiguous prefix of a long option (getopt_long), so a prefix is refused too.
_RESERVED_LONG = ("--output", "--error", "--input", "--chdir", "--job-name", "--nodes", "--nodelist", "--exclude",
                  "--ntasks-per-node", "--partition", "--account", "--time", "--wrap", "--array")
_RESERVED_SHORT = set("oeiDJNwxpAta")
_SHORT_WITH_ARG = set("ABcCdDeFGiJLmMnNopPqStUwx")
# sbatch's long options that take no value (or an optional one, given only with '='); every other one takes a value,
# which sbatch would take from the next word, i.e. the next #SBATCH line: such an option must carry it with '='
_LONG_NO_VALUE = ("--contiguous", "--exclusive", "--hold", "--ignore-pbs", "--no-kill", "--no-requeue",
                  "--overcommit", "--oversubscribe", "--parsable", "--quiet", "--reboot", "--requeue", "--spread-job",
                  "--test-only", "--use-min-nodes", "--verbose", "--wait", "--get-user-env", "--propagate",
                  "--nice")
_LONG_NAME = re.compile(r"--[A-Za-z][A-Za-z0-9-]*\Z")


def extra_sbatch_directive(arg: str) -> str:
    """One element of the system's extra_sbatch_args: exactly one sbatch option (``--name`` or ``--name=value``;
    a short option with its value attached), written as one word: a value holding spaces or quotes reaches sbatch as
    written. Refused: what is no option, an option with its value as a separate word, an option the script sets
    itself (--output, --chdir, --nodes...)."""
    what = "system extra_sbatch_args element"
    text = str(arg)
    fix = ("one sbatch option per element, its value joined with '=' (e.g. \"--constraint=gpu\", "
           "\"--comment=two words\"); the output files, folder, nodes, partition, account and time come from their "
           "own fields")
    if not text.startswith("-") or text in ("-", "--"):
        raise SbatchFieldError(f"{what} {text!r} is not an sbatch option. Fix: {fix}")
    if text.startswith("--"):
        name = text.split("=", 1)[0]
        if not _LONG_NAME.match(name):
            raise SbatchFieldError(
                f"{what} {text!r}: {name!r} is not one option name (a value must follow '=' in the same word). "
                f"Fix: {fix}"
            )
        if any(r.startswith(name) for r in _RESERVED_LONG):
            raise SbatchFieldError(f"{what} {text!r} would override {name!r}, which the generated script sets. "
                                   f"Fix: {fix}")
        if "=" not in text and text not in _LONG_NO_VALUE:
            raise SbatchFieldError(
                f"{what} {text!r} has no '=value': sbatch would take the next #SBATCH word as its value. Fix: {fix}"
            )
    else:
        for ch in text[1:]:
            if ch in _RESERVED_SHORT:
                raise SbatchFieldError(f"{what} {text!r} would override '-{ch}', which the generated script sets. "
                                       f"Fix: {fix}")
            if not ch.isalpha():
                raise SbatchFieldError(f"{what} {text!r} is not one sbatch option. Fix: {fix}")
            if ch in _SHORT_WITH_ARG:
                if text.endswith(ch):
                    raise SbatchFieldError(
                        f"{what} {text!r} has no value attached: sbatch would take the next #SBATCH word as its value. "
                        f"Fix: {fix}"
                    )
                break
    return directive_word(text, what)


def results_path_problems(output_dir: Path, scenario_name: str, test_ids: list[str],
                          container: bool = False) -> list[str]:
    """What makes the results folders of a scenario (<output dir>/<scenario name>_<time>/<test id>/<n>) unusable in a
    generated sbatch script, each naming the part it comes from: the --output-dir (or the system's output_path),
    the scenario's name or a test id. Checked at dry-run, before anything is written."""
    parts = [("--output-dir (or the system's output_path)", str(output_dir)), ("scenario name", scenario_name)]
    parts += [("test id", tid) for tid in dict.fromkeys(test_ids)]
    problems = []
    for what, value in parts:
        try:
            filename_pattern_path(value, what, PATH_FIX)
            if container:
                bad = next((c for c in ",:" if c in value), None)
                if bad:
                    raise SbatchFieldError(
                        f"{what} {value!r} holds {bad!r}: the results folder is mounted into the container with "
                        "--container-mounts=SRC:DST,..., where ',' separates mounts and ':' source from destination. "
                        "Fix: choose an --output-dir, scenario name and test id without ',' or ':'."
                    )
        except SbatchFieldError as exc:
            problems.append(str(exc))
    return problems


def _node(name: str, what: str, problem: str | None) -> str:
    """A node name or hostlist Slurm resolves (launch/hostlist.py), as one #SBATCH word."""
    text = sbatch_name(name, what, hostlist_fix())
    if problem:
        raise SbatchFieldError(f"{what} {text!r} {problem}: sbatch would refuse the job (\"Invalid node name "
                               f"specified\"). Fix: {hostlist_fix()}")
    return text


def _directives(spec: SbatchSpec) -> list[str]:
    out = spec.output_dir
    stdout = filename_pattern_path(out / "stdout.txt", "results folder", PATH_FIX)
    stderr = filename_pattern_path(out / "stderr.txt", "results folder", PATH_FIX)
    lines = [
        f"#SBATCH --job-name={_JOB_NAME_UNSAFE.sub('_', spec.job_name)}",
        f"#SBATCH --output={directive_word(stdout, 'results folder')}",
        f"#SBATCH --error={directive_word(stderr, 'results folder')}",
        f"#SBATCH --nodes={spec.num_nodes}",
        # The allocation must hold the widest step: srun cannot start more tasks per node than the job was given.
        f"#SBATCH --ntasks-per-node={max((s.ntasks_per_node for s in spec.steps), default=1)}",
    ]
    if spec.nodelist:  # names CloudAI resolved (a hostlist is taken too)
        names = [_node(n, "scenario nodes entry", hostlist_problem(n)) for n in spec.nodelist]
        lines.append(f"#SBATCH --nodelist={','.join(names)}")
    elif spec.exclude:  # the scenario's entries as written: hostlists
        names = [_node(n, "scenario exclude_nodes entry", hostlist_problem(n)) for n in spec.exclude]
        lines.append(f"#SBATCH --exclude={','.join(names)}")
    if spec.partition:
        part = sbatch_name(spec.partition, "system default_partition", "use the partition's name as sinfo shows it")
        lines.append(f"#SBATCH --partition={part}")
    if spec.account:
        acct = sbatch_name(spec.account, "system account", "use the account's name as sacctmgr shows it; other "
                           "sbatch options go in extra_sbatch_args, one per element")
        lines.append(f"#SBATCH --account={acct}")
    if spec.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    if spec.time_limit:
        limit = sbatch_name(spec.time_limit, "scenario time_limit", "write HH:MM:SS or D-HH:MM:SS")
        lines.append(f"#SBATCH --time={limit}")
    lines.extend(f"#SBATCH {extra_sbatch_directive(arg)}" for arg in spec.extra_sbatch_args)
    return lines


def srun_line(spec: SbatchSpec, step: SrunStep) -> str:
    parts: list[str] = [
        "srun",
        "--export=ALL",
        f"--mpi={spec.mpi}",
        f"--nodes={step.num_nodes}",
        f"--ntasks-per-node={step.ntasks_per_node}",
        "--kill-on-bad-exit=1",
        f"--output={filename_pattern_path(spec.output_dir / 'logs', 'results folder', PATH_FIX)}/{step.log_name}",
    ]
    if spec.container_image:
        bad = next((c for c in ",:" if c in str(spec.output_dir)), None)
        if bad:
            raise SbatchFieldError(
                f"results folder {str(spec.output_dir)!r} holds {bad!r}: it is mounted into the container with "
                "--container-mounts=SRC:DST,..., where ',' separates mounts and ':' source from destination. "
                "Fix: choose an --output-dir, scenario name and test id without ',' or ':'."
            )
        parts.append(f"--container-image={spec.container_image}")
        if spec.container_mounts:
            parts.append(f"--container-mounts={','.join(spec.container_mounts)}")
        if not spec.container_mount_home:
            parts.append("--no-container-mount-home")
    parts.extend(split_args(spec.extra_srun_args, "extra_srun_args"))
    parts.extend(step.argv)
    return argv(parts)


def render_sbatch(spec: SbatchSpec) -> str:
    out = spec.output_dir
    lines = ["#!/bin/bash", *([spec.header] if spec.header else []), *_directives(spec), ""]
    lines += [
        "set -euo pipefail",
        'MASTER_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"',  # no head: SIGPIPE under pipefail
        # The node's address as Slurm knows it; emulated nodes (several slurmd on one host) have no DNS name.
        'MASTER_ADDR="$(scontrol show node "$MASTER_NODE" | sed -n \'s/.*NodeAddr=\\([^ ]*\\).*/\\1/p\')"',
        'export MASTER_ADDR="${MASTER_ADDR:-$MASTER_NODE}"',
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
        *env_exports(spec.env),
        # after the test's and the system's own PYTHONPATH (if any): the staged payload comes first, theirs behind it
        f'export PYTHONPATH={q(out)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        f"mkdir -p {q(out / 'logs')}",
        "",
    ]
    for step in spec.steps:
        lines.append(f"echo {q(f'cloudai-mbridge: step {step.name} starts')} \"$(date -u +%FT%TZ)\"")
        if step.skip_if_exists is not None:
            lines.append(f"if [ -e {q(step.skip_if_exists)} ]; then")
            lines.append(f"    echo {q(f'cloudai-mbridge: step {step.name} skipped: {step.skip_if_exists} exists')}")
            lines.append("else")
            lines.append(f"    {srun_line(spec, step)}")
            lines.append("fi")
        else:
            lines.append(srun_line(spec, step))
    lines.append("echo 'cloudai-mbridge: job finished' \"$(date -u +%FT%TZ)\"")
    return "\n".join(lines) + "\n"
