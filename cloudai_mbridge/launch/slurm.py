"""Render a complete sbatch script from plain data: no CloudAI, no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .shell import argv, env_exports, q, single_line, split_args

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
    mpi: str = "pmix"
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    container_mount_home: bool = False
    extra_srun_args: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    header: str = ""


def _directives(spec: SbatchSpec) -> list[str]:
    out = spec.output_dir
    lines = [
        f"#SBATCH --job-name={_JOB_NAME_UNSAFE.sub('_', spec.job_name)}",
        f"#SBATCH --output={single_line(str(out / 'stdout.txt'), 'output path')}",
        f"#SBATCH --error={single_line(str(out / 'stderr.txt'), 'output path')}",
        f"#SBATCH --nodes={spec.num_nodes}",
        # The allocation must hold the widest step: srun cannot start more tasks per node than the job was given.
        f"#SBATCH --ntasks-per-node={max((s.ntasks_per_node for s in spec.steps), default=1)}",
    ]
    if spec.partition:
        lines.append(f"#SBATCH --partition={single_line(spec.partition, 'partition')}")
    if spec.account:
        lines.append(f"#SBATCH --account={single_line(spec.account, 'account')}")
    if spec.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    if spec.time_limit:
        lines.append(f"#SBATCH --time={single_line(spec.time_limit, 'time_limit')}")
    lines.extend(f"#SBATCH {single_line(arg, 'extra_sbatch_args')}" for arg in spec.extra_sbatch_args)
    return lines


def srun_line(spec: SbatchSpec, step: SrunStep) -> str:
    parts: list[str] = [
        "srun",
        "--export=ALL",
        f"--mpi={spec.mpi}",
        f"--nodes={step.num_nodes}",
        f"--ntasks-per-node={step.ntasks_per_node}",
        "--kill-on-bad-exit=1",
        f"--output={spec.output_dir / 'logs' / step.log_name}",
    ]
    if spec.container_image:
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
        'MASTER_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        # The node's address as Slurm knows it; emulated nodes (several slurmd on one host) have no DNS name.
        'MASTER_ADDR="$(scontrol show node "$MASTER_NODE" | sed -n \'s/.*NodeAddr=\\([^ ]*\\).*/\\1/p\')"',
        'export MASTER_ADDR="${MASTER_ADDR:-$MASTER_NODE}"',
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
        f'export PYTHONPATH={q(out)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        *env_exports(spec.env),
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
