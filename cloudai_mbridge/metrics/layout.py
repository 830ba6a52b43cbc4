"""Where a run's logs are and which rank's file holds what.

The Slurm and Kubernetes generators write one folder per run::

    <run>/mbridge_config.json      the resolved config the payload ran with
    <run>/logs/rank-<R>.log        one file per global rank R (0-based, unpadded)
    <run>/stdout.txt, stderr.txt   optional job-level output (srun, the pod), possibly every rank interleaved

Which rank prints what (checked against the sources, Megatron-LM ``megatron/training/training.py`` and
``megatron/training/utils/common_utils.py``, Megatron-Bridge ``src/megatron/bridge/training/utils/train_utils.py``
and ``src/megatron/bridge/utils/common_utils.py``):

- the per-iteration line goes through ``print_rank_last``: ``torch.distributed.get_rank() == world_size - 1``;
- Bridge's ``Step Time : ...`` line goes through ``print_rank_0``; so do its flex-dispatcher warnings;
- the ``[Rank N] (after X iterations) memory`` report is printed by every rank whose data-parallel rank is 0.

Why the last rank is always the one to read, whatever the rank order: Megatron-Core numbers ranks with a
mixed-radix code over the parallel sizes in the order of ``rank_order`` (first = fastest varying; default
``tp-cp-ep-dp-pp``). Rank ``world_size - 1`` is the number whose every digit is at its maximum, so it sits on the
last pipeline stage (the one that computes the loss) for every order, not only when PP is outermost. The order does
matter for the memory report: which ranks have data-parallel rank 0 depends on it (:func:`dp_rank0_ranks`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import safejson

CONFIG_NAME = "mbridge_config.json"
LOGS_DIR = "logs"
JOB_LOGS = ("stdout.txt", "stderr.txt")
DEFAULT_RANK_ORDER = "tp-cp-ep-dp-pp"
_RANK_LOG_RE = re.compile(r"^rank-(0|[1-9]\d*)\.log$")


@dataclass(frozen=True)
class RunLayout:
    run_dir: Path
    config: Mapping[str, Any] = field(default_factory=dict)
    config_status: str = "ok"
    rank_logs: Mapping[int, Path] = field(default_factory=dict)
    job_logs: tuple[Path, ...] = ()
    world_size: int | None = None
    world_size_source: str = "config"

    @property
    def last_rank(self) -> int | None:
        return None if self.world_size is None else self.world_size - 1

    @property
    def missing_ranks(self) -> tuple[int, ...]:
        if self.world_size is None:
            return ()
        return tuple(r for r in range(self.world_size) if r not in self.rank_logs)

    @property
    def workload(self) -> str | None:
        value = self.config.get("workload")
        return value if isinstance(value, str) else None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return int(value)
    return None


MAX_WORLD_SIZE = 1 << 20  # ranks; a larger count in a config is damage (and would be allocated rank by rank)


def config_problem(config: dict[str, Any]) -> str | None:
    """Fields we write as ints that a damaged config carries as something else (or absurd)."""
    for key in ("world_size", "num_nodes", "gpus_per_node"):
        if key in config:
            v = config[key]
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_WORLD_SIZE:
                return f"{key} = {v!r} is not a whole number from 1 to {MAX_WORLD_SIZE}"
    for key in ("gpu", "dispatcher", "precision", "task", "engine", "workload"):
        if key in config and not isinstance(config[key], str):
            return f"{key} = {config[key]!r} is not a string"
    return None


def _read_config(run_dir: Path) -> tuple[dict[str, Any], str]:
    path = run_dir / CONFIG_NAME
    from ..safe_read import MAX_JSON_BYTES, InputFileError, read_bytes

    try:
        data = safejson.loads(read_bytes(path, MAX_JSON_BYTES, "the run's config"))
    except FileNotFoundError:
        return {}, "missing"
    except (OSError, ValueError, InputFileError):  # a FIFO / device / huge file is never read (issue 32)
        return {}, "invalid"
    if not isinstance(data, dict) or config_problem(data):
        return {}, "invalid"
    return data, "ok"


def load_layout(run_dir: Path | str) -> RunLayout:
    run_dir = Path(run_dir)
    config, config_status = _read_config(run_dir)
    rank_logs: dict[int, Path] = {}
    logs = run_dir / LOGS_DIR
    if logs.is_dir():
        for path in logs.iterdir():
            match = _RANK_LOG_RE.match(path.name)
            if match and path.is_file() and int(match.group(1)) < MAX_WORLD_SIZE:
                rank_logs[int(match.group(1))] = path
    job_logs = tuple(run_dir / name for name in JOB_LOGS if (run_dir / name).is_file())

    world = _positive_int(config.get("world_size"))
    source = "config"
    if world is None:
        nodes, per_node = _positive_int(config.get("num_nodes")), _positive_int(config.get("gpus_per_node"))
        if nodes and per_node:
            world, source = nodes * per_node, "num_nodes*gpus_per_node"
        elif rank_logs:
            world, source = max(rank_logs) + 1, "rank_logs"
        else:
            source = "unknown"
    return RunLayout(
        run_dir=run_dir,
        config=config,
        config_status=config_status,
        rank_logs=dict(sorted(rank_logs.items())),
        job_logs=job_logs,
        world_size=world,
        world_size_source=source,
    )


def dp_rank0_ranks(config: Mapping[str, Any], world_size: int | None) -> tuple[int, ...] | None:
    """Global ranks whose dense data-parallel rank is 0, or None when the config cannot say.

    Megatron-Core builds the dense groups with ``RankGenerator(ep=1, order=rank_order)``, so ``ep`` drops out of
    the order and dp = world / (tp * cp * pp).
    """
    if world_size is None:
        return None
    order = config.get("rank_order", DEFAULT_RANK_ORDER)
    if not isinstance(order, str):
        return None
    sizes: dict[str, int] = {}
    for name in ("tp", "cp", "pp"):
        value = _positive_int(config.get(name, 1))
        if value is None:
            return None
        sizes[name] = value
    model_parallel = sizes["tp"] * sizes["cp"] * sizes["pp"]
    if world_size % model_parallel:
        return None
    sizes["dp"] = world_size // model_parallel
    dims = [d for d in order.split("-") if d != "ep"]
    # Megatron-Core appends a dimension the order leaves out when its size is 1 (RankGenerator.__init__).
    dims += [d for d in sizes if d not in dims and sizes[d] == 1]
    if sorted(dims) != sorted(sizes):
        return None
    stride = 1
    for dim in dims:
        if dim == "dp":
            break
        stride *= sizes[dim]
    dp = sizes["dp"]
    return tuple(r for r in range(world_size) if (r // stride) % dp == 0)
