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
    """Read rank/world/master from the launcher that started this process.

    torchrun (TORCHELASTIC_RUN_ID set) wins; inside an srun step (SLURM_STEP_ID set) Slurm's SLURM_PROCID /
    SLURM_NTASKS / SLURM_LOCALID win over any RANK/WORLD_SIZE inherited from the submitting shell (sbatch forwards
    its environment); otherwise RANK/WORLD_SIZE, else a single process. MASTER_ADDR is exported by the sbatch script
    (the first node's address); MASTER_PORT, when unset, is derived from the job id so two jobs on one node differ.
    """
    env = dict(os.environ if env is None else env)
    if "TORCHELASTIC_RUN_ID" not in env and "SLURM_STEP_ID" in env and "SLURM_PROCID" in env:
        names = (("SLURM_PROCID",), ("SLURM_NTASKS",), ("SLURM_LOCALID",))
    else:
        names = (("RANK", "SLURM_PROCID"), ("WORLD_SIZE", "SLURM_NTASKS"), ("LOCAL_RANK", "SLURM_LOCALID"))
    rank = int(_first(env, *names[0]) or 0)
    world = int(_first(env, *names[1]) or 1)
    local = int(_first(env, *names[2]) or 0)
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
