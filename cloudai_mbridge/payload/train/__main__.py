"""Training payload: `python3 -m mbridge_payload.train --config <run>/mbridge_config.json`, one process per GPU.

Reads the config launch/training.py wrote (keys: train_config.REQUIRED_KEYS and OPTIONAL_KEYS), prints it in full
on rank 0 (MBRIDGE_CONFIG, one JSON line), resolves rank/world/master from torchrun, Slurm or Kubernetes variables
(dist_env) and runs one engine:

- "bridge": Megatron-Bridge's recipe for the model family with the sweep point applied, then pretrain()/finetune()
  (train_bridge.py). Its per-iteration lines are Bridge's own.
- "mcore": a Megatron-Core-only loop for proxy models where Bridge / Transformer Engine are missing
  (train_mcore.py); its lines are Megatron-LM's training_log lines, byte for byte.
- "auto" (default): "bridge" when megatron.bridge imports, else "mcore".

Rank 0 prints, before anything is built, MBRIDGE_VERSIONS {json} (payload/versions.py: date, host and the versions
of torch, CUDA, NCCL, Megatron-Core, Megatron-Bridge and Transformer Engine), read back by the reports.
Both engines print, rank 0, once the model is built:
  MBRIDGE_DISPATCHER requested=<alltoall|deepep|hybridep|ncclep> built=<alltoall|flex|allgather>
      backend=<deepep|hybridep|ncclep|none>   (one line)
  MBRIDGE_DEEP_EP module=<deep_ep.__file__|none> provider=<uccl|nvidia|unknown|none>
and, before the model is built, for ncclep (bridge engine only):
  MBRIDGE_NCCL_EP module=<transformer_engine.pytorch.ep file> te=<version> bootstrap=<native|num_topk=K>
and exit non-zero ("dispatcher downgraded") when the built dispatcher is not the requested one.

Every rank prints MBRIDGE_STAGE lines as it goes (init, model_built, first_dispatch, iteration_1) and runs a progress
watchdog (payload/train/watchdog.py): no new stage or finished iteration for ``hang_timeout_s`` seconds (config key,
default 1200, 0 = off) prints every thread's stack and ``MBRIDGE_HANG class=<init|first_dispatch|later> stage=<s>
after_s=<n> rank=<r>`` and ends the process with exit code 124.

Exit codes: 0 done, 2 configuration error, 3 dispatcher error, 124 hang (the watchdog); anything else is a crash with
its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import dist_env
from ..versions import versions_line
from .config import ConfigError, load_config, select_engine
from .log import DispatcherError
from .watchdog import EXIT_HANG  # noqa: F401  (the exit code of a hang, listed above)

EXIT_CONFIG = 2
EXIT_DISPATCHER = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mbridge_payload.train", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="mbridge_config.json written by the generator")
    return parser.parse_args(argv)


def config_line(cfg: dict[str, Any]) -> str:
    return "MBRIDGE_CONFIG " + json.dumps(cfg, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dist = None
    try:
        cfg = load_config(args.config)
        dist = dist_env.resolve()
        if cfg["world_size"] is not None and cfg["world_size"] != dist.world_size:
            raise ConfigError(
                f"world_size = {cfg['world_size']} in the config but {dist.world_size} processes were started; "
                "the job's task count must match num_nodes * gpus_per_node"
            )
        dist_env.export(dist)
        from . import watchdog

        watchdog.start(cfg["hang_timeout_s"], dist.rank)
        from . import bridge as train_bridge

        engine = select_engine(cfg["engine"], train_bridge.available())
        if dist.rank == 0:
            print(config_line(cfg), flush=True)
            print(f"MBRIDGE_ENGINE requested={cfg['engine']} selected={engine}", flush=True)
            print(versions_line(), flush=True)
        if engine == "bridge":
            train_bridge.run(cfg, dist)
        else:
            from . import mcore as train_mcore

            train_mcore.run(cfg, dist)
    except ConfigError as e:
        _report("MBRIDGE_CONFIG_ERROR", e, dist)
        return EXIT_CONFIG
    except DispatcherError as e:
        _report("MBRIDGE_DISPATCHER_ERROR", e, dist)
        return EXIT_DISPATCHER
    return 0


def _report(tag: str, error: Exception, dist: dist_env.DistEnv | None) -> None:
    """Every rank fails the same way; one copy of the message is enough (rank 0, or whoever has no rank yet)."""
    if dist is None or dist.rank == 0:
        print(f"{tag} {error}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
