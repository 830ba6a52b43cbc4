"""Megatron-Bridge's own pretrain() with the recipe and overrides the payload would apply, and nothing else: the
reference that benchmarks/payload_overhead.py times the payload against.

    python3 -m benchmarks.plain_bridge --config <run>/mbridge_config.json     (one process per GPU, torchrun variables)

What it shares with the payload (payload/train/bridge.py): the config file, the Hugging Face cache the payload
prepares for the catalog's model (hf_config.prepare) and build_container (the recipe's ConfigContainer with every
field of the point). What it leaves out: the payload's rank-0 lines (config, engine, versions), the deep_ep import
check, NCCL EP preparation, the dispatcher report and every callback (routing hash, memory report). Exit 0 when
pretrain() returns; anything else is a crash with its traceback.
"""

from __future__ import annotations

import argparse
import sys
import tempfile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)

    from cloudai_mbridge.payload import dist_env, hf_config
    from cloudai_mbridge.payload.train.bridge import build_container
    from cloudai_mbridge.payload.train.config import load_config

    cfg = load_config(args.config)
    dist_env.export(dist_env.resolve())
    hub = hf_config.prepare(cfg, cfg["output_dir"] or tempfile.mkdtemp(prefix="plain_bridge_hf_"))

    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain

    _, container = build_container(cfg, str(hub.model_dir), report=lambda line: None)
    pretrain(container, forward_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
