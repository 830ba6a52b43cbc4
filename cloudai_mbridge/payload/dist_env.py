"""torch.distributed environment from whatever launched us: torchrun, Slurm's srun, or a Kubernetes indexed Job."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def _first(env: dict[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            return value
    return None


def resolve(env: dict[str, str] | None = None) -> DistEnv:
    """Read rank/world/master from torchrun variables first, then Slurm's, then a single-process default.

    Slurm gives SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID per task; MASTER_ADDR is exported by the sbatch script
    (first host of the allocation) and MASTER_PORT derived from the job id so two jobs on one node don't collide.
    """
    env = dict(os.environ if env is None else env)
    rank = int(_first(env, "RANK", "SLURM_PROCID") or 0)
    world = int(_first(env, "WORLD_SIZE", "SLURM_NTASKS") or 1)
    local = int(_first(env, "LOCAL_RANK", "SLURM_LOCALID") or 0)
    addr = _first(env, "MASTER_ADDR") or "127.0.0.1"
    port_text = _first(env, "MASTER_PORT")
    if port_text is None:
        job = int(_first(env, "SLURM_JOB_ID") or 0)
        port_text = str(20000 + job % 20000)
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside world size {world}: check RANK/WORLD_SIZE or SLURM_PROCID/NTASKS")
    return DistEnv(rank=rank, world_size=world, local_rank=local, master_addr=addr, master_port=int(port_text))


def export(dist: DistEnv) -> None:
    """Make the resolved values visible to libraries that read the torchrun variables themselves."""
    os.environ.update(
        RANK=str(dist.rank),
        WORLD_SIZE=str(dist.world_size),
        LOCAL_RANK=str(dist.local_rank),
        MASTER_ADDR=dist.master_addr,
        MASTER_PORT=str(dist.master_port),
    )
